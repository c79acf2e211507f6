"""memory.changes on the real Kafka, fed by the outbox relay from the real PostgreSQL: memories
created, graduated, updated and deleted through the curator's and the api's paths come out as one
CloudEvent each (binary mode: ce_* headers), keyed by their user, in order, valid against
schemas/memory_change.v1.json, never with another user's data; a batch sent again keeps its ids;
one relay sends at a time, so no batch overtakes another; an erasure is announced and leaves no
content in what is sent after it."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Sequence
from datetime import datetime
from typing import Any

import asyncpg
import pytest
from aiokafka import ConsumerRecord
from jsonschema import Draft202012Validator
from memwright.changes import SOURCE, TYPE_PREFIX, change_schema
from memwright.index.relay import relay_once
from memwright.kafka import KeptProducer
from memwright.settings import KafkaSettings

from tests.integration.helpers import new_topic, read_topic, sweep
from tests.integration.test_api_memories import Api, agent_memory, curate

VALIDATOR = Draft202012Validator(change_schema(), format_checker=Draft202012Validator.FORMAT_CHECKER)


class Relay:
    """The indexer's relay, on topics of this test's own; `read()` returns every change event so far."""

    def __init__(self, kafka: KafkaSettings, producer: KeptProducer, changelog: str, changes: str) -> None:
        self.kafka, self.producer, self.changelog, self.changes = kafka, producer, changelog, changes

    async def run(self, db: asyncpg.Pool) -> int:
        return await relay_once(db, self.producer, self.changelog, 500, self.changes)

    async def read(self, expected: int) -> list[tuple[ConsumerRecord, dict[str, Any]]]:
        records = await read_topic(self.kafka, self.changes, expected)
        assert len(records) == expected, f"{len(records)} events on {self.changes}, expected {expected}"
        return [(r, json.loads(r.value)) for r in records]


@pytest.fixture
async def relay(kafka: KafkaSettings) -> Any:
    changelog, changes = await new_topic(kafka, "changelog"), await new_topic(kafka, "changes", partitions=3)
    producer = KeptProducer(kafka.kafka_bootstrap, name="relay")
    producer.start()
    await producer.wait_ready(30)
    try:
        yield Relay(kafka, producer, changelog, changes)
    finally:
        await producer.stop()


def check_event(record: ConsumerRecord, data: dict[str, Any]) -> None:
    """One CloudEvent in binary mode: attributes in headers agreeing with the body; the body valid."""
    VALIDATOR.validate(data)
    headers = {name: value.decode() for name, value in record.headers}
    assert headers == {
        "ce_specversion": "1.0",
        "ce_type": TYPE_PREFIX + data["type"],
        "ce_source": SOURCE,
        "ce_id": data["id"],
        "ce_time": headers["ce_time"],
        "ce_subject": data["memory_id"],
        "content-type": "application/json",
    }
    assert datetime.fromisoformat(headers["ce_time"]) == datetime.fromisoformat(data["at"])
    assert record.key == data["user_id"].encode()  # keyed by the user: one user's changes share a partition


def of(events: Sequence[tuple[ConsumerRecord, dict[str, Any]]], user: str) -> list[dict[str, Any]]:
    return [data for _, data in events if data["user_id"] == user]


async def test_each_change_through_the_curator_and_the_api_is_one_valid_cloudevent_of_its_user_in_order(
    api: Api, db: asyncpg.Pool, relay: Relay
) -> None:
    agent_id, metric_message = await agent_memory(db, "alice")  # an explicit preference: created at once
    [b1] = await sweep(db, "alice", "I'm really into bouldering, it's how I unwind.", conv="b1", ago=7200)
    await curate(db)  # held as a hypothesis
    [b2] = await sweep(db, "alice", "I love bouldering even though my arms hurt.", conv="b2", ago=3600)
    await curate(db)  # seen in another conversation: graduates
    await agent_memory(db, "bob", "Never use emoji")
    mine = await api.call("POST", "/v1/users/alice/memories", body={"text": "I like tea"}, expect=201)
    await api.call("PATCH", f"/v1/users/alice/memories/{mine['id']}", body={"text": "I like green tea"})
    await api.call("DELETE", f"/v1/users/alice/memories/{agent_id}?reason=moved%20to%20the%20US")

    assert await relay.run(db) == 6
    events = await relay.read(6)
    for record, data in events:
        check_event(record, data)
    alice, bob = of(events, "alice"), of(events, "bob")
    assert [(e["type"], e["actor"], e["author"]) for e in alice] == [
        ("created", "agent", "agent"),
        ("graduated", "agent", "agent"),
        ("created", "user", "user"),
        ("updated", "user", "user"),
        ("deleted", "user", "agent"),
    ]
    created, graduated, written, updated, deleted = alice
    assert "metric" in created["text"] and created["receipts"] == [metric_message] and created["run_id"]
    assert "bouldering" in graduated["text"] and graduated["receipts"] == [b1, b2]
    hypothesis = graduated["hypothesis"]
    assert (hypothesis["statement"], hypothesis["count"]) == ("User likes bouldering", 2)  # seen twice...
    assert hypothesis["conversations"] == ["b1", "b2"] and hypothesis["message_ids"] == [b1, b2]  # ...in two
    assert (written["text"], written["version"], written["receipts"], written["run_id"]) == ("I like tea", 1, [], None)
    assert (updated["previous_text"], updated["text"], updated["version"]) == ("I like tea", "I like green tea", 2)
    assert deleted["memory_id"] == agent_id and deleted["text"] is None and "metric" in deleted["previous_text"]
    assert deleted["reason"] == "moved to the US"
    assert [e["type"] for e in bob] == ["created"] and "emoji" in bob[0]["text"]
    # another user's data never rides on a user's events (nor under their key)
    assert not any("emoji" in json.dumps(e) for e in alice) and not any("metric" in json.dumps(e) for e in bob)
    assert len({data["id"] for _, data in events}) == 6
    assert await db.fetchval("SELECT count(*) FROM index_outbox") == 0


class AckedThenLost(KeptProducer):
    """A relay that dies after Kafka acknowledged the change events, before its outbox rows went."""

    async def send_all(self, topic: str, records: Sequence[Any]) -> None:
        await super().send_all(topic, records)
        if records and len(records[0]) == 3:  # the change events (they carry headers)
            raise ConnectionError("relay lost after the broker acknowledged")


async def test_a_batch_sent_again_after_a_lost_relay_keeps_its_ids_so_consumers_dedupe(
    db: asyncpg.Pool, relay: Relay, kafka: KafkaSettings
) -> None:
    await agent_memory(db, "alice")
    await agent_memory(db, "bob", "Never use emoji")
    lost = AckedThenLost(kafka.kafka_bootstrap, name="lost-relay")
    lost.start()
    await lost.wait_ready(30)
    try:
        with pytest.raises(ConnectionError):
            await relay_once(db, lost, relay.changelog, 500, relay.changes)
    finally:
        await lost.stop()
    assert await db.fetchval("SELECT count(*) FROM index_outbox") == 2  # rolled back: the rows stay
    assert await relay.run(db) == 2

    events = await relay.read(4)
    ids = [data["id"] for _, data in events]
    assert len(ids) == 4 and len(set(ids)) == 2  # each change twice, under one id
    first, again = {}, {}
    for _, data in events:
        (again if data["id"] in first else first)[data["id"]] = data
    assert first == again  # the same event again


async def test_an_erasure_is_announced_and_what_is_sent_after_it_has_no_content(
    api: Api, db: asyncpg.Pool, relay: Relay
) -> None:
    await agent_memory(db, "bob", "Never use emoji")  # not relayed before the erasure
    await agent_memory(db, "alice")
    await api.call("DELETE", "/v1/users/bob", user="bob")

    assert await relay.run(db) == 3
    events = await relay.read(3)
    for record, data in events:
        check_event(record, data)
    created, erased = of(events, "bob")
    assert (created["type"], created["erased"], created["text"], created["receipts"]) == ("created", True, None, [])
    assert (erased["type"], erased["action"], erased["actor"], erased["erased"]) == ("deleted", "erase", "user", True)
    assert erased["memory_id"] == created["memory_id"] and erased["text"] is None and erased["previous_text"] is None
    assert not any("emoji" in json.dumps(data) for _, data in events)
    [alice] = of(events, "alice")
    assert alice["type"] == "created" and not alice["erased"]


def test_the_schema_refuses_an_event_that_lies_about_its_type() -> None:
    valid = {
        "schema_version": 1,
        "id": "audit-1",
        "type": "created",
        "action": "create",
        "user_id": "alice",
        "memory_id": "0b0d0e0f-0000-4000-8000-000000000001",
        "actor": "agent",
        "author": "agent",
        "kind": "preference",
        "version": 1,
        "text": "Always answer in metric units.",
        "previous_text": None,
        "receipts": ["m1"],
        "replaces": [],
        "hypothesis": None,
        "reason": "new evidence",
        "run_id": None,
        "at": "2026-12-03T16:00:00+00:00",
        "erased": False,
    }
    VALIDATOR.validate(valid)
    for wrong in ({"type": "evicted"}, {"id": "1"}, {"author": "system"}, {"secret": "x"}):
        assert not VALIDATOR.is_valid({**valid, **wrong}), wrong


class HeldOpen(KeptProducer):
    """A relay caught sending: it waits inside its transaction until `go` is set."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.sending, self.go = asyncio.Event(), asyncio.Event()

    async def send_all(self, topic: str, records: Sequence[Any]) -> None:
        self.sending.set()
        await self.go.wait()
        await super().send_all(topic, records)


async def test_one_relay_sends_at_a_time_so_no_batch_overtakes_another(
    api: Api, db: asyncpg.Pool, relay: Relay, kafka: KafkaSettings
) -> None:
    first = await api.call("POST", "/v1/users/alice/memories", body={"text": "I like tea"}, expect=201)
    slow = HeldOpen(kafka.kafka_bootstrap, name="slow-relay")
    slow.start()
    await slow.wait_ready(30)
    sending = asyncio.ensure_future(relay_once(db, slow, relay.changelog, 500, relay.changes))
    try:
        await slow.sending.wait()  # the slow relay holds alice's first change
        await api.call("PATCH", f"/v1/users/alice/memories/{first['id']}", body={"text": "I like green tea"})
        assert await relay.run(db) == 0  # the other relay stands by instead of sending the update first
        slow.go.set()
        assert await sending == 1
    finally:
        slow.go.set()  # a failed assertion above must not leave the slow relay's transaction open
        await asyncio.gather(sending, return_exceptions=True)
        await slow.stop()
    assert await relay.run(db) == 1
    events = await relay.read(2)
    assert [(data["type"], data["version"]) for _, data in events] == [("created", 1), ("updated", 2)]
