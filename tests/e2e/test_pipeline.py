"""The whole pipeline through the five real services: ingest -> Kafka -> sweeper ->
PostgreSQL -> curator -> outbox -> indexer -> Qdrant, and the api."""

from __future__ import annotations

import json
import time
import uuid

import aiohttp
import asyncpg
from aiokafka import AIOKafkaProducer
from memwright.index.edge import EdgeBackend

from tests.e2e.conftest import Pipeline
from tests.e2e.helpers import eventually, new_user, signal


async def post(http: aiohttp.ClientSession, pipeline: Pipeline, body: object) -> tuple[int, dict]:
    async with http.post(pipeline.ingest + "/v1/signals", json=body, headers=pipeline.auth()) as r:
        return r.status, await r.json()


async def previews(http: aiohttp.ClientSession, pipeline: Pipeline, user_id: str) -> list[dict]:
    async with http.get(f"{pipeline.api}/v1/users/{user_id}/memories", headers=pipeline.auth()) as r:
        assert r.status == 200, await r.text()
        return (await r.json())["memories"]


async def test_explicit_preference_becomes_one_memory_with_its_receipt_everywhere(
    pipeline: Pipeline, http: aiohttp.ClientSession, e2e_pool: asyncpg.Pool
) -> None:
    user = new_user()
    sig = signal(user, "Always answer in metric units")
    status_path = f"/v1/users/{user}/messages/{sig['message_id']}"
    assert await post(http, pipeline, sig) == (
        202,
        {"accepted": 1, "messages": [{"user_id": user, "message_id": sig["message_id"], "status": status_path}]},
    )

    memories = await eventually(lambda: previews(http, pipeline, user), what="the memory in the api previews")
    assert len(memories) == 1
    memory = memories[0]
    assert memory["author"] == "agent" and "metric units" in memory["preview"]

    # PostgreSQL: one memory whose evidence is exactly that message id
    rows = await e2e_pool.fetch("SELECT memory_id, version FROM memories WHERE user_id = $1", user)
    assert [str(r["memory_id"]) for r in rows] == [memory["id"]]
    evidence = await e2e_pool.fetch("SELECT message_id FROM memory_evidence WHERE user_id = $1", user)
    assert [r["message_id"] for r in evidence] == [sig["message_id"]]

    # the api shows the receipt
    async with http.get(f"{pipeline.api}/v1/users/{user}/memories/{memory['id']}", headers=pipeline.auth()) as r:
        detail = await r.json()
    assert [(x["message_id"], x["conversation_id"], x["text"]) for x in detail["receipts"]] == [
        (sig["message_id"], "c1", "Always answer in metric units")
    ]

    # the 202's status path says what came of the message: evidence of that memory
    async with http.get(pipeline.api + status_path, headers=pipeline.auth()) as r:
        status = await r.json()
    assert (status["outcome"], [m["memory_id"] for m in status["memories"]]) == ("remembered", [memory["id"]])

    # Qdrant: same id and version (the embedded store is opened by one process at a time: pause the indexer)
    await eventually(lambda: e2e_pool.fetchval("SELECT count(*) = 0 FROM index_outbox"), what="the outbox to drain")
    await eventually(lambda: _indexer_applied(http, pipeline), what="the indexer to apply the event")
    pipeline.procs.stop("indexer")
    backend = EdgeBackend.open(pipeline.env["MEMWRIGHT_QDRANT_PATH"])
    try:
        points = await backend.retrieve("memories", [memory["id"]])
    finally:
        await backend.close()
        pipeline.procs.start("indexer")
        await pipeline.procs.wait_ready("indexer")
    assert len(points) == 1
    assert points[0].payload["version"] == rows[0]["version"] == memory["version"]
    assert points[0].payload["user_id"] == user


async def _indexer_applied(http: aiohttp.ClientSession, pipeline: Pipeline) -> bool:
    async with http.get(pipeline.procs.ops_url("indexer") + "/metrics") as r:
        text = await r.text()
    return "memwright_indexer_consumer_lag 0.0" in text and "memwright_indexer_events_applied_total" in text


