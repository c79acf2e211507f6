"""The sweeper's window write (invariants 3, 4 and idempotency)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import asyncpg
from memwright.store.sweeps import write_window

from tests.integration.helpers import sig


async def test_window_write_is_idempotent_on_message_id(db: asyncpg.Pool) -> None:
    signals = [sig("u1", "m1", "hello"), sig("u1", "m2", "Always use metric units")]
    async with db.acquire() as conn:
        assert await write_window(conn, "u1", signals) == 2
        assert await write_window(conn, "u1", signals) == 0
    assert await db.fetchval("SELECT count(*) FROM messages") == 2


async def test_backlog_waits_since_the_oldest_unswept_signal(db: asyncpg.Pool) -> None:
    old = datetime.now(UTC) - timedelta(minutes=5)
    async with db.acquire() as conn:
        await write_window(conn, "u1", [sig("u1", "m2", "b", at=old + timedelta(minutes=1))])
        await write_window(conn, "u1", [sig("u1", "m1", "a", at=old)])
        await write_window(conn, "u1", [sig("u1", "m3", "c")])
    assert await db.fetchval("SELECT waiting_since FROM backlog WHERE user_id = 'u1'") == old


async def test_a_replay_of_swept_signals_does_not_wake_the_agent(db: asyncpg.Pool) -> None:
    async with db.acquire() as conn:
        await write_window(conn, "u1", [sig("u1", "m1", "hello")])
        await conn.execute("DELETE FROM backlog")  # as if the agent had curated it
        await write_window(conn, "u1", [sig("u1", "m1", "hello")])
    assert await db.fetchval("SELECT count(*) FROM backlog") == 0
