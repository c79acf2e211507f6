"""Helpers for integration tests against the real PostgreSQL."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import asyncpg
from memwright.events import Signal
from memwright.store.sweeps import write_window


def sig(user: str, mid: str, text: str, conv: str = "c1", at: datetime | None = None) -> Signal:
    return Signal(user, mid, conv, text, accepted_at=at or datetime.now(UTC))


async def sweep(pool: asyncpg.Pool, user: str, *texts: str, conv: str = "c1", ago: float = 0.0) -> list[str]:
    """Write one window of signals for `user`; return their message ids."""
    at = datetime.now(UTC) - timedelta(seconds=ago)
    signals = [sig(user, f"{user}-{conv}-{i}-{abs(hash(t)) % 10_000}", t, conv, at) for i, t in enumerate(texts)]
    async with pool.acquire() as conn:
        await write_window(conn, user, signals)
    return [s.message_id for s in signals]
