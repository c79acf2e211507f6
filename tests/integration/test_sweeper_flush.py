"""The sweeper's window write against the real PostgreSQL: a signal that arrives while its
user's window is being written is neither acked with that window nor lost (invariant 10)."""

from __future__ import annotations

import asyncio

import asyncpg
from memwright.settings import SweeperSettings
from memwright.sweeping import Sweeper

from tests.integration.helpers import sig


class Receipt:
    """Stands in for a faust event: records whether its offset was acknowledged."""

    def __init__(self) -> None:
        self.acked = False

    def ack(self) -> None:
        self.acked = True


async def no_dead_letters(receipt: object, reason: str) -> None:
    raise AssertionError(f"nothing here may be dead-lettered: {reason}")


async def test_a_signal_arriving_during_its_windows_write_waits_for_the_next_window(
    db: asyncpg.Pool, pg_dsn: str
) -> None:
    sweeper = Sweeper(SweeperSettings(pg_dsn=pg_dsn, kafka_bootstrap="unused:9092", window_seconds=1), no_dead_letters)
    first, late = Receipt(), Receipt()
    sweeper.buffer.add(sig("alice", "m1", "hello"), first, now=0.5)
    await db.execute("INSERT INTO agents (user_id) VALUES ('alice')")
    async with db.acquire() as blocker:
        tx = blocker.transaction()
        await tx.start()
        await blocker.execute("SELECT 1 FROM agents WHERE user_id = 'alice' FOR UPDATE")  # the write will wait
        flushing = asyncio.create_task(sweeper.flush_due(now=5))
        await asyncio.sleep(0.5)
        sweeper.buffer.add(sig("alice", "m2", "again"), late, now=5.1)  # consumed during the write
        await tx.rollback()
        await flushing
    assert first.acked and not late.acked
    assert await db.fetchval("SELECT array_agg(message_id) FROM messages") == ["m1"]
    [pending] = sweeper.buffer.all()
    assert [s.message_id for s in pending.signals] == ["m2"] and pending.receipts == [late]
    await sweeper.flush_due(now=10)
    assert late.acked and sweeper.buffer.all() == []
    assert sorted(await db.fetchval("SELECT array_agg(message_id) FROM messages")) == ["m1", "m2"]
    await (await sweeper.pool()).close()
