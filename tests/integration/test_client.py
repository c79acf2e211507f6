"""memwright.client against the real services: the api in-process on the real PostgreSQL, ingest
in-process producing to the real Kafka. A turn (send, status, block, receipts), the 304 that
makes an unchanged block cheap, retries on 429 (Retry-After, on the api's own limiter) and 503
(ingest without Kafka), errors that carry the server's reason, timeouts and connection errors,
and the sync wrapper. Every assertion counts (answers, retries, waits asked for); none times."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import dataclass

import asyncpg
import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer
from memwright import metrics
from memwright.auth import mint
from memwright.client import Memwright, MemwrightClient, MemwrightError
from memwright.producer import SignalProducer
from memwright.services.api.app import build_app
from memwright.services.api.limits import RequestLimits
from memwright.services.ingest.app import build_app as build_ingest
from memwright.settings import ApiSettings, IngestSettings, KafkaSettings
from memwright.store.sweeps import write_window

from tests.conftest import JWT_SECRET
from tests.integration.helpers import new_topic, read_topic, sig
from tests.integration.test_api_memories import SETTINGS, agent_memory, curate

SCOPES = ["memories:read", "memories:write", "signals:write"]


def token(user: str = "alice", scopes: list[str] | None = None) -> str:
    return mint(SETTINGS, user, scopes or SCOPES)


@dataclass
class Waits:
    """The client's sleep: records every wait it asks for and waits for none (or advances a clock)."""

    asked: list[float]
    clock: list[float]

    async def __call__(self, seconds: float) -> None:
        self.asked.append(seconds)
        self.clock[0] += seconds


@pytest.fixture
def waits() -> Waits:
    return Waits([], [1_000.0])


@pytest.fixture
async def api_url(db: asyncpg.Pool) -> AsyncIterator[str]:
    await db.execute("TRUNCATE user_erasures")
    async with TestServer(build_app(SETTINGS, db)) as server:
        yield str(server.make_url("")).rstrip("/")
    await db.execute("TRUNCATE user_erasures")


class _NoKafka:
    ready = False  # SignalProducer.ready: Kafka is not reachable


async def test_a_turn_send_then_status_then_block_and_receipts(
    api_url: str, db: asyncpg.Pool, kafka: KafkaSettings, waits: Waits
) -> None:
    topic = await new_topic(kafka, "client")
    settings = IngestSettings(kafka_bootstrap=kafka.kafka_bootstrap, jwt_secret=JWT_SECRET, topic_signals=topic)
    async with SignalProducer(kafka.kafka_bootstrap, topic, name="ingest") as producer:
        async with TestServer(build_ingest(settings, producer)) as ingest:
            ingest_url = str(ingest.make_url("")).rstrip("/")
            async with MemwrightClient(api_url, token(), ingest_url, sleep=waits) as client:
                accepted = await client.send("alice", "alice-t1", "trip", "Always answer in metric units")
                assert accepted.accepted == 1
                [where] = accepted.messages
                assert where.status == "/v1/users/alice/messages/alice-t1"

                with pytest.raises(MemwrightError) as not_yet:  # in Kafka, not swept: cannot be known yet
                    await client.message_status("alice", "alice-t1")
                assert not_yet.value.status == 404 and "on its way" in not_yet.value.reason

                [record] = await read_topic(kafka, topic, 1)  # Kafka has it: sweep it as the sweeper would
                assert record.key == b"alice"
                async with db.acquire() as conn:
                    await write_window(
                        conn, "alice", [sig("alice", "alice-t1", "Always answer in metric units", "trip")]
                    )
                assert (await client.message_status("alice", "alice-t1")).outcome == "pending"
                await curate(db)

                status = await client.message_status("alice", "alice-t1")
                assert (status.stage, status.outcome) == ("curated", "remembered")
                [linked] = status.memories
                memory = await client.memory("alice", linked.memory_id)
                assert [r.message_id for r in memory.receipts] == ["alice-t1"] and "metric" in memory.text
                assert [h.action for h in await client.history("alice", memory.id)] == ["create"]
                context = await client.context("alice")
                assert context.memory_count == 1 and memory.id in context.block
    assert waits.asked == []  # nothing had to be retried


async def test_an_unchanged_block_costs_a_304_and_the_client_returns_the_block_it_kept(
    api_url: str, db: asyncpg.Pool
) -> None:
    await agent_memory(db, "alice")
    not_modified = metrics.API_CONTEXT_READS.labels("not_modified")
    async with MemwrightClient(api_url, token()) as client:
        first = await client.context("alice")
        before = not_modified._value.get()
        second = await client.context("alice")
        assert not_modified._value.get() == before + 1  # the server answered 304
        assert second.not_modified and not first.not_modified
        assert (second.block, second.etag, second.memory_count) == (first.block, first.etag, 1)
        await client.remember("alice", "I am allergic to peanuts", kind="fact")
        third = await client.context("alice")
        assert not third.not_modified and third.memory_count == 2 and third.etag != first.etag
        assert not_modified._value.get() == before + 1
    async with MemwrightClient(api_url, token("bob")) as bobs:
        assert (await bobs.context("bob")).memory_count == 0 and not_modified._value.get() == before + 1


