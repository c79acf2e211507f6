"""No input stalls the signal path (invariant 10), through the five real services.

Hypothesis sends one user's arbitrary input, through ingest (a signal whose text is any string:
every Unicode category, U+0000, lone surrogates, 8000 characters and more) and straight to the
topic (any bytes, arbitrary text in a well-formed record, nesting far deeper than a JSON parser
recurses, integers past Python's 4300 digits, half-megabyte records). Then another user's
canary signal must be stored, and every one of the hostile inputs must have ended in exactly
one of: refused by ingest with 400 and the reason, stored, or in the dead-letter topic with its
original bytes. Before the fix a single U+0000 answered 202 and stopped the sweeper for every
user: the canary never arrived.
"""

from __future__ import annotations

import json
from typing import Any

import aiohttp
import asyncpg
import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from memwright.events import InvalidSignal, decode_signal
from memwright.sweeping import original_value, read_dead_letters
from memwright.topics import topic_specs

from tests.e2e.conftest import Pipeline
from tests.e2e.helpers import eventually, new_user, signal

pytestmark = pytest.mark.timeout(900)

SPECIAL = [
    "\x00", "a\x00b", "\ud800", "x\udfff", "\udbff\udc00", "\U0001f600", "\u202e\u2066evil\u2069", "\u2028\u2029",
    "\ufeff", "\U0010ffff", "\ufffe", " \t\n", "x" * 8000, "x" * 8001, "é" * 8000, "\U0001f600" * 8000,
]  # fmt: skip
any_text = st.one_of(
    st.text(st.characters(exclude_categories=()), max_size=200),  # every category, lone surrogates included
    st.sampled_from(SPECIAL),
    st.builds(lambda a, b, c: a + b + c, st.text(max_size=20), st.sampled_from(SPECIAL), st.text(max_size=20)),
)


def _record(user: str, **fields: Any) -> bytes:
    return json.dumps({**signal(user, "hi"), **fields}).encode()


@st.composite
def hostile(draw: st.DrawFn, user: str) -> tuple[str, Any]:
    """('ingest', text) or ('topic', raw record bytes)."""
    kind = draw(st.sampled_from(["ingest", "ingest", "bytes", "text", "nested", "deep_object", "huge_int", "huge"]))
    if kind == "ingest":
        return "ingest", draw(any_text)
    if kind == "bytes":
        return "topic", draw(st.binary(max_size=300))
    if kind == "text":
        return "topic", _record(user, text=draw(any_text))
    if kind == "nested":
        depth = draw(st.integers(1_000, 200_000))
        return "topic", b"[" * depth + b"]" * depth
    if kind == "deep_object":
        depth = draw(st.integers(1_000, 100_000))
        return "topic", b'{"text":' * depth + b"1" + b"}" * depth
    if kind == "huge_int":
        return "topic", _record(user).replace(b'"schema_version": 1', b'"schema_version": ' + b"7" * 5000)
    return "topic", _record(user, extra="y" * 500_000)


async def _dead_lettered(pipeline: Pipeline) -> set[bytes | None]:
    """The original values of every record in the dead-letter topic so far."""
    consumer = AIOKafkaConsumer(bootstrap_servers=pipeline.kafka.kafka_bootstrap, enable_auto_commit=False)
    await consumer.start()
    try:
        [dlq] = [spec for spec in topic_specs(pipeline.kafka) if spec.name == pipeline.kafka.topic_dlq]
        parts = [TopicPartition(dlq.name, p) for p in range(dlq.partitions)]
        consumer.assign(parts)
        await consumer.seek_to_beginning(*parts)
        end = await consumer.end_offsets(parts)
        values: dict[TopicPartition, list[bytes]] = {tp: [] for tp in parts}
        while [tp for tp in parts if await consumer.position(tp) < end[tp]]:
            for tp, records in (await consumer.getmany(timeout_ms=1000)).items():
                values[tp] += [r.value for r in records if r.value is not None]
        return {original_value(record) for tp in parts for record in read_dead_letters(values[tp])}
    finally:
        await consumer.stop()


async def _stored(pool: asyncpg.Pool, user: str) -> set[str]:
    return {r["message_id"] for r in await pool.fetch("SELECT message_id FROM messages WHERE user_id = $1", user)}


@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture]
)
@given(data=st.data())
async def test_no_input_stalls_the_sweeper_and_another_users_canary_is_always_stored(
    data: st.DataObject, pipeline: Pipeline, http: aiohttp.ClientSession, e2e_pool: asyncpg.Pool
) -> None:
    mallory, carol = new_user(), new_user()
    inputs = data.draw(st.lists(hostile(mallory), min_size=1, max_size=4), label="inputs")
    expect_stored: set[str] = set()
    expect_dead: list[bytes] = []
    producer = AIOKafkaProducer(
        bootstrap_servers=pipeline.kafka.kafka_bootstrap, acks="all", max_request_size=2_000_000
    )
    await producer.start()
    try:
        for route, payload in inputs:
            if route == "ingest":
                body = signal(mallory, payload)
                async with http.post(
                    pipeline.ingest + "/v1/signals", data=json.dumps(body), headers=pipeline.auth()
                ) as r:
                    answer = await r.json()
                    assert r.status in (202, 400), (r.status, answer)
                if r.status == 202:
                    expect_stored.add(body["message_id"])
                else:
                    assert answer["error"], "a 400 says what to fix"
                continue
            await producer.send_and_wait(pipeline.kafka.topic_signals, key=mallory.encode(), value=payload)
            try:
                expect_stored.add(decode_signal(payload).message_id)
            except InvalidSignal:
                expect_dead.append(payload)
    finally:
        await producer.stop()

    canary = signal(carol, "canary: I still get through")
    async with http.post(pipeline.ingest + "/v1/signals", json=canary, headers=pipeline.auth()) as r:
        assert r.status == 202, await r.text()

    async def canary_stored() -> bool:
        return canary["message_id"] in await _stored(e2e_pool, carol)

    await eventually(canary_stored, 30, "another user's canary signal in the evidence store")

    async def mallory_settled() -> bool:
        return expect_stored <= await _stored(e2e_pool, mallory)

    await eventually(mallory_settled, 30, f"mallory's accepted signals stored ({len(expect_stored)})")
    if expect_dead:

        async def all_dead_lettered() -> bool:
            return set(expect_dead) <= await _dead_lettered(pipeline)

        await eventually(all_dead_lettered, 30, f"{len(expect_dead)} refused records in the DLQ, byte for byte", 1.0)
