"""Event schemas: the signal (validated against schemas/signal.v1.json) and the changelog event."""

from __future__ import annotations

import json
import re
from dataclasses import asdict, dataclass, replace
from datetime import UTC, datetime
from functools import cache
from importlib import resources
from typing import Any

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


# The check's vocabulary is read from the published schema, so the two cannot disagree on it.
_PUBLISHED = signal_schema()["properties"]
_ID = re.compile(signal_schema()["$defs"]["id"]["pattern"])  # anchored; used with fullmatch
_NOT_BLANK = re.compile(_PUBLISHED["text"]["pattern"])
_UNSTORABLE = re.compile(_PUBLISHED["text"]["not"]["pattern"])  # what PostgreSQL's text type refuses
RESERVED_USER_PREFIX = _PUBLISHED["user_id"]["not"]["pattern"].removeprefix("^")  # service tokens' subjects
_REQUIRED = tuple(signal_schema()["required"])
_ID_FIELDS = tuple(name for name, spec in _PUBLISHED.items() if spec.get("$ref") == "#/$defs/id")
_TIME_FIELDS = tuple(name for name, spec in _PUBLISHED.items() if spec.get("format") == "date-time")
_PROPERTIES = frozenset(_PUBLISHED)
_ROLES = tuple(_PUBLISHED["role"]["enum"])
_TEXT_MAX = _PUBLISHED["text"]["maxLength"]


def _problem(obj: dict[str, Any]) -> str | None:
    """What is wrong with a decoded signal, or None: schemas/signal.v1.json written out by hand,
    because this runs for every signal on the ingest path (measured: 1.8 µs against jsonschema's 143 µs).
    tests/unit/test_events.py holds both to the same verdicts. Ids must match their pattern as
    a whole (ECMA-262 `$`: no trailing newline)."""
    for name in _REQUIRED:
        if name not in obj:
            return f"signal: {name!r} is a required property"
    extra = obj.keys() - _PROPERTIES
    if extra:
        names = _show(", ".join(map(repr, sorted(extra))), quote=False)
        return f"signal: unknown field {names} (version {SIGNAL_SCHEMA_VERSION} has no such field)"
    version = obj["schema_version"]
    if isinstance(version, bool) or not isinstance(version, int | float) or version != SIGNAL_SCHEMA_VERSION:
        return f"schema_version must be {SIGNAL_SCHEMA_VERSION}, got {_show(version)}"
    for name in _ID_FIELDS:
        if name not in obj:
            continue
        value = obj[name]
        if not isinstance(value, str):
            return f"{name} must be a string, got {_json_type(value)}"
        if not _ID.fullmatch(value):
            return f"{name} must match {_ID.pattern} (1-128 letters, digits, _ . : @ -)"
    if obj["user_id"].startswith(RESERVED_USER_PREFIX):
        return f"user_id must not start with {RESERVED_USER_PREFIX!r}, the prefix of service tokens' subjects"
    text = obj["text"]
    if not isinstance(text, str):
        return f"text must be a string, got {_json_type(text)}"
    if len(text) > _TEXT_MAX:
        return f"text is too long ({len(text)} characters, at most {_TEXT_MAX})"
    if not _NOT_BLANK.search(text):
        return "text must not be empty"
    unstorable = _UNSTORABLE.search(text)
    if unstorable:  # refused here, or the sweeper could not store the signal (invariant 10)
        char = unstorable.group()
        what = "U+0000 (NUL)" if char == "\0" else f"a lone surrogate U+{ord(char):04X}"
        return f"text holds {what} at character {unstorable.start()}, which PostgreSQL cannot store; remove it"
    if "role" in obj and obj["role"] not in _ROLES:
        return f"role must be one of {', '.join(map(repr, _ROLES))}, got {_show(obj['role'])}"
    for name in _TIME_FIELDS:
        if name in obj and not isinstance(obj[name], str):
            return f"{name} must be a string (RFC 3339), got {_json_type(obj[name])}"
    return None


def _show(value: object, limit: int = 80, quote: bool = True) -> str:
    """A value for a reason, bounded: reasons go back in 400 answers and into dead-letter records."""
    text = repr(value) if quote else str(value)
    return text if len(text) <= limit else f"{text[:limit]}… ({len(text)} characters)"


def _json_type(value: object) -> str:
    names = {bool: "boolean", int: "number", float: "number", str: "string", list: "array", dict: "object"}
    return "null" if value is None else names.get(type(value), type(value).__name__)


def _parse_time(value: str, name: str) -> datetime:
    try:
        parsed = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        raise InvalidSignal(f"{name} must be an RFC 3339 timestamp, got {_show(value)}") from None
    if parsed.tzinfo is None:
        raise InvalidSignal(f"{name} must include a timezone offset, got {_show(value)}")
    try:
        parsed.astimezone(UTC)  # PostgreSQL stores it in UTC: 0001-01-01T00:00+01:00 has no such instant
    except OverflowError:
        reason = f"{name} must be an RFC 3339 timestamp within years 1-9999 in UTC, got {_show(value)}"
        raise InvalidSignal(reason) from None
    return parsed


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
        record: dict[str, Any] = {
            "schema_version": SIGNAL_SCHEMA_VERSION,
            "user_id": self.user_id,
            "message_id": self.message_id,
            "conversation_id": self.conversation_id,
            "text": self.text,
            "role": self.role,
        }
        if self.project_id is not None:
            record["project_id"] = self.project_id
        if self.sent_at is not None:
            record["sent_at"] = self.sent_at.isoformat()
        if self.accepted_at is not None:
            record["accepted_at"] = self.accepted_at.isoformat()
        return record

    def to_bytes(self) -> bytes:
        return json.dumps(self.to_record(), separators=(",", ":")).encode()

    def accepted(self, at: datetime | None = None) -> Signal:
        return replace(self, accepted_at=at or datetime.now(UTC))


def parse_signal(obj: Any, index: int | None = None) -> Signal:
    """Validate one decoded JSON object against the schema; raise InvalidSignal with a reason."""
    if not isinstance(obj, dict):
        raise InvalidSignal(f"a signal must be a JSON object, got {_json_type(obj)}", index)
    problem = _problem(obj)
    if problem:
        raise InvalidSignal(problem, index)
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
    """Decode a Kafka record value; anything malformed (whatever its size or nesting) raises InvalidSignal."""
    if raw is None:
        raise InvalidSignal("record has no value")
    try:
        obj = json.loads(raw)
    except RecursionError:
        raise InvalidSignal("value is not JSON this service can read: nested too deeply") from None
    except ValueError as exc:  # also UnicodeDecodeError, and integers longer than Python converts
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
