"""One mechanism keeps every producer alive (memwright.kafka.KeptProducer): a producer wedged
the way a broker restart wedges it (OutOfOrderSequenceNumber: its sender task dies and nothing
is ever sent again, aio-libs/aiokafka#1017) is replaced, in the outbox relay, in ingest and in
SignalProducer. Real Kafka; the wedge is the one thing injected, exactly as aiokafka's sender
routine ends on that error."""

from __future__ import annotations

import asyncio
import re
import uuid
from collections.abc import AsyncIterator

import asyncpg
import pytest
from aiohttp.test_utils import TestClient, TestServer
from aiokafka import AIOKafkaProducer
from aiokafka.errors import OutOfOrderSequenceNumber
from memwright.auth import mint
from memwright.kafka import KafkaUnavailable, KeptProducer
from memwright.producer import SignalProducer
from memwright.services.indexer.app import relay_loop
from memwright.services.ingest.app import build_app
from memwright.settings import IndexerSettings, IngestSettings, KafkaSettings

from tests.e2e.helpers import eventually
from tests.integration.helpers import new_topic, read_topic

SIGNAL = {"schema_version": 1, "user_id": "u1", "conversation_id": "c1", "text": "Always answer in metric units"}


def wedge(producer: AIOKafkaProducer) -> None:
    """End the producer's sender task with OutOfOrderSequenceNumber, as aiokafka's own sender
    routine does when the broker's sequence numbers no longer match: pending sends fail with it,
    and every later send waits forever."""
    sender = producer._sender
    sender.sender_task.remove_done_callback(sender._fail_all)
    sender.sender_task.cancel()

    async def routine() -> None:
        raise OutOfOrderSequenceNumber()

    sender._sender_task = asyncio.create_task(routine())
    sender._sender_task.add_done_callback(sender._fail_all)


@pytest.fixture
async def topic(kafka: KafkaSettings) -> str:
    return await new_topic(kafka, "kept")


@pytest.fixture
async def kept(kafka: KafkaSettings) -> AsyncIterator[KeptProducer]:
    """A KeptProducer, connected."""
    producer = KeptProducer(kafka.kafka_bootstrap, name="relay")
    producer.start()
    try:
        await producer.wait_ready(30)
        yield producer
    finally:
        await producer.stop()


async def _values(kafka: KafkaSettings, topic: str, expected: int) -> list[bytes]:
    return [r.value for r in await read_topic(kafka, topic, expected)]


async def _replaced_and_sending(kept: KeptProducer, broken: object, topic: str) -> None:
    """A new producer took the broken one's place, and it delivers."""
    await kept.wait_ready(30)
    assert kept.producer is not broken, "the broken producer is still in use"
    await asyncio.wait_for(kept.send_all(topic, [(b"k", b"after")]), 10)


async def test_wedged_producer_is_replaced_and_the_next_send_is_delivered(
    kafka: KafkaSettings, topic: str, kept: KeptProducer
) -> None:
    await kept.send_all(topic, [(b"k", b"before")])
    first = kept.producer
    assert first is not None
    wedge(first)
    with pytest.raises((KafkaUnavailable, OutOfOrderSequenceNumber)):
        await asyncio.wait_for(kept.send_all(topic, [(b"k", b"lost")]), 5)
    await _replaced_and_sending(kept, first, topic)
    assert await _values(kafka, topic, 2) == [b"before", b"after"]


@pytest.mark.parametrize("death", ["fatal error", "cancelled"])
async def test_a_sender_that_ends_while_a_send_waits_for_metadata_does_not_hang_the_send(
    kafka: KafkaSettings, topic: str, kept: KeptProducer, death: str
) -> None:
    """A sender that dies on a fatal error fails later records at once; one that ends without
    failing them (cancelled) would leave them waiting forever, and with them the relay's
    transaction or an embedding service's send. Either way the send ends and the producer is replaced."""
    first = kept.producer
    assert first is not None
    gate = asyncio.Event()
    wait_on_metadata = first.client._wait_on_metadata

    async def slow_metadata(topic: str) -> object:
        await gate.wait()  # as after a broker restart: the producer waits for metadata...
        return await wait_on_metadata(topic)

    first.client._wait_on_metadata = slow_metadata  # type: ignore[method-assign]
    sending = asyncio.create_task(kept.send_all(topic, [(b"k", b"lost")]))
    await asyncio.sleep(0.2)
    if death == "fatal error":  # ...and meanwhile its sender ends
        wedge(first)
    else:
        first._sender.sender_task.remove_done_callback(first._sender._fail_all)
        first._sender.sender_task.cancel()
    await asyncio.sleep(0.2)
    gate.set()
    with pytest.raises((KafkaUnavailable, OutOfOrderSequenceNumber)):
        await asyncio.wait_for(sending, 10)
    await _replaced_and_sending(kept, first, topic)
    assert await _values(kafka, topic, 1) == [b"after"]