async def test_ingest_rejects_bad_signals_with_a_reason(pipeline: Pipeline, http: aiohttp.ClientSession) -> None:
    user = new_user()
    good = signal(user, "hello")
    cases = {
        "missing user id": ({k: v for k, v in good.items() if k != "user_id"}, "user_id"),
        "empty text": ({**good, "text": "   "}, "text must not be empty"),
        "wrong schema version": ({**good, "schema_version": 2}, "schema_version must be 1"),
        "oversized text": ({**good, "text": "x" * 8001}, "too long"),
    }
    for name, (body, reason) in cases.items():
        status, answer = await post(http, pipeline, body)
        assert status == 400, name
        assert reason in answer["error"], (name, answer)


async def test_malformed_record_goes_to_the_dlq_and_the_pipeline_keeps_running(
    pipeline: Pipeline, http: aiohttp.ClientSession
) -> None:
    user = new_user()
    producer = AIOKafkaProducer(bootstrap_servers=pipeline.kafka.kafka_bootstrap, acks="all")
    await producer.start()
    try:
        await producer.send_and_wait(pipeline.kafka.topic_signals, key=user.encode(), value=b"{not json")
        await producer.send_and_wait(
            pipeline.kafka.topic_signals, key=user.encode(), value=json.dumps({"user_id": user}).encode()
        )
    finally:
        await producer.stop()
    assert (await post(http, pipeline, signal(user, "Never use emoji in replies.")))[0] == 202

    memories = await eventually(lambda: previews(http, pipeline, user), what="the valid signal's memory")
    assert [m["preview"] for m in memories] == ["Never use emoji in replies."]

    dead = await _read_dlq(pipeline, user, expected=2)
    assert len(dead) == 2
    assert "not JSON" in dead[0]["reason"] and dead[0]["value"] == "{not json"
    assert "required" in dead[1]["reason"]


async def _read_dlq(pipeline: Pipeline, user: str, expected: int, timeout: float = 60) -> list[dict]:
    """This user's dead-letter records, read until `expected` have arrived (or `timeout`). One
    getmany() is not enough: it returns with the first fetch that has data, which under load may be
    before the group has joined or hold one partition's records only (a flake seen at load 16)."""
    from aiokafka import AIOKafkaConsumer

    consumer = AIOKafkaConsumer(
        pipeline.kafka.topic_dlq,
        bootstrap_servers=pipeline.kafka.kafka_bootstrap,
        auto_offset_reset="earliest",
        group_id=f"dlq-reader-{uuid.uuid4().hex[:6]}",
    )
    await consumer.start()
    found: list[dict] = []
    deadline = time.monotonic() + timeout
    try:
        while len(found) < expected and time.monotonic() < deadline:
            batches = await consumer.getmany(timeout_ms=1000)
            for records in batches.values():
                found += [json.loads(r.value) for r in records if r.key == user.encode()]
    finally:
        await consumer.stop()
    return sorted(found, key=lambda d: d["offset"])


async def test_replaying_the_same_signals_creates_no_duplicates(
    pipeline: Pipeline, http: aiohttp.ClientSession, e2e_pool: asyncpg.Pool
) -> None:
    user = new_user()
    batch = {
        "signals": [
            signal(user, "From now on, reply in French.", "c1", "m1"),
            signal(user, "What time is it in Lyon?", "c1", "m2"),
        ]
    }
    assert (await post(http, pipeline, batch))[0] == 202
    await eventually(lambda: previews(http, pipeline, user), what="the first memory")
    runs_before = await e2e_pool.fetchval("SELECT count(*) FROM curation_runs WHERE user_id = $1", user)

    assert (await post(http, pipeline, batch))[0] == 202  # the same message ids again
    await eventually(lambda: _swept_twice(e2e_pool, pipeline, http), what="the replay to be swept")
    assert await e2e_pool.fetchval("SELECT count(*) FROM messages WHERE user_id = $1", user) == 2
    assert await e2e_pool.fetchval("SELECT count(*) FROM memories WHERE user_id = $1", user) == 1
    assert await e2e_pool.fetchval("SELECT count(*) FROM backlog WHERE user_id = $1", user) == 0
    runs_after = await e2e_pool.fetchval("SELECT count(*) FROM curation_runs WHERE user_id = $1", user)
    assert runs_after == runs_before  # a replay does not wake the agent


async def _swept_twice(pool: asyncpg.Pool, pipeline: Pipeline, http: aiohttp.ClientSession) -> bool:
    async with http.get(pipeline.procs.ops_url("sweeper") + "/metrics") as r:
        text = await r.text()
    dup = [line for line in text.splitlines() if line.startswith("memwright_sweeper_signals_duplicate_total")]
    return bool(dup) and float(dup[0].split()[-1]) >= 2
