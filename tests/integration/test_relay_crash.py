"""The outbox relay killed (SIGKILL) after the broker acknowledged its events but before it
removed their outbox rows: the rows stay, the next relay produces them again, and the
indexer, applying every copy, still converges Qdrant on PostgreSQL. And a relay that stops
mid-send without its connection closing gives up the one-relay lock after its idle limit."""

from __future__ import annotations

import asyncio
import signal
import sys
import uuid
from asyncio.subprocess import PIPE
from pathlib import Path

import asyncpg
import pytest
from memwright.embeddings import CachedEmbedder, HashingEmbedder
from memwright.index import relay
from memwright.index.drift import find_drift
from memwright.index.edge import EdgeBackend
from memwright.index.relay import relay_once
from memwright.index.vectors import VectorIndex
from memwright.kafka import KeptProducer
from memwright.services.indexer.app import apply_records
from memwright.settings import KafkaSettings

from tests.conftest import ROOT
from tests.integration.helpers import new_topic, read_topic

# A relay process that dies between "the broker acknowledged" and "delete the outbox rows".
DOOMED_RELAY = """
import asyncio, sys
from memwright.index import relay
from memwright.kafka import KeptProducer
from memwright.store.db import create_pool

dsn, bootstrap, topic = sys.argv[1:4]

class ProduceThenHang(KeptProducer):
    async def send_all(self, topic, records):
        await super().send_all(topic, records)
        print("ACKED", len(records), flush=True)
        await asyncio.sleep(3600)  # killed here, inside the transaction, before DELETE

async def main():
    pool = await create_pool(dsn, 1, 2)
    producer = ProduceThenHang(bootstrap, name="relay")
    producer.start()
    await producer.wait_ready(30)
    await relay.relay_once(pool, producer, topic, 500)

asyncio.run(main())
"""


async def _outbox(db: asyncpg.Pool) -> int:
    return int(await db.fetchval("SELECT count(*) FROM index_outbox"))


async def test_relay_killed_between_produce_and_delete_produces_again_and_still_converges(
    db: asyncpg.Pool, pg_dsn: str, kafka: KafkaSettings, tmp_path: Path
) -> None:
    topic = await new_topic(kafka, "relay", partitions=3)
    memories = [uuid.uuid4() for _ in range(20)]
    await db.executemany(
        "INSERT INTO memories (memory_id, user_id, author, text) VALUES ($1, $2, 'user', $3)",
        [(m, f"user-{i % 4}", f"remember thing {i}") for i, m in enumerate(memories)],
    )
    await db.executemany(
        "INSERT INTO index_outbox (memory_id, user_id) VALUES ($1, $2)",
        [(m, f"user-{i % 4}") for i, m in enumerate(memories)],
    )

    doomed = await asyncio.create_subprocess_exec(
        sys.executable, "-c", DOOMED_RELAY, pg_dsn, kafka.kafka_bootstrap, topic, cwd=ROOT, stdout=PIPE
    )
    try:
        assert doomed.stdout is not None
        line = ""
        while not line.startswith("ACKED"):  # the relay's own log lines come first
            line = (await asyncio.wait_for(doomed.stdout.readline(), 60)).decode()
            assert line, "the doomed relay exited before the broker acknowledged"
        assert line.split() == ["ACKED", "20"], line
        assert len(await read_topic(kafka, topic, 20)) == 20  # the broker has every event...
        assert await _outbox(db) == 20  # ...and the rows are still there
    finally:
        doomed.send_signal(signal.SIGKILL)
        await doomed.wait()

    # its connection is gone, its transaction rolled back: a new relay sends the same rows again
    producer = KeptProducer(kafka.kafka_bootstrap, name="relay")
    producer.start()
    await producer.wait_ready(30)
    try:
        sent = 0
        for _ in range(100):  # until PostgreSQL has noticed the dead connection and released its row locks
            sent = await relay_once(db, producer, topic, 500)
            if sent:
                break
            await asyncio.sleep(0.1)
    finally:
        await producer.stop()
    assert sent == 20 and await _outbox(db) == 0

    records = await read_topic(kafka, topic, 40)
    assert len(records) == 40  # every change twice: at least once, never lost

    backend = EdgeBackend.open(tmp_path / "qdrant")
    try:
        index = VectorIndex(backend, "memories", CachedEmbedder(HashingEmbedder()))
        await index.ensure_collection()
        assert await apply_records(db, index, records[:25], asyncio.Event())
        assert await apply_records(db, index, records[25:], asyncio.Event())
        drift = await find_drift(db, index)
        assert (drift.total, drift.memories, drift.points) == (0, 20, 20)
    finally:
        await backend.close()


class NeverAcked(KeptProducer):
    """A relay whose host vanished mid-send: its transaction stays open and idle, and no FIN tells
    PostgreSQL so (the test holds the connection open instead)."""

    def __init__(self, *args: object, **kwargs: object) -> None:
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]
        self.sending = asyncio.Event()

    async def send_all(self, topic: str, records: object) -> None:
        self.sending.set()
        await asyncio.sleep(3600)


async def test_a_relay_that_stops_mid_send_gives_up_the_one_relay_lock_after_the_idle_limit(
    db: asyncpg.Pool, kafka: KafkaSettings, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(relay, "RELAY_IDLE_LIMIT", "SET LOCAL idle_in_transaction_session_timeout = '1s'")
    topic = await new_topic(kafka, "relay-idle")
    memory = uuid.uuid4()
    await db.execute("INSERT INTO memories (memory_id, user_id, author, text) VALUES ($1, 'u', 'user', 'x')", memory)
    await db.execute("INSERT INTO index_outbox (memory_id, user_id) VALUES ($1, 'u')", memory)
    stuck = NeverAcked(kafka.kafka_bootstrap, name="stuck-relay")
    held = asyncio.ensure_future(relay_once(db, stuck, topic, 500))
    producer = KeptProducer(kafka.kafka_bootstrap, name="relay")
    producer.start()
    try:
        await asyncio.wait_for(stuck.sending.wait(), 30)  # it holds the lock and the row
        await producer.wait_ready(30)
        sent = 0
        for _ in range(300):  # the server ends the idle transaction; its lock and row locks go with it
            sent = await relay_once(db, producer, topic, 500)
            if sent:
                break
            await asyncio.sleep(0.1)
        assert sent == 1 and await _outbox(db) == 0
    finally:
        held.cancel()
        await asyncio.gather(held, return_exceptions=True)
        await producer.stop()
