"""Plug memwright into an agent's turn: read the start-of-turn block before the model runs, send the
user's turn to ingest (the two-call turn contract, docs/integrations.md).

- `hooks`: `memwright hook session-start | user-prompt` for harnesses that run commands (Claude Code).
- `openai_agents`: dynamic instructions and a Session for the OpenAI Agents SDK (`openai-agents`).
- `langgraph`: nodes for a LangGraph graph (`langgraph`).

Each framework adapter imports its framework at import time and says what to install when it is
missing; this package itself needs only the client.
"""

from __future__ import annotations

import uuid

from memwright.client import MemwrightError

# message ids the adapters derive, so a turn sent twice (a retry) is one signal (ingest is idempotent on them)
MESSAGE_IDS = uuid.UUID("5b0c3c52-6f0e-4f5e-9a55-3c1f3f0d2a61")


def message_id(*parts: object) -> str:
    """A stable message id for one turn: the same parts give the same id."""
    return str(uuid.uuid5(MESSAGE_IDS, "\x00".join(map(str, parts))))


def is_outage(error: MemwrightError) -> bool:
    """Whether memwright could not serve (down, unreachable, overloaded) rather than refused the call.

    An outage must not break the working agent's turn: the adapters go on without the block, and
    the turn sent to ingest is lost (logged). A refusal (401/403: a bad token; 400: bad input; 404)
    is a mistake to fix, and is raised."""
    return error.status is None or error.status == 429 or error.status >= 500


def missing_framework(package: str, pin: str, adapter: str) -> ImportError:
    return ImportError(
        f"memwright.adapters.{adapter} needs {package}: pip install '{pin}' (memwright is tested with that version)"
    )
