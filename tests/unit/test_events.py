"""The signal schema: every rejection says what to fix."""

from __future__ import annotations

import pytest
from memwright.events import InvalidSignal, decode_signal, parse_signal

GOOD = {"schema_version": 1, "user_id": "u1", "message_id": "m1", "conversation_id": "c1", "text": "hi"}


def reason(obj: object) -> str:
    with pytest.raises(InvalidSignal) as exc:
        parse_signal(obj)
    return exc.value.reason


def test_a_valid_signal_round_trips_through_its_kafka_record() -> None:
    signal = parse_signal({**GOOD, "sent_at": "2026-01-01T10:00:00Z", "project_id": "p1"})
    assert decode_signal(signal.to_bytes()) == signal


@pytest.mark.parametrize(
    ("change", "expected"),
    [
        ({"user_id": None}, "'user_id' is a required property"),
        ({"text": ""}, "text must not be empty"),
        ({"text": " \n\t"}, "text must not be empty"),
        ({"schema_version": 2}, "schema_version must be 1, got 2"),
        ({"text": "x" * 8001}, "text is too long (8001 characters, at most 8000)"),
        ({"user_id": "bad id with spaces"}, "user_id must match"),
        ({"role": "system"}, "role"),
        ({"extra": 1}, "Additional properties are not allowed"),
        ({"sent_at": "yesterday"}, "sent_at must be an RFC 3339 timestamp"),
        ({"sent_at": "2026-01-01T10:00:00"}, "sent_at must include a timezone offset"),
    ],
)
def test_invalid_signals_are_rejected_with_a_reason(change: dict, expected: str) -> None:
    body = {k: v for k, v in {**GOOD, **change}.items() if v is not None}
    assert expected in reason(body)


def test_records_that_are_not_json_objects_are_rejected() -> None:
    for raw, expected in [(b"{nope", "not JSON"), (None, "no value"), (b"[1]", "JSON object"), (b"\xff", "not JSON")]:
        with pytest.raises(InvalidSignal, match=expected):
            decode_signal(raw)
