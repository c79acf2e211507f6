"""Everything held about one user: export it as one document, or erase it.

Erasure is one transaction that removes the user's memories, messages (the evidence
store), evidence links, working memory, backlog and runs; resets the agent row and bumps
its lease epoch so a run in flight is fenced (invariant 3); writes an index_outbox row for
every memory id the user ever had, so the indexer deletes their vectors (invariant 9), those of
the memories erased now naming their 'erase' audit rows (announced on memory.changes);
records the erasure in user_erasures; and turns the user's audit trail into content-free
tombstones, plus one 'erase' tombstone per erased memory. Migration 0002 lets the audit
trail change only that way and only in the transaction that recorded the erasure, and
drops messages accepted before it that arrive later (a later signal starts fresh).
"""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Any

import asyncpg

# ---- export ----------------------------------------------------------------------------

EXPORT_MEMORIES = """
SELECT m.memory_id, m.author, m.kind, m.text, m.version, m.created_at, m.updated_at,
       coalesce(array_agg(e.message_id ORDER BY e.message_id) FILTER (WHERE e.message_id IS NOT NULL), '{}')
           AS evidence
FROM memories m LEFT JOIN memory_evidence e ON e.memory_id = m.memory_id AND e.user_id = m.user_id
WHERE m.user_id = $1
GROUP BY m.memory_id ORDER BY m.created_at, m.memory_id
"""

EXPORT_MESSAGES = """
SELECT message_id, conversation_id, project_id, role, text, sent_at, accepted_at, swept_at
FROM messages WHERE user_id = $1 ORDER BY seq
"""

EXPORT_EVIDENCE = """
SELECT memory_id, message_id, run_id, linked_at FROM memory_evidence WHERE user_id = $1
ORDER BY linked_at, memory_id, message_id
"""

EXPORT_AUDIT = """
SELECT audit_id, memory_id, action, actor, principal, run_id, before, after, evidence, reason, at, erased_at
FROM memory_audit WHERE user_id = $1 ORDER BY audit_id
"""

EXPORT_AGENT = "SELECT watermark, memory_budget, created_at FROM agents WHERE user_id = $1"

EXPORT_WORKING = "SELECT summary, hypotheses, transcript, version, updated_at FROM agent_state WHERE user_id = $1"

EXPORT_BACKLOG = "SELECT waiting_since FROM backlog WHERE user_id = $1"

EXPORT_RUNS = """
SELECT run_id, status, policy, messages_seen, changes, error, started_at, finished_at
FROM curation_runs WHERE user_id = $1 ORDER BY started_at, run_id
"""

EXPORT_ERASURES = "SELECT erasure_id, requested_by, counts, erased_at FROM user_erasures WHERE user_id = $1"


def _plain(value: Any) -> Any:
    if isinstance(value, datetime):
        return value.isoformat()
    if isinstance(value, uuid.UUID):
        return str(value)
    if isinstance(value, list):
        return [_plain(v) for v in value]
    return value


def _rows(rows: list[asyncpg.Record]) -> list[dict[str, Any]]:
    return [{k: _plain(v) for k, v in r.items()} for r in rows]


def _row(row: asyncpg.Record | None) -> dict[str, Any] | None:
    return None if row is None else {k: _plain(v) for k, v in row.items()}


async def export(conn: asyncpg.Connection, user_id: str) -> dict[str, Any]:
    """One JSON-ready document of everything held about the user, read from one snapshot."""
    async with conn.transaction(isolation="repeatable_read", readonly=True):
        memories = _rows(await conn.fetch(EXPORT_MEMORIES, user_id))
        for m in memories:
            m["id"] = m.pop("memory_id")
        return {
            "user_id": user_id,
            "exported_at": _plain(await conn.fetchval("SELECT now()")),
            "memories": memories,
            "messages": _rows(await conn.fetch(EXPORT_MESSAGES, user_id)),
            "evidence": _rows(await conn.fetch(EXPORT_EVIDENCE, user_id)),
            "audit": _rows(await conn.fetch(EXPORT_AUDIT, user_id)),
            "agent": _row(await conn.fetchrow(EXPORT_AGENT, user_id)),
            "working_memory": _row(await conn.fetchrow(EXPORT_WORKING, user_id)),
            "backlog": _row(await conn.fetchrow(EXPORT_BACKLOG, user_id)),
            "runs": _rows(await conn.fetch(EXPORT_RUNS, user_id)),
            "erasures": _rows(await conn.fetch(EXPORT_ERASURES, user_id)),
        }


# ---- erasure ---------------------------------------------------------------------------

ACT_FOR_USER = "SET LOCAL memwright.actor = 'user'"  # invariant 7: erasure acts for the user, so their memories go too

