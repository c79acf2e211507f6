"""Reads for the api: previews, one memory with its receipts, its audit trail, hypotheses.

Every statement has the user id in its WHERE clause (tenant isolation): a memory id alone
never reaches another user's data. Writes by the user are in user_writes.py; export and
erasure in erasure.py.
"""

from __future__ import annotations

import hashlib
import uuid
from typing import Any, TypeAlias

import asyncpg

PREVIEW_CHARS = 120


def preview(text: str) -> str:
    return text if len(text) <= PREVIEW_CHARS else text[: PREVIEW_CHARS - 1].rstrip() + "…"


Conn: TypeAlias = asyncpg.Connection | asyncpg.Pool


def _preview_json(r: asyncpg.Record) -> dict[str, Any]:
    return {
        "id": str(r["memory_id"]),
        "preview": preview(r["text"]),
        "author": r["author"],
        "kind": r["kind"],
        "version": r["version"],
        "updated_at": r["updated_at"].isoformat(),
    }


async def list_previews(conn: Conn, user_id: str) -> tuple[list[dict[str, Any]], str]:
    """All of a user's memories as previews, in a stable order, and an ETag for the set."""
    rows = await conn.fetch(
        """SELECT memory_id, author, kind, text, version, updated_at FROM memories
           WHERE user_id = $1 ORDER BY created_at, memory_id""",
        user_id,
    )
    items = [_preview_json(r) for r in rows]
    etag = hashlib.sha256("|".join(f"{i['id']}:{i['version']}" for i in items).encode()).hexdigest()[:32]
    return items, f'"{etag}"'


# The memory-set version (migration 0004): a number PostgreSQL moves, at commit, on every insert,
# update or delete of one of the user's memories (whatever the path), and never gives out twice.
# 0 = the user never had a memory. Equal versions mean equal previews, in every api process.

SET_VERSIONS = """
SELECT user_id, version FROM memory_set_versions
WHERE user_id = ANY($1::text[])  -- tenant isolation: each row is found by its own user id (the primary key)
"""

PREVIEWS_AT_VERSION = """
SELECT s.set_version, m.memory_id, m.author, m.kind, m.text, m.version, m.updated_at
FROM (SELECT coalesce(max(version), 0) AS set_version FROM memory_set_versions WHERE user_id = $1) AS s
LEFT JOIN memories m ON m.user_id = $1  -- tenant isolation: the user id is the key of both
ORDER BY m.created_at, m.memory_id
"""


async def memory_set_versions(conn: Conn, user_ids: list[str]) -> dict[str, int]:
    """Each user's memory-set version, in one statement: one primary-key probe per user. The cheap
    check before a cached context block is used (the api coalesces concurrent checks into one)."""
    found = {r["user_id"]: int(r["version"]) for r in await conn.fetch(SET_VERSIONS, user_ids)}
    return {user_id: found.get(user_id, 0) for user_id in user_ids}


async def memory_set_version(conn: Conn, user_id: str) -> int:
    """One user's memory-set version."""
    return (await memory_set_versions(conn, [user_id]))[user_id]


async def previews_at_version(conn: Conn, user_id: str) -> tuple[int, list[dict[str, Any]]]:
    """The memory-set version and the previews it stands for, read in ONE statement (one snapshot),
    so a block cached under that version holds exactly those previews."""
    rows = await conn.fetch(PREVIEWS_AT_VERSION, user_id)
    return int(rows[0]["set_version"]), [_preview_json(r) for r in rows if r["memory_id"] is not None]


def memory_json(row: asyncpg.Record, receipts: list[asyncpg.Record]) -> dict[str, Any]:
    """One memory as the api shows it: full text, author, version, times and its receipts."""
    return {
        "id": str(row["memory_id"]),
        "text": row["text"],
        "author": row["author"],
        "kind": row["kind"],
        "version": row["version"],
        "created_at": row["created_at"].isoformat(),
        "updated_at": row["updated_at"].isoformat(),
        "receipts": [
            {
                "message_id": r["message_id"],
                "conversation_id": r["conversation_id"],
                "project_id": r["project_id"],
                "text": r["text"],
                "at": (r["sent_at"] or r["accepted_at"]).isoformat(),
            }
            for r in receipts
        ],
    }


async def get_with_receipts(conn: Conn, user_id: str, memory_id: uuid.UUID) -> dict[str, Any] | None:
    row = await conn.fetchrow(
        """SELECT memory_id, author, kind, text, version, created_at, updated_at FROM memories
           WHERE memory_id = $1 AND user_id = $2""",  # tenant isolation: user id always in the key
        memory_id,
        user_id,
    )
    if row is None:
        return None
    receipts = await conn.fetch(
        """SELECT m.message_id, m.conversation_id, m.project_id, m.text, m.sent_at, m.accepted_at
           FROM memory_evidence e JOIN messages m ON m.user_id = e.user_id AND m.message_id = e.message_id
           WHERE e.memory_id = $1 AND e.user_id = $2 ORDER BY m.seq""",
        memory_id,
        user_id,
    )
    return memory_json(row, list(receipts))


async def history(conn: Conn, user_id: str, memory_id: uuid.UUID) -> list[dict[str, Any]]:
    """Every audit row of the memory, oldest first; erased rows are tombstones (no content)."""
    rows = await conn.fetch(
        """SELECT audit_id, action, actor, principal, run_id, before, after, evidence, reason, at, erased_at
           FROM memory_audit WHERE memory_id = $1 AND user_id = $2 ORDER BY audit_id""",
        memory_id,
        user_id,
    )
    return [
        {
            "action": r["action"],
            "actor": r["actor"],
            "principal": r["principal"],
            "run_id": str(r["run_id"]) if r["run_id"] else None,
            "before": r["before"],
            "after": r["after"],
            "evidence": list(r["evidence"]),
            "reason": r["reason"],
            "at": r["at"].isoformat(),
            "erased_at": r["erased_at"].isoformat() if r["erased_at"] else None,
        }
        for r in rows
    ]


async def hypotheses(conn: Conn, user_id: str) -> list[dict[str, Any]]:
    value = await conn.fetchval("SELECT hypotheses FROM agent_state WHERE user_id = $1", user_id)
    return list(value or [])
