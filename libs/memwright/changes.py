"""The public stream of memory changes: topic memory.changes, one CloudEvent per audited change.

Other services react to a user's memories changing without polling the api. Each change the
audit trail records (agent runs, the user's writes, erasure) has an outbox row naming its audit
row, written in the same transaction (agent/run.py, store/user_writes.py, store/erasure.py); the
outbox relay (index/relay.py) publishes it here beside the index's changelog, and deletes the row
only once Kafka acknowledged both.

- Types: created, updated, deleted, graduated (a memory created from a hypothesis the agent held:
  its `hypothesis` says which, seen how often and where). A consolidation is `created` with
  `replaces` (the merged memories each get a `deleted`); an erasure is a `deleted` per memory with
  action `erase` and no content.
- Delivery is at least once: a relay that dies after Kafka acknowledged sends the batch again.
  The id (`ce_id`, and `id` in the body) is the audit row's and never changes: dedupe on it.
- Key = user id, so one user's changes share a partition; per memory they come in commit order
  (`version` orders them too).
- An event is built from one audit row and holds that row's user's data only. After an erasure
  the audit row has no content left, so an event sent (again) after it carries none either.
- CloudEvents 1.0 in binary mode (Kafka protocol binding): the attributes are headers (ce_specversion,
  ce_type, ce_source, ce_id, ce_time, ce_subject = the memory id, content-type), the value is the
  JSON body, described by schemas/memory_change.v1.json.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from functools import cache
from importlib import resources
from typing import Any

import asyncpg

SPEC_VERSION = "1.0"
SOURCE = "/memwright/memories"
TYPE_PREFIX = "dev.memwright.memory."
CONTENT_TYPE = "application/json"

# tenant isolation: each event is one audit row, of the row's own user (who is also the Kafka key)
AUDIT_ROWS = """
SELECT audit_id, memory_id, user_id, action, actor, run_id, before, after, evidence, reason, at, erased_at
FROM memory_audit WHERE audit_id = ANY($1::bigint[])
"""


@cache
def change_schema() -> dict[str, Any]:
    return json.loads(resources.files("memwright").joinpath("schemas/memory_change.v1.json").read_text())


def change_type(action: str, before: dict[str, Any] | None) -> str:
    """created / updated / deleted / graduated, from the audit row's action and before-state."""
    if action == "create" and before is not None and "hypothesis" in before:
        return "graduated"
    return {"create": "created", "consolidate": "created", "update": "updated"}.get(action, "deleted")


@dataclass(frozen=True)
class MemoryChange:
    id: str
    type: str
    user_id: str
    memory_id: str
    time: datetime
    data: dict[str, Any]

    def headers(self) -> list[tuple[str, bytes]]:
        attributes = {
            "ce_specversion": SPEC_VERSION,
            "ce_type": TYPE_PREFIX + self.type,
            "ce_source": SOURCE,
            "ce_id": self.id,
            "ce_time": self.time.isoformat(),
            "ce_subject": self.memory_id,
            "content-type": CONTENT_TYPE,
        }
        return [(name, value.encode()) for name, value in attributes.items()]

    def record(self) -> tuple[bytes, bytes, list[tuple[str, bytes]]]:
        """(key, value, headers) for Kafka: keyed by the user."""
        return self.user_id.encode(), json.dumps(self.data, separators=(",", ":")).encode(), self.headers()


def _json(value: Any) -> Any:
    return json.loads(value) if isinstance(value, str) else value


def from_audit(row: asyncpg.Record | dict[str, Any]) -> MemoryChange:
    """The event of one audit row."""
    before, after = _json(row["before"]), _json(row["after"])
    kind = change_type(row["action"], before)
    state = after or before or {}  # the memory after the change; a delete: as it was
    event_id = f"audit-{row['audit_id']}"
    data = {
        "schema_version": 1,
        "id": event_id,
        "type": kind,
        "action": row["action"],
        "user_id": row["user_id"],
        "memory_id": str(row["memory_id"]),
        "actor": row["actor"],
        "author": state.get("author"),
        "kind": state.get("kind"),
        "version": state.get("version"),
        "text": after.get("text") if after else None,
        "previous_text": before.get("text") if before else None,
        "receipts": list(row["evidence"] or []),
        "replaces": list(before.get("replaces", [])) if row["action"] == "consolidate" and before else [],
        "hypothesis": before.get("hypothesis") if kind == "graduated" and before else None,
        "reason": row["reason"] or "",
        "run_id": str(row["run_id"]) if isinstance(row["run_id"], uuid.UUID) else row["run_id"],
        "at": row["at"].isoformat(),
        "erased": row["erased_at"] is not None,
    }
    return MemoryChange(event_id, kind, row["user_id"], str(row["memory_id"]), row["at"], data)


async def load_changes(conn: asyncpg.Connection, audit_ids: Sequence[int]) -> list[MemoryChange]:
    """The events of these audit rows, in the order given."""
    rows = {r["audit_id"]: r for r in await conn.fetch(AUDIT_ROWS, list(audit_ids))}
    return [from_audit(rows[a]) for a in audit_ids if a in rows]
