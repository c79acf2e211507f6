"""In-memory building blocks for agent tests: messages, memories and a MemoryTools over them."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta

from memwright.agent.tools import Memory, MemoryTools, Message
from memwright.agent.working import WorkingMemory

T0 = datetime(2026, 1, 1, 9, 0, tzinfo=UTC)


def msg(mid: str, text: str, conv: str = "c1", role: str = "user", at: datetime | None = None, seq: int = 0) -> Message:
    return Message(mid, conv, text, role, at or T0, seq or (abs(hash(mid)) % 100_000))


def conversation(conv: str, *texts: str, start: int = 1, at: datetime | None = None) -> list[Message]:
    """Messages m<start>, m<start+1>, ... of one conversation, a minute apart."""
    base = at or T0
    return [msg(f"m{start + i}", t, conv, at=base + timedelta(minutes=i), seq=start + i) for i, t in enumerate(texts)]


def memory(text: str, author: str = "agent", evidence: list[str] | None = None) -> Memory:
    return Memory(str(uuid.uuid4()), author, "preference", text, 1, list(evidence or []))


def make_tools(
    messages: list[Message],
    memories: list[Memory] | None = None,
    budget: int = 40,
    working: WorkingMemory | None = None,
    user_id: str = "alice",
) -> MemoryTools:
    shown = {m.message_id: m for m in messages}
    return MemoryTools(user_id, list(memories or []), shown, budget, working or WorkingMemory())
