"""Event schemas: the signal (validated against schemas/signal.v1.json) and the changelog event."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from functools import cache
from importlib import resources
from typing import Any

from jsonschema import Draft202012Validator

SIGNAL_SCHEMA_VERSION = 1


class InvalidSignal(ValueError):
    """The signal does not match the schema; `reason` says what to fix."""

    def __init__(self, reason: str, index: int | None = None) -> None:
        self.reason = reason
        self.index = index
        super().__init__(reason if index is None else f"signals[{index}]: {reason}")


@cache
def signal_schema() -> dict[str, Any]:
    text = resources.files("memwright").joinpath("schemas/signal.v1.json").read_text()
    return json.loads(text)


@cache
def _validator() -> Draft202012Validator:
    return Draft202012Validator(signal_schema())


def _parse_time(value: str, name: str) -> datetime:
    try:
        parsed = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        raise InvalidSignal(f"{name} must be an RFC 3339 timestamp, got {value!r}") from None
    if parsed.tzinfo is None:
        raise InvalidSignal(f"{name} must include a timezone offset, got {value!r}")
    return parsed


def _reason(error: Any) -> str:
    where = ".".join(str(p) for p in error.absolute_path) or "signal"
    if error.validator == "required":
        return f"{where}: {error.message}"
    if error.validator == "const" and list(error.absolute_path) == ["schema_version"]:
        return f"schema_version must be {SIGNAL_SCHEMA_VERSION}, got {error.instance!r}"
    if error.validator == "maxLength":
        return f"{where} is too long ({len(error.instance)} characters, at most {error.validator_value})"
    if error.validator in ("minLength", "pattern") and where == "text":
        return "text must not be empty"
    if error.validator == "pattern":
        return f"{where} must match {error.validator_value} (1-128 letters, digits, _ . : @ -)"
    if error.validator == "additionalProperties":
        return f"{where}: {error.message}"
    return f"{where}: {error.message}"


@dataclass(frozen=True)
class Signal:
    user_id: str
    message_id: str
    conversation_id: str
    text: str
    role: str = "user"
    project_id: str | None = None
    sent_at: datetime | None = None
    accepted_at: datetime | None = None

    def to_record(self) -> dict[str, Any]:
        """The JSON object produced to Kafka (schema version 1)."""
        record: dict[str, Any] = {"schema_version": SIGNAL_SCHEMA_VERSION}
        for key, value in asdict(self).items():
            if value is None:
                continue
            record[key] = value.isoformat() if isinstance(value, datetime) else value
        return record

    def to_bytes(self) -> bytes:
        return json.dumps(self.to_record(), separators=(",", ":")).encode()

    def accepted(self, at: datetime | None = None) -> Signal:
        return Signal(**{**asdict(self), "accepted_at": at or datetime.now(UTC)})


def parse_signal(obj: Any, index: int | None = None) -> Signal:
    """Validate one decoded JSON object against the schema; raise InvalidSignal with a reason."""
    if not isinstance(obj, dict):
        raise InvalidSignal(f"a signal must be a JSON object, got {type(obj).__name__}", index)
    errors = sorted(_validator().iter_errors(obj), key=lambda e: (len(e.absolute_path), e.path))
    if errors:
        raise InvalidSignal(_reason(errors[0]), index)
    try:
        sent_at = _parse_time(obj["sent_at"], "sent_at") if "sent_at" in obj else None
        accepted_at = _parse_time(obj["accepted_at"], "accepted_at") if "accepted_at" in obj else None
    except InvalidSignal as exc:
        raise InvalidSignal(exc.reason, index) from None
    return Signal(
        user_id=obj["user_id"],
        message_id=obj["message_id"],
        conversation_id=obj["conversation_id"],
        text=obj["text"],
        role=obj.get("role", "user"),
        project_id=obj.get("project_id"),
        sent_at=sent_at,
        accepted_at=accepted_at,
    )


def decode_signal(raw: bytes | None) -> Signal:
    """Decode a Kafka record value; anything malformed raises InvalidSignal."""
    if raw is None:
        raise InvalidSignal("record has no value")
    try:
        obj = json.loads(raw)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise InvalidSignal(f"value is not JSON: {exc}") from None
    return parse_signal(obj)


@dataclass(frozen=True)
class ChangelogEvent:
    """Points at a memory that changed; the indexer reads its current row, never the event's content."""

    memory_id: str
    user_id: str
    outbox_id: int

    def to_bytes(self) -> bytes:
        return json.dumps(asdict(self), separators=(",", ":")).encode()

    @classmethod
    def from_bytes(cls, raw: bytes) -> ChangelogEvent:
        obj = json.loads(raw)
        return cls(memory_id=str(obj["memory_id"]), user_id=str(obj["user_id"]), outbox_id=int(obj["outbox_id"]))