async def test_429_is_retried_after_the_servers_retry_after_and_then_raised_with_its_reason(
    db: asyncpg.Pool, waits: Waits
) -> None:
    settings = ApiSettings(jwt_secret=JWT_SECRET, pg_dsn="unused", rate_limit_per_s=0.5, rate_limit_burst=1)
    limits = RequestLimits(settings, clock=lambda: waits.clock[0])  # the client's waits move the limiter's clock
    async with TestServer(build_app(settings, db, limits)) as server:
        url = str(server.make_url("")).rstrip("/")
        async with MemwrightClient(url, token(), sleep=waits, retries=3) as client:
            assert await client.memories("alice") == []
            assert await client.memories("alice") == []  # 429 once, then through after Retry-After
            assert len(waits.asked) == 1 and waits.asked[0] >= 2  # the bucket refills in 2 s: Retry-After 2
        frozen = Waits([], [0.0])  # its waits move a clock of its own, not the limiter's: every retry is a 429
        async with MemwrightClient(url, token(), sleep=frozen, retries=2) as c:
            with pytest.raises(MemwrightError) as refused:
                await c.memories("alice")
    assert refused.value.status == 429 and "retry in" in refused.value.reason
    assert len(frozen.asked) == 2  # two retries, then the error


async def test_a_retry_after_longer_than_the_client_waits_is_not_waited_for(db: asyncpg.Pool, waits: Waits) -> None:
    settings = ApiSettings(jwt_secret=JWT_SECRET, pg_dsn="unused", rate_limit_per_s=0.01, rate_limit_burst=1)
    limits = RequestLimits(settings, clock=lambda: waits.clock[0])
    async with TestServer(build_app(settings, db, limits)) as server:
        url = str(server.make_url("")).rstrip("/")
        async with MemwrightClient(url, token(), sleep=waits, max_retry_after_s=30) as client:
            await client.memories("alice")
            with pytest.raises(MemwrightError) as refused:
                await client.memories("alice")  # Retry-After 100 s
    assert refused.value.status == 429 and waits.asked == []


async def test_503_from_ingest_without_kafka_is_retried_then_raised_with_its_reason(waits: Waits) -> None:
    settings = IngestSettings(kafka_bootstrap="127.0.0.1:1", jwt_secret=JWT_SECRET)
    async with TestServer(build_ingest(settings, _NoKafka())) as ingest:  # type: ignore[arg-type]
        url = str(ingest.make_url("")).rstrip("/")
        async with MemwrightClient("http://unused", token(), url, sleep=waits, retries=3) as client:
            with pytest.raises(MemwrightError) as refused:
                await client.send("alice", "alice-k1", "c1", "hello")
    assert refused.value.status == 503 and refused.value.reason == "Kafka is unavailable; retry later"
    assert len(waits.asked) == 3 and all(w >= 1 for w in waits.asked)  # retry_after_s: 1 in the body


async def test_errors_carry_the_servers_status_and_reason_and_are_not_retried(
    api_url: str, db: asyncpg.Pool, waits: Waits
) -> None:
    agent_id, _ = await agent_memory(db, "alice")
    async with MemwrightClient(api_url, token(), sleep=waits) as client:
        mine = await client.remember("alice", "I like tea")
        cases = [
            (client.memories("bob"), 403, "may not access"),
            (client.memory("alice", "00000000-0000-4000-8000-000000000000"), 404, "no memory"),
            (client.edit("alice", agent_id, text="I like coffee"), 409, ""),
            (client.edit("alice", mine.id, text="I like green tea", version=7), 412, ""),
            (client.remember("alice", "My password is hunter2"), 400, "password"),
        ]
        for call, status, words in cases:
            with pytest.raises(MemwrightError) as refused:
                await call
            assert refused.value.status == status and words in refused.value.reason
            assert refused.value.reason and refused.value.reason != "None"
        edited = await client.edit("alice", mine.id, text="I like green tea", version=1)
        assert edited.version == 2
        assert (await client.forget("alice", mine.id, reason="changed", version=2)).id == mine.id
    async with MemwrightClient(api_url, "not-a-jwt", sleep=waits) as client:
        with pytest.raises(MemwrightError) as refused:
            await client.context("alice")
        assert refused.value.status == 401
    assert waits.asked == []


async def test_timeouts_and_connection_errors_are_retried_for_reads_and_signals_only(waits: Waits) -> None:
    hits = 0
    never = asyncio.Event()

    async def stall(_: web.Request) -> web.Response:
        nonlocal hits
        hits += 1
        await never.wait()
        return web.json_response({})

    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", stall)
    async with TestServer(app) as server:
        url = str(server.make_url("")).rstrip("/")
        async with MemwrightClient(url, token(), url, sleep=waits, retries=2, timeout_s=0.3) as client:
            with pytest.raises(MemwrightError) as read:
                await client.memories("alice")
            assert read.value.status is None and "timed out" in read.value.reason
            assert (hits, len(waits.asked)) == (3, 2)
            with pytest.raises(MemwrightError):
                await client.remember("alice", "I like tea")  # not safe to repeat: one attempt
            assert (hits, len(waits.asked)) == (4, 2)
            with pytest.raises(MemwrightError):
                await client.send("alice", "alice-s1", "c1", "hi")  # idempotent on its message id
            assert (hits, len(waits.asked)) == (7, 4)
        never.set()
    async with MemwrightClient("http://127.0.0.1:1", token(), sleep=waits, retries=2) as client:
        with pytest.raises(MemwrightError) as gone:
            await client.hypotheses("alice")
    assert gone.value.status is None and len(waits.asked) == 6


async def test_the_sync_client_makes_the_same_calls(api_url: str, db: asyncpg.Pool) -> None:
    _, message_id = await agent_memory(db, "alice")

    def turn() -> tuple[bool, bool, str, int]:
        with Memwright(api_url, token()) as client:
            first, second = client.context("alice"), client.context("alice")
            status = client.message_status("alice", message_id)
            try:
                client.memories("bob")
            except MemwrightError as exc:
                refused = exc.status or 0
            return first.not_modified, second.not_modified, status.outcome, refused

    assert await asyncio.to_thread(turn) == (False, True, "remembered", 403)