FENCE_AGENT = """
UPDATE agents SET lease_owner = NULL, lease_expires_at = NULL, watermark = 0,
       lease_epoch = lease_epoch + 1  -- invariant 3: a run in flight for this user is fenced, commits nothing
WHERE user_id = $1
"""

LOCK_AGENT = "SELECT 1 FROM agents WHERE user_id = $1 FOR UPDATE"  # waits for a sweep or commit in progress

DELETE_MEMORIES = "DELETE FROM memories WHERE user_id = $1 RETURNING memory_id"
DELETE_EVIDENCE = "DELETE FROM memory_evidence WHERE user_id = $1"
DELETE_MESSAGES = "DELETE FROM messages WHERE user_id = $1"
DELETE_WORKING = "DELETE FROM agent_state WHERE user_id = $1"
DELETE_BACKLOG = "DELETE FROM backlog WHERE user_id = $1"
DELETE_RUNS = "DELETE FROM curation_runs WHERE user_id = $1"

AUDITED_MEMORY_IDS = "SELECT DISTINCT memory_id FROM memory_audit WHERE user_id = $1"

OUTBOX_DELETES = """
INSERT INTO index_outbox (memory_id, user_id)
SELECT unnest($2::uuid[]), $1  -- invariant 9: the indexer finds no row and deletes each vector
"""

COUNT_AUDIT_CONTENT = "SELECT count(*) FROM memory_audit WHERE user_id = $1 AND erased_at IS NULL"

RECORD_ERASURE = """
INSERT INTO user_erasures (user_id, requested_by, counts) VALUES ($1, $2, $3)
RETURNING erasure_id, erased_at
"""

TOMBSTONE_AUDIT = """
UPDATE memory_audit SET before = NULL, after = NULL, evidence = '{}', reason = '', erased_at = now()
WHERE user_id = $1 AND erased_at IS NULL  -- the 0002 trigger allows exactly this, after RECORD_ERASURE
"""

# invariant 6: the erasure itself is audited, without content; memory.changes announces each erased memory
AUDIT_ERASE = """
WITH audit AS (
    INSERT INTO memory_audit (memory_id, user_id, action, actor, principal, erased_at)
    SELECT unnest($2::uuid[]), $1, 'erase', $3, $4, now()
    RETURNING audit_id, memory_id
)
INSERT INTO index_outbox (memory_id, user_id, audit_id) SELECT memory_id, $1, audit_id FROM audit
"""


async def erase(conn: asyncpg.Connection, user_id: str, requested_by: str) -> dict[str, Any]:
    """Erase everything held about the user; return the erasure record (counts, no content)."""
    async with conn.transaction():
        await conn.execute(ACT_FOR_USER)
        await conn.execute(LOCK_AGENT, user_id)
        await conn.execute(FENCE_AGENT, user_id)
        erased = [r["memory_id"] for r in await conn.fetch(DELETE_MEMORIES, user_id)]
        counts = {
            "memories": len(erased),
            "evidence_links": _count(await conn.execute(DELETE_EVIDENCE, user_id)),
            "messages": _count(await conn.execute(DELETE_MESSAGES, user_id)),
            "working_memory": _count(await conn.execute(DELETE_WORKING, user_id)),
            "backlog": _count(await conn.execute(DELETE_BACKLOG, user_id)),
            "runs": _count(await conn.execute(DELETE_RUNS, user_id)),
        }
        # the erased memories' outbox rows come with their 'erase' audit rows (AUDIT_ERASE, below)
        gone = {*(r["memory_id"] for r in await conn.fetch(AUDITED_MEMORY_IDS, user_id))} - set(erased)
        await conn.execute(OUTBOX_DELETES, user_id, sorted(gone))
        counts["vector_deletes_queued"] = len(gone) + len(erased)
        counts["audit_rows_tombstoned"] = await conn.fetchval(COUNT_AUDIT_CONTENT, user_id)
        record = await conn.fetchrow(RECORD_ERASURE, user_id, requested_by, counts)
        await conn.execute(TOMBSTONE_AUDIT, user_id)
        actor = "user" if requested_by == user_id else "system"
        await conn.execute(AUDIT_ERASE, user_id, erased, actor, requested_by)
    return {
        "user_id": user_id,
        "erasure_id": record["erasure_id"],
        "erased_at": record["erased_at"].isoformat(),
        "requested_by": requested_by,
        "counts": counts,
    }


def _count(status: str) -> int:
    """Rows affected, from asyncpg's command tag ("DELETE 3", "UPDATE 0")."""
    return int(status.rsplit(" ", 1)[-1])
