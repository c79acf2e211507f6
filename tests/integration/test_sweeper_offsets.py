"""The sweeper's committed offset never passes a signal it has not stored, against a real Kafka,
PostgreSQL and sweeper process.

Windows close per user, so one partition's signals are written out of offset order: here
yara@0, xavi@1, yara@2 on one partition, and xavi's write fails for a while (lock not available,
as under a long curator commit), so it waits for a retry while yara's window is written. faust
commits "the first run of consecutive acked offsets" and lets a one-offset hole at its head pass,
so acking yara's window would commit offset 3, past xavi's unwritten signal: a crash then loses
it. Acks therefore reach faust in offset order.
"""

from __future__ import annotations

import uuid
from collections.abc import Awaitable
from pathlib import Path

import asyncpg
from aiokafka import AIOKafkaProducer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient
from memwright.events import Signal
from memwright.localrun import ServiceProcesses
from memwright.topics import ensure_topics, isolated_env, prefixed_topics

from tests.e2e.helpers import eventually
from tests.integration.helpers import allow_messages_sql, refuse_messages_sql


async def committed(bootstrap: str, group: str, topic: str, partition: int) -> int:
    """The group's committed offset (the next one it reads) on one partition; -1 when none yet."""
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        offsets = await admin.list_consumer_group_offsets(group)
    finally:
        await admin.close()
    meta = offsets.get(TopicPartition(topic, partition))
    return meta.offset if meta is not None else -1


async def stored(db: asyncpg.Pool, *message_ids: str) -> bool:
    n = await db.fetchval("SELECT count(*) FROM messages WHERE message_id = ANY($1::text[])", list(message_ids))
    return n == len(message_ids)


async def test_a_crash_after_a_later_window_is_written_loses_no_earlier_signal_of_its_partition(
    db: asyncpg.Pool, stack: dict[str, str], pg_dsn: str, tmp_path: Path
) -> None:
    prefix = f"o{uuid.uuid4().hex[:8]}"
    kafka = prefixed_topics(stack["MEMWRIGHT_KAFKA_BOOTSTRAP"], prefix)
    await ensure_topics(kafka, sweeper_app_id=f"{prefix}-sweeper")
    env = {
        **isolated_env(kafka, prefix),
        "MEMWRIGHT_PG_DSN": pg_dsn,
        "MEMWRIGHT_SWEEPER_DATA_DIR": str(tmp_path / "sweeper"),
        "MEMWRIGHT_WINDOW_SECONDS": "1",
        "MEMWRIGHT_SWEEPER_SESSION_TIMEOUT_SECONDS": "6",  # the killed sweeper leaves the group quickly
    }
    group, topic = f"{prefix}-sweeper", kafka.topic_signals
    procs = ServiceProcesses(env, tmp_path / "logs")
    producer = AIOKafkaProducer(bootstrap_servers=kafka.kafka_bootstrap, acks="all")
    await producer.start()
    await db.execute(REFUSE_XAVI)  # xavi's window waits for a retry; everyone else's is written
    try:
        procs.start("sweeper")
        await procs.wait_ready(timeout=90)

        async def send(user: str, mid: str, partition: int) -> None:
            value = Signal(user, mid, "c1", "Always answer in metric units").to_bytes()
            await producer.send_and_wait(topic, value, key=user.encode(), partition=partition)

        async def offset(partition: int) -> int:
            return await committed(kafka.kafka_bootstrap, group, topic, partition)

        for user, mid in (("yara", "y1"), ("xavi", "x1"), ("yara", "y2")):  # offsets 0, 1, 2 of partition 0
            await send(user, mid, 0)
        await eventually(lambda: stored(db, "y1", "y2"), 30, "yara's window to be written")
        await eventually(lambda: _at_least(offset(0), 1), 30, "a commit on partition 0")
        # a signal on another partition, written and committed by a later commit than the one above
        await send("zoe", "z1", 1)
        await eventually(lambda: _at_least(offset(1), 1), 30, "a later commit")
        assert await offset(0) == 1, "the sweeper committed past xavi's unwritten signal"

        procs.kill("sweeper")  # SIGKILL while xavi's window is still unwritten
        await db.execute(ALLOW_XAVI)
        procs.start("sweeper")
        await eventually(lambda: stored(db, "x1"), 60, "xavi's signal to be swept after the crash")
        await eventually(lambda: _at_least(offset(0), 3), 30, "the commit past xavi's signal")
    finally:
        await db.execute(ALLOW_XAVI)
        await producer.stop()
        procs.stop()


REFUSE_XAVI = refuse_messages_sql("test_refuse_xavi", "NEW.user_id = 'xavi'")
ALLOW_XAVI = allow_messages_sql("test_refuse_xavi")


async def _at_least(value: Awaitable[int], floor: int) -> bool:
    return await value >= floor