async def test_a_fatal_error_from_a_send_replaces_the_producer(
    kafka: KafkaSettings, topic: str, kept: KeptProducer
) -> None:
    first = kept.producer
    assert first is not None

    async def fails(*args: object, **kwargs: object) -> None:
        raise OutOfOrderSequenceNumber()

    first.send = fails  # type: ignore[method-assign]
    with pytest.raises(OutOfOrderSequenceNumber):
        await kept.send_all(topic, [(b"k", b"lost")])
    await _replaced_and_sending(kept, first, topic)
    assert await _values(kafka, topic, 1) == [b"after"]


async def test_outbox_relay_recovers_from_a_wedged_producer(
    db: asyncpg.Pool, pg_dsn: str, kafka: KafkaSettings, topic: str
) -> None:
    settings = IndexerSettings(
        pg_dsn=pg_dsn, kafka_bootstrap=kafka.kafka_bootstrap, topic_changelog=topic, relay_poll_seconds=0.1
    )
    producer = KeptProducer(kafka.kafka_bootstrap, name="relay")
    producer.start()
    stop = asyncio.Event()
    loop = asyncio.create_task(relay_loop(settings, db, producer, stop))

    async def write(n: int) -> None:
        memory = uuid.uuid4()
        await db.execute(
            "INSERT INTO memories (memory_id, user_id, author, text) VALUES ($1, 'u1', 'user', $2)", memory, f"m{n}"
        )
        await db.execute("INSERT INTO index_outbox (memory_id, user_id) VALUES ($1, 'u1')", memory)

    async def outbox_empty() -> bool:
        return bool(await db.fetchval("SELECT count(*) = 0 FROM index_outbox"))

    try:
        await write(1)
        await eventually(outbox_empty, 30, "the relay to send the first change")
        assert producer.producer is not None
        wedge(producer.producer)
        await write(2)
        await eventually(outbox_empty, 30, "the relay to send a change after its producer was wedged")
    finally:
        stop.set()
        await loop
        await producer.stop()
    assert len(await _values(kafka, topic, 2)) == 2


async def test_ingest_answers_503_then_202_after_its_producer_is_wedged(kafka: KafkaSettings) -> None:
    settings = IngestSettings(
        kafka_bootstrap=kafka.kafka_bootstrap, topic_signals=kafka.topic_signals, jwt_secret="k" * 40
    )
    producer = SignalProducer(settings.kafka_bootstrap, settings.topic_signals, name="ingest")
    await producer.start()
    auth = {"Authorization": f"Bearer {mint(settings, 'service:t', ['signals:write'])}"}
    try:
        async with TestClient(TestServer(build_app(settings, producer))) as client:
            r = await client.post("/v1/signals", json={**SIGNAL, "message_id": "m1"}, headers=auth)
            assert r.status == 202
            assert producer.kafka.producer is not None
            wedge(producer.kafka.producer)
            statuses = []
            for i in range(100):
                r = await client.post("/v1/signals", json={**SIGNAL, "message_id": f"m-after-{i}"}, headers=auth)
                statuses.append(r.status)
                if r.status == 202:
                    break
                await asyncio.sleep(0.2)
            assert statuses[0] == 503 and statuses[-1] == 202, statuses
    finally:
        await producer.stop()


async def test_signal_producer_recovers_from_a_wedged_producer(kafka: KafkaSettings, topic: str) -> None:
    async with SignalProducer(kafka.kafka_bootstrap, topic) as producer:
        await producer.send({**SIGNAL, "message_id": "m1"})
        assert producer.kafka.producer is not None
        wedge(producer.kafka.producer)
        with pytest.raises((KafkaUnavailable, OutOfOrderSequenceNumber)):
            await asyncio.wait_for(producer.send({**SIGNAL, "message_id": "m2"}), 5)
        await producer.kafka.wait_ready(30)
        await asyncio.wait_for(producer.send({**SIGNAL, "message_id": "m2"}), 10)
    assert len(await _values(kafka, topic, 2)) == 2


async def test_signal_producer_start_says_which_kafka_it_could_not_reach() -> None:
    producer = SignalProducer("127.0.0.1:1")
    with pytest.raises(KafkaUnavailable, match=re.escape("127.0.0.1:1")):
        await producer.start(wait_s=1)
    assert not producer.ready
