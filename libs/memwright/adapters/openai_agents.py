"""memwright for the OpenAI Agents SDK (`openai-agents`, tested with 0.24.0).

The two calls of a turn, in the SDK's own terms:

    client = MemwrightClient(api_url, token, ingest_url)
    agent = Agent(name="assistant", instructions=MemwrightInstructions(client, "You are a helpful assistant."))
    session = MemwrightSession("conv-42", client, user_id="alice")
    await Runner.run(agent, "Always answer in metric units", session=session, context=Turn(user_id="alice"))

- `MemwrightInstructions` is the agent's dynamic instructions: its own instructions, then the
  user's start-of-turn block. The SDK calls it before every model call; the client sends the last
  ETag in If-None-Match, so an unchanged block costs a 304.
- `MemwrightSession` implements the SDK's `Session` protocol (agents.memory.session): it keeps the
  conversation in another Session (`history`, an in-memory SQLiteSession unless given: memwright
  remembers what matters about the user, not transcripts) and sends each user item the runner
  saves to ingest, with a message id derived from the session, its position and its text, so a
  repeated save is one signal.

When memwright is down the turn goes on: no block, and the user's item is not sent (a warning
is logged). A refusal (a bad token, another user's id) raises MemwrightError.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any

import structlog

from memwright.adapters import is_outage, message_id, missing_framework
from memwright.client import MemwrightClient, MemwrightError

try:
    from agents import Agent, RunContextWrapper, SQLiteSession
    from agents.items import TResponseInputItem
    from agents.memory import Session, SessionSettings
except ImportError as exc:  # pragma: no cover - exercised only without the SDK installed
    raise missing_framework("the OpenAI Agents SDK", "openai-agents==0.24.0", "openai_agents") from exc

log = structlog.get_logger("memwright.adapters.openai_agents")

UserId = str | Callable[[Any], str]


def _user_of(user_id: UserId | None, context: Any) -> str:
    """The user of this run: given, or computed from the run's context, or its `user_id`."""
    if isinstance(user_id, str):
        return user_id
    if user_id is not None:
        return user_id(context)
    found = context.get("user_id") if isinstance(context, dict) else getattr(context, "user_id", None)
    if not isinstance(found, str) or not found:
        raise ValueError(
            "MemwrightInstructions has no user: pass user_id=..., or run with a context that has a user_id"
        )
    return found


class MemwrightInstructions:
    """Dynamic instructions: `instructions`, then the user's start-of-turn block.

    `user_id`: the user's id, or a function of the run's context object; by default the context's
    `user_id` (attribute or key)."""

    def __init__(self, client: MemwrightClient, instructions: str, user_id: UserId | None = None) -> None:
        self.client = client
        self.instructions = instructions
        self.user_id = user_id

    async def __call__(self, context: RunContextWrapper[Any], agent: Agent[Any]) -> str:
        user = _user_of(self.user_id, context.context)
        try:
            block = (await self.client.context(user)).block
        except MemwrightError as exc:
            if not is_outage(exc):
                raise
            log.warning("memwright unreachable: instructions without the user's memories", error=str(exc))
            return self.instructions
        return f"{self.instructions}\n\n{block}"


def user_text(item: Any) -> str | None:
    """The text of a user message item (plain content or input_text parts); None for anything else."""
    if not isinstance(item, dict) or item.get("role") != "user" or item.get("type", "message") != "message":
        return None
    content = item.get("content")
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = [p.get("text", "") for p in content if isinstance(p, dict) and p.get("type") == "input_text"]
        return "\n".join(p for p in parts if p) or None
    return None


class MemwrightSession:
    """A `Session` that keeps history in `history` and sends each user turn to memwright's ingest.

    `conversation_id` defaults to the session id; `project_id` is passed on with every signal."""

    session_settings: SessionSettings | None = None

    def __init__(
        self,
        session_id: str,
        client: MemwrightClient,
        user_id: str,
        history: Session | None = None,
        conversation_id: str | None = None,
        project_id: str | None = None,
    ) -> None:
        self.session_id = session_id
        self.client = client
        self.user_id = user_id
        self.history: Session = history if history is not None else SQLiteSession(session_id)
        self.conversation_id = conversation_id or session_id
        self.project_id = project_id

    async def get_items(self, limit: int | None = None) -> list[TResponseInputItem]:
        return await self.history.get_items(limit)

    async def add_items(self, items: list[TResponseInputItem]) -> None:
        # every item, not the session's default limit: past it the position would stop growing and
        # two turns with the same words would share a message id (ingest would drop the second)
        position = len(await self.history.get_items(sys.maxsize))
        await self.history.add_items(items)
        for offset, item in enumerate(items):
            text = user_text(item)
            if text and text.strip():
                await self._send(message_id(self.user_id, self.session_id, position + offset, text), text)

    async def _send(self, mid: str, text: str) -> None:
        try:
            await self.client.send(self.user_id, mid, self.conversation_id, text, project_id=self.project_id)
        except MemwrightError as exc:
            if not is_outage(exc):
                raise
            log.warning("memwright unreachable: this user turn is not remembered", message_id=mid, error=str(exc))

    async def pop_item(self) -> TResponseInputItem | None:
        """Pops from the history only: a turn already sent to memwright stays sent."""
        return await self.history.pop_item()

    async def clear_session(self) -> None:
        """Clears the history only; the user's memories are theirs to delete (the api, `forget`)."""
        await self.history.clear_session()
