"""One window never holds back another (invariant 10), against the real PostgreSQL.

A signal PostgreSQL cannot store that reaches the sweeper anyway (the signal check refuses it
today; these build the Signal by hand to stand for whatever the check may miss tomorrow) is
dead-lettered alone, with the reason: the good signals of its window and every other user's
window are written. PostgreSQL being away dead-letters nothing: the windows wait, unacked, and
readiness and the oldest-unwritten-window age show it.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from dataclasses import replace

import asyncpg
import pytest
from memwright.events import Signal
from memwright.settings import SweeperSettings
from memwright.sweeping import MAX_WINDOW_ATTEMPTS, READY_MAX_UNWRITTEN_SECONDS, RETRY_MAX_SECONDS, Sweeper

from tests.integration.helpers import sig


class Receipt:
    """Stands in for a faust event: records whether its offset was acknowledged."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.acked = False

    def ack(self) -> None:
        self.acked = True

    def __repr__(self) -> str:
        return f"Receipt({self.name!r}, acked={self.acked})"


class DeadLetters:
    """Stands in for the dead-letter topic: keeps (receipt, reason) once 'Kafka acknowledged' it."""

    def __init__(self) -> None:
        self.records: list[tuple[Receipt, str]] = []

    async def __call__(self, receipt: Receipt, reason: str) -> None:
        assert not receipt.acked, "a record must be dead-lettered before its offset is acked"
        self.records.append((receipt, reason))


def settings(dsn: str) -> SweeperSettings:
    return SweeperSettings(pg_dsn=dsn, kafka_bootstrap="unused:9092", window_seconds=1)


async def stored(db: asyncpg.Pool) -> list[tuple[str, str]]:
    rows = await db.fetch("SELECT user_id, message_id FROM messages ORDER BY user_id, message_id")
    return [(r["user_id"], r["message_id"]) for r in rows]


def add(sweeper: Sweeper, signal: Signal, now: float) -> Receipt:
    receipt = Receipt(signal.message_id)
    sweeper.add(signal, receipt, now)
    return receipt


@pytest.mark.parametrize(
    ("text", "error"),
    [
        ("nul \x00 inside", "CharacterNotInRepertoireError"),  # refused by the server
        ("lone \ud800 surrogate", "surrogates not allowed"),  # refused by asyncpg's encoder
    ],
    ids=["nul", "lone-surrogate"],
)
async def test_a_signal_postgresql_cannot_store_is_dead_lettered_alone_and_every_other_window_is_written(
    db: asyncpg.Pool, pg_dsn: str, text: str, error: str
) -> None:
    dlq = DeadLetters()
    sweeper = Sweeper(settings(pg_dsn), dlq)
    # the poisoned window is the oldest: today the sweeper stops at it and writes nothing after it
    good1 = add(sweeper, sig("mallory", "m1", "before"), now=0.5)
    poison = add(sweeper, sig("mallory", "m2", text), now=0.6)
    good2 = add(sweeper, sig("mallory", "m3", "after"), now=0.7)
    canary = add(sweeper, sig("carol", "c1", "canary from another user"), now=1.5)
    try:
        await sweeper.flush_due(now=5)
        assert await stored(db) == [("carol", "c1"), ("mallory", "m1"), ("mallory", "m3")]
        [(dead, reason)] = dlq.records
        assert dead is poison and reason.startswith("PostgreSQL cannot store this signal") and error in reason
        assert all(r.acked for r in (good1, poison, good2, canary)), "stored or dead-lettered: every offset moves on"
        assert sweeper.buffer.all() == [] and sweeper.oldest_unwritten_seconds(5) == 0
    finally:
        await sweeper.stop()


async def test_postgresql_away_dead_letters_nothing_and_shows_the_oldest_unwritten_window(
    db: asyncpg.Pool, pg_dsn: str
) -> None:
    dlq = DeadLetters()
    sweeper = Sweeper(settings("postgresql://memwright:memwright@127.0.0.1:1/memwright"), dlq)  # refused
    receipts = [add(sweeper, sig(user, "m1", "hello"), now=0.5) for user in ("ann", "ben", "cid")]
    now = 1.0
    try:
        while now < 1 + READY_MAX_UNWRITTEN_SECONDS + 5:
            await sweeper.flush_due(now)
            now += 0.25
        assert dlq.records == [] and not any(r.acked for r in receipts), "nothing may be dropped or acked"
        assert sweeper.oldest_unwritten_seconds(now) == pytest.approx(now - 1.0)
        assert not sweeper.ready(now), "readiness must show the stall"
        assert all(w.attempts == 0 for w in sweeper.buffer.all()), "unavailability is not the window's fault"
        assert all(w.retry_at <= now + RETRY_MAX_SECONDS for w in sweeper.buffer.all()), "backoff is capped"

        sweeper.settings = replace(sweeper.settings, pg_dsn=pg_dsn)  # PostgreSQL is back
        now += RETRY_MAX_SECONDS
        await sweeper.flush_due(now)
        assert await stored(db) == [("ann", "m1"), ("ben", "m1"), ("cid", "m1")]
        assert all(r.acked for r in receipts) and dlq.records == []
        assert sweeper.ready(now) and sweeper.oldest_unwritten_seconds(now) == 0
    finally:
        await sweeper.stop()


