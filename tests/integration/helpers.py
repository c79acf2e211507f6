"""Helpers for integration tests against the real PostgreSQL and Kafka."""

from __future__ import annotations

import time
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

import asyncpg
from aiokafka import AIOKafkaConsumer, ConsumerRecord
from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from memwright.events import Signal
from memwright.settings import KafkaSettings
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


async def new_topic(kafka: KafkaSettings, purpose: str, partitions: int = 1) -> str:
    """A topic of this test's own, beside the session's changelog topic."""
    name = f"{kafka.topic_changelog}.{purpose}-{uuid.uuid4().hex[:6]}"
    admin = AIOKafkaAdminClient(bootstrap_servers=kafka.kafka_bootstrap)
    await admin.start()
    try:
        await admin.create_topics([NewTopic(name, partitions, 1)])
    finally:
        await admin.close()
    return name


async def read_topic(kafka: KafkaSettings, topic: str, expected: int, timeout: float = 30) -> list[ConsumerRecord]:
    """Every record of `topic` from the start, read until `expected` arrived (or `timeout`)."""
    consumer = AIOKafkaConsumer(
        topic, bootstrap_servers=kafka.kafka_bootstrap, auto_offset_reset="earliest", enable_auto_commit=False
    )
    await consumer.start()
    records: list[ConsumerRecord] = []
    deadline = time.monotonic() + timeout
    try:
        while len(records) < expected and time.monotonic() < deadline:
            for batch in (await consumer.getmany(timeout_ms=500)).values():
                records += batch
    finally:
        await consumer.stop()
    return records


MEMORY_TOPICS = ["coffee", "hiking trips", "jazz records", "metric units", "French replies"]


async def as_user(pool: asyncpg.Pool, sql: str, *args: Any) -> None:
    """Change memories as the user's own transaction (the database lets only it touch user-written ones)."""
    async with pool.acquire() as conn, conn.transaction():
        await conn.execute("SET LOCAL memwright.actor = 'user'")
        await conn.execute(sql, *args)


async def seed_memories(pool: asyncpg.Pool, users: dict[str, int]) -> dict[str, list[str]]:
    """Insert user-written memories (no budget applies to them); return their ids per user."""
    ids: dict[str, list[str]] = {}
    rows = []
    for user, n in users.items():
        for i in range(n):
            mid = uuid.uuid4()
            ids.setdefault(user, []).append(str(mid))
            rows.append((mid, user, "user", f"{user} likes {MEMORY_TOPICS[i % len(MEMORY_TOPICS)]}, note {i}"))
    await pool.executemany("INSERT INTO memories (memory_id, user_id, author, text) VALUES ($1, $2, $3, $4)", rows)
    return ids


def refuse_messages_sql(name: str, condition: str) -> str:
    """SQL for a trigger that refuses inserts into messages where `condition` holds (on NEW), as
    PostgreSQL does for a row lock it cannot take: the sweeper keeps those windows for a retry."""
    return f"""
CREATE OR REPLACE FUNCTION {name}() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'refused for a while (test)' USING ERRCODE = 'lock_not_available';
END $$;
CREATE TRIGGER {name} BEFORE INSERT ON messages FOR EACH ROW WHEN ({condition}) EXECUTE FUNCTION {name}();
"""


def allow_messages_sql(name: str) -> str:
    return f"DROP TRIGGER IF EXISTS {name} ON messages; DROP FUNCTION IF EXISTS {name}();"
