"""structlog setup: JSON lines in services, readable console output for CLI tools.

Message text is never logged at info level; log ids (user, message, run), not content.
"""

from __future__ import annotations

import logging
import sys
import time
from collections.abc import Callable
from typing import Any

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


class Condition:
    """A failure that may repeat many times a second (Kafka away, a dependency down), logged as one
    condition: at WARNING when it starts, then at most every `every` seconds with how long it has
    lasted and how many attempts failed, and at INFO once when it clears."""

    def __init__(self, event: str, every: float = 30.0, clock: Callable[[], float] = time.monotonic, **fields: Any):
        self.event = event
        self.every = every
        self.clock = clock
        self.fields = fields
        self.since: float | None = None
        self.attempts = 0
        self._reported = 0.0

    @property
    def active(self) -> bool:
        return self.since is not None

    def failed(self, **fields: Any) -> None:
        now = self.clock()
        self.attempts += 1
        if self.since is None:
            self.since = self._reported = now
            structlog.get_logger().warning(self.event, **self.fields, **fields)
        elif now - self._reported >= self.every:
            self._reported = now
            structlog.get_logger().warning(
                self.event, for_s=round(now - self.since), attempts=self.attempts, **self.fields, **fields
            )

    def cleared(self) -> None:
        if self.since is None:
            return
        structlog.get_logger().info(
            f"{self.event}_cleared", after_s=round(self.clock() - self.since, 1), attempts=self.attempts, **self.fields
        )
        self.since = None
        self.attempts = 0
