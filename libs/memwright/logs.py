"""structlog setup: JSON lines in services, readable console output for CLI tools.

Message text is never logged at info level; log ids (user, message, run), not content.
"""

from __future__ import annotations

import logging
import sys

import structlog


def configure(service: str, level: str = "info", json: bool = True) -> structlog.stdlib.BoundLogger:
    numeric = logging.getLevelName(level.upper())
    if not isinstance(numeric, int):
        numeric = logging.INFO
    renderer: structlog.typing.Processor = (
        structlog.processors.JSONRenderer() if json else structlog.dev.ConsoleRenderer(colors=False)
    )
    structlog.configure(
        processors=[
            structlog.contextvars.merge_contextvars,
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso", utc=True),
            structlog.processors.format_exc_info,
            renderer,
        ],
        wrapper_class=structlog.make_filtering_bound_logger(numeric),
        logger_factory=structlog.PrintLoggerFactory(file=sys.stderr),
        cache_logger_on_first_use=False,
    )
    # Libraries (aiokafka, faust, asyncpg) log through stdlib logging: keep them quiet and on stderr.
    logging.basicConfig(
        stream=sys.stderr, level=max(numeric, logging.WARNING), format="%(name)s %(levelname)s %(message)s"
    )
    structlog.contextvars.clear_contextvars()
    structlog.contextvars.bind_contextvars(service=service)
    return structlog.get_logger()


def get_logger() -> structlog.stdlib.BoundLogger:
    return structlog.get_logger()
