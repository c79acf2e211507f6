"""The sweeper's rules without Kafka or PostgreSQL: which failed writes are the data's fault, and
what a dead-letter record keeps."""

from __future__ import annotations

import json

import asyncpg
import pytest
from memwright import metrics
from memwright.sweeping import (
    DLQ_RECORD_MAX_BYTES,
    REASON_MAX_CHARS,
    InOrderAcks,
    dead_letter_key,
    dead_letter_records,
    describe,
    failure_kind,
    original_value,
    read_dead_letters,
    reason_label,
)


@pytest.mark.parametrize(
    ("exc", "kind"),
    [
        (ConnectionRefusedError(111, "refused"), "unavailable"),
        (TimeoutError(), "unavailable"),
        (asyncpg.ConnectionDoesNotExistError("closed in the middle of operation"), "unavailable"),
        (asyncpg.CannotConnectNowError("the database system is starting up"), "unavailable"),
        (asyncpg.AdminShutdownError("terminating connection due to administrator command"), "unavailable"),
        (asyncpg.TooManyConnectionsError("too many clients"), "unavailable"),
        (asyncpg.InterfaceError("pool is closing"), "unavailable"),
        (asyncpg.UndefinedTableError('relation "messages" does not exist'), "unavailable"),
        (asyncpg.DeadlockDetectedError("deadlock detected"), "unavailable"),
        (asyncpg.CharacterNotInRepertoireError('invalid byte sequence for encoding "UTF8": 0x00'), "content"),
        (asyncpg.UntranslatableCharacterError("unsupported Unicode escape sequence"), "content"),
        (asyncpg.DataError("invalid input for query argument $6 (surrogates not allowed)"), "content"),
        (asyncpg.CheckViolationError("violates check constraint"), "content"),
        (RuntimeError("a bug"), "other"),
        (asyncpg.InternalServerError("XX000"), "other"),
        (asyncpg.QueryCanceledError("canceling statement due to statement timeout"), "other"),  # not forever
    ],
)
def test_a_failed_write_is_the_datas_fault_only_when_postgresql_refuses_the_data(exc: Exception, kind: str) -> None:
    assert failure_kind(exc) == kind


@pytest.mark.parametrize(
    "value", [b'{"text":"caf\xc3\xa9"}', b"\xff\xfe not utf-8", b"\xed\xa0\x80 encoded surrogate", b"", None]
)
def test_a_dead_letter_record_keeps_the_reason_and_the_original_bytes(value: bytes | None) -> None:
    [record] = dead_letter_records("PostgreSQL cannot store this signal: x", b"u1", value, "memory.signals", 2, 41)
    obj = json.loads(record)
    assert (obj["reason"], obj["topic"], obj["partition"], obj["offset"], obj["key"]) == (
        "PostgreSQL cannot store this signal: x", "memory.signals", 2, 41, "u1",
    )  # fmt: skip
    assert original_value(obj) == value


@pytest.mark.parametrize(
    "value",
    [b'{"text":' * 110_000 + b"1" + b"}" * 110_000, bytes(range(256)) * 3900, b"\x01" * 999_000],
    ids=["quotes-double-when-escaped", "not-utf-8", "control-characters-grow-sixfold"],
)
def test_a_record_kafka_took_is_dead_lettered_whole_though_its_escaped_form_would_not_fit(value: bytes) -> None:
    # before: one JSON record of 1.1 MB, refused by the producer; the sweeper's agent crashed on it, again and again
    assert len(value) < 1_000_000
    records = dead_letter_records("value is not JSON: x" * 100, b"u1", value, "memory.signals", 0, 7)
    assert len(records) > 1 and all(len(r) <= DLQ_RECORD_MAX_BYTES for r in records)
    [whole] = read_dead_letters(records)
    assert original_value(whole) == value and len(whole["reason"]) == REASON_MAX_CHARS
    assert read_dead_letters(records[:-1]) == [], "an incomplete record is not returned"


def test_a_huge_key_does_not_make_dead_letter_parts_larger_than_kafka_takes() -> None:
    # before: a 500 kB key rode on every part (1.3 MB each), Kafka refused them, and the sweeper
    # retried the same record forever while every partition waited
    key, value = b"k" * 500_000, b"{not json" * 44_000
    records = dead_letter_records("value is not JSON: x", key, value, "memory.signals", 0, 7)
    sent_key = dead_letter_key(key)
    assert sent_key is not None and len(sent_key) < 100
    assert all(len(r) + len(sent_key) <= DLQ_RECORD_MAX_BYTES for r in records)
    [whole] = read_dead_letters(records)
    assert whole["key"] == key.decode() and original_value(whole) == value
    assert dead_letter_key(b"alice") == b"alice" and dead_letter_key(None) is None


def test_describe_bounds_what_asyncpg_quotes() -> None:
    text = describe(asyncpg.DataError("invalid input for query argument $6: ['" + "x" * 10_000 + "']"))
    assert text.startswith("DataError: invalid input") and len(text) == 300


@pytest.mark.parametrize(
    "reason",
    ["value is not JSON this service can read: nested too deeply", "unreadable record: RuntimeError: x",
     "text holds U+0000 (NUL) at character 1, which PostgreSQL cannot store; remove it"],
)  # fmt: skip
def test_every_dead_letter_reason_has_a_known_label(reason: str) -> None:
    assert reason_label(reason) in metrics.KNOWN_LABELS[metrics.SWEEPER_DLQ]


class Event:
    """Stands in for a faust event: records the order acks reached the consumer."""

    def __init__(self, name: str, log: list[str]) -> None:
        self.name, self.log = name, log

    def ack(self) -> None:
        self.log.append(self.name)


def test_acks_reach_the_consumer_in_offset_order_within_each_partition() -> None:
    log: list[str] = []
    acks = InOrderAcks()
    y0, x1, y2 = (acks.receipt("p0", Event(n, log)) for n in ("y0", "x1", "y2"))
    z0 = acks.receipt("p1", Event("z0", log))
    y0.ack()
    y2.ack()  # yara's window is written while xavi's waits: y2 must not reach faust before x1
    z0.ack()  # another partition does not wait for p0
    assert log == ["y0", "z0"]
    x1.ack()
    assert log == ["y0", "z0", "x1", "y2"]


def test_a_record_is_read_whole_inside_the_guard_its_producers_timestamp_included() -> None:
    from datetime import UTC, datetime

    from memwright.events import InvalidSignal, Signal
    from memwright.sweeping import read_record

    raw = Signal("alice", "m1", "c1", "Always answer in metric units").to_bytes()  # no accepted_at
    assert read_record(b"alice", raw, 1_700_000_000.0).accepted_at == datetime.fromtimestamp(1_700_000_000, UTC)
    with pytest.raises(InvalidSignal, match="does not match user_id"):
        read_record(b"bob", raw, 1_700_000_000.0)
    # a raw producer may stamp anything: year 11476 is not a date, so the record is refused here
    # (and dead-lettered by the sweeper) rather than raising where its partition's acks would stop
    with pytest.raises((ValueError, OverflowError, OSError)):
        read_record(b"alice", raw, 299_000_000_000.0)