class FlakySweeper(Sweeper):
    """Writes fail for an unknown reason (neither PostgreSQL away nor refused data) whenever they
    include message id 'boom'."""

    async def _write(self, user_id: str, signals: Sequence[Signal]) -> int:
        if any(s.message_id == "boom" for s in signals):
            raise RuntimeError("something no one foresaw")
        return await super()._write(user_id, signals)


async def test_a_window_failing_for_an_unknown_reason_is_retried_a_bounded_number_of_times_then_split(
    db: asyncpg.Pool, pg_dsn: str
) -> None:
    dlq = DeadLetters()
    sweeper = FlakySweeper(settings(pg_dsn), dlq)
    ok, boom = add(sweeper, sig("dan", "ok", "fine"), now=0.5), add(sweeper, sig("dan", "boom", "x"), now=0.6)
    now = 5.0
    try:
        for attempt in range(1, MAX_WINDOW_ATTEMPTS):
            canary = add(sweeper, sig("eve", f"c{attempt}", "canary"), now=now - 1)
            await sweeper.flush_due(now)
            assert canary.acked, "another user's window is written while dan's waits for its retry"
            [waiting] = sweeper.buffer.all()
            assert (waiting.user_id, waiting.attempts, dlq.records) == ("dan", attempt, [])
            assert not ok.acked and not boom.acked
            now = waiting.retry_at
        await sweeper.flush_due(now)
        assert ok.acked and boom.acked and sweeper.buffer.all() == []
        [(dead, reason)] = dlq.records
        assert dead is boom and f"failed {MAX_WINDOW_ATTEMPTS} times" in reason and "RuntimeError" in reason
        assert ("dan", "ok") in await stored(db) and ("dan", "boom") not in await stored(db)
    finally:
        await sweeper.stop()


async def test_a_dead_letter_topic_that_refuses_keeps_the_signal_for_a_retry(db: asyncpg.Pool, pg_dsn: str) -> None:
    class KafkaAway(DeadLetters):
        async def __call__(self, receipt: Receipt, reason: str) -> None:
            raise ConnectionError("Kafka is away")

    sweeper = Sweeper(settings(pg_dsn), KafkaAway())
    poison = add(sweeper, sig("fay", "m1", "\x00"), now=0.5)
    try:
        await sweeper.flush_due(now=5)
        assert not poison.acked, "neither stored nor dead-lettered: its offset must not move on"
        [waiting] = sweeper.buffer.all()
        assert waiting.receipts == [poison] and waiting.retry_at > 5
        sweeper.dead_letter = DeadLetters()  # Kafka is back
        await sweeper.flush_due(now=waiting.retry_at)
        assert poison.acked and sweeper.buffer.all() == []
    finally:
        await sweeper.stop()


async def test_stop_writes_open_windows_and_returns_within_its_timeout_when_a_write_hangs(
    db: asyncpg.Pool, pg_dsn: str
) -> None:
    sweeper = Sweeper(settings(pg_dsn), DeadLetters())
    early = add(sweeper, sig("gus", "m1", "not yet due"), now=time.time())
    await sweeper.stop(timeout=5)
    assert early.acked and await stored(db) == [("gus", "m1")], "stop writes windows that have not closed yet"

    sweeper = Sweeper(settings(pg_dsn), DeadLetters())
    stuck = add(sweeper, sig("gus", "m2", "waits on a lock"), now=time.time())
    async with db.acquire() as blocker, blocker.transaction():
        await blocker.execute("SELECT 1 FROM agents WHERE user_id = 'gus' FOR UPDATE")  # the write waits
        # the lock is released only after stop returns: a stop that ignored its timeout would wait
        # here forever (the generous bound only turns that hang into a failure, it measures nothing)
        await asyncio.wait_for(sweeper.stop(timeout=1), 60)
    assert not stuck.acked and [w.receipts for w in sweeper.buffer.all()] == [[stuck]], "left for redelivery"
    await asyncio.sleep(0)
