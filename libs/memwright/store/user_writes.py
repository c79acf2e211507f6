"""Memory changes made by the user (through the api): create, edit and delete their own
memories, and delete a memory the agent wrote.

Each change is one transaction that writes the memory, its audit row (actor 'user', with the
token's subject as principal) and an index_outbox row naming it, so the indexer follows (invariant 9)
and memory.changes announces it, exactly like an agent run does (agent/run.py). A user-written memory changes only in a
transaction that did SET LOCAL memwright.actor = 'user' (invariant 7, enforced by the
memories_protect_user trigger); the agent's transactions never do. A memory the user writes
passes the same guard as the agent's (invariant 11, agent/guard.py): refused with 400 and why.
"""

from __future__ import annotations

import re
import uuid
from typing import Any

import asyncpg

from memwright.agent import guard
from memwright.store.memories import memory_json


class WriteRefused(Exception):
    """The change is refused; `status` is the HTTP status that says why, `reason` what to do."""

    def __init__(self, status: int, reason: str) -> None:
        super().__init__(reason)
        self.status = status
        self.reason = reason


KIND_PATTERN = r"^[a-z][a-z0-9_-]{0,31}$"
REASON_MAX = 500  # characters of the reason a user gives for a change
_KIND = re.compile(KIND_PATTERN.removesuffix("$") + r"\Z")

ACT_FOR_USER = "SET LOCAL memwright.actor = 'user'"  # invariant 7: only such a transaction changes user memories

ENSURE_AGENT = "INSERT INTO agents (user_id) VALUES ($1) ON CONFLICT (user_id) DO NOTHING"
LOCK_USER = "SELECT 1 FROM agents WHERE user_id = $1 FOR UPDATE"

COUNT_USER_WRITTEN = "SELECT count(*) FROM memories WHERE user_id = $1 AND author = 'user'"

INSERT_USER_MEMORY = """
INSERT INTO memories (memory_id, user_id, author, kind, text, version) VALUES ($1, $2, 'user', $3, $4, 1)
RETURNING memory_id, author, kind, text, version, created_at, updated_at
"""

CURRENT_FOR_UPDATE = """
SELECT memory_id, author, kind, text, version FROM memories
WHERE memory_id = $1 AND user_id = $2  -- tenant isolation: the user id is always in the key
FOR UPDATE
"""

UPDATE_USER_MEMORY = """
UPDATE memories SET text = $3, kind = $4, version = version + 1, updated_at = now()
WHERE memory_id = $1 AND user_id = $2 AND author = 'user'  -- invariant 7: PATCH edits only the user's own
RETURNING memory_id, author, kind, text, version, created_at, updated_at
"""

DELETE_MEMORY = "DELETE FROM memories WHERE memory_id = $1 AND user_id = $2"  # tenant isolation: user id in the key

# the change's audit row and the outbox row that announces it (to the index and on memory.changes)
AUDIT_AND_OUTBOX = """
WITH audit AS (
    INSERT INTO memory_audit (memory_id, user_id, action, actor, run_id, before, after, evidence, reason, principal)
    VALUES ($1, $2, $3, 'user', NULL, $4, $5, '{}', $6, $7)  -- invariant 6: every change is in the audit trail
    RETURNING audit_id
)
INSERT INTO index_outbox (memory_id, user_id, audit_id)
SELECT $1, $2, audit_id FROM audit  -- invariant 9: the index follows
"""


# ---- input: the same checks for every way a user writes (the api's routes, the MCP tools) ----------


def check_string(value: object, name: str, max_chars: int, allow_empty: bool = False) -> str:
    """`value` stripped, or WriteRefused (400) saying what is wrong with it."""
    if not isinstance(value, str):
        raise WriteRefused(400, f"{name} must be a string")
    text = value.strip()
    if not text and not allow_empty:
        raise WriteRefused(400, f"{name} must not be empty")
    if len(text) > max_chars:
        raise WriteRefused(400, f"{name} is {len(text)} characters; at most {max_chars}")
    if "\x00" in text:
        raise WriteRefused(400, f"{name} must not contain NUL characters")
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        raise WriteRefused(400, f"{name} is not valid Unicode (lone surrogate)") from None
    return text


def check_kind(value: object) -> str:
    if not isinstance(value, str) or not _KIND.match(value):
        raise WriteRefused(400, "kind must be 1-32 lowercase letters, digits, _ or -, starting with a letter")
    return value


def _snapshot(row: asyncpg.Record) -> dict[str, Any]:
    return {"text": row["text"], "version": row["version"], "author": row["author"], "kind": row["kind"]}


def _memory(row: asyncpg.Record) -> dict[str, Any]:
    return memory_json(row, [])  # a memory the user writes has no receipts: the user is its source


def _check_text(text: str) -> None:
    """Invariant 11: no memory holds a secret, an instruction about the assistant's rules or a
    claim of authority, whoever writes it."""
    verdict = guard.check(text)
    if verdict is not None:
        raise WriteRefused(400, f"this memory is refused: {verdict.reason}")


async def _current(
    conn: asyncpg.Connection, user_id: str, memory_id: uuid.UUID, expected_version: int | None
) -> asyncpg.Record:
    row = await conn.fetchrow(CURRENT_FOR_UPDATE, memory_id, user_id)
    if row is None:
        raise WriteRefused(404, f"no memory {memory_id} for this user")
    if expected_version is not None and row["version"] != expected_version:
        raise WriteRefused(
            412, f"memory {memory_id} is at version {row['version']}, not {expected_version}; read it again"
        )
    return row


async def create(
    conn: asyncpg.Connection, user_id: str, text: str, kind: str, principal: str, reason: str, limit: int
) -> dict[str, Any]:
    """A new memory written by the user; refused (400) by the guard, (409) beyond `limit`
    user-written memories."""
    _check_text(text)
    memory_id = uuid.uuid4()
    async with conn.transaction():
        await conn.execute(ACT_FOR_USER)
        await conn.execute(ENSURE_AGENT, user_id)
        await conn.execute(LOCK_USER, user_id)  # serialises this user's writes, so the limit below is exact
        if await conn.fetchval(COUNT_USER_WRITTEN, user_id) >= limit:
            raise WriteRefused(409, f"this user already wrote {limit} memories, the limit; edit or delete one instead")
        row = await conn.fetchrow(INSERT_USER_MEMORY, memory_id, user_id, kind, text)
        await conn.execute(AUDIT_AND_OUTBOX, memory_id, user_id, "create", None, _snapshot(row), reason, principal)
    return _memory(row)


async def update(
    conn: asyncpg.Connection,
    user_id: str,
    memory_id: uuid.UUID,
    text: str | None,
    kind: str | None,
    expected_version: int | None,
    principal: str,
    reason: str,
) -> dict[str, Any]:
    """Edit a memory the user wrote. A memory the agent wrote is refused (409): the user may
    delete it, or write their own. New text passes the guard (400)."""
    if text is not None:
        _check_text(text)
    async with conn.transaction():
        await conn.execute(ACT_FOR_USER)
        current = await _current(conn, user_id, memory_id, expected_version)
        if current["author"] != "user":
            raise WriteRefused(
                409,
                f"memory {memory_id} was written by the agent; only memories the user wrote can be edited. "
                "Delete it (DELETE) and write your own (POST) instead.",
            )
        row = await conn.fetchrow(
            UPDATE_USER_MEMORY,
            memory_id,
            user_id,
            text if text is not None else current["text"],
            kind if kind is not None else current["kind"],
        )
        await conn.execute(
            AUDIT_AND_OUTBOX, memory_id, user_id, "update", _snapshot(current), _snapshot(row), reason, principal
        )
    return _memory(row)


async def delete(
    conn: asyncpg.Connection,
    user_id: str,
    memory_id: uuid.UUID,
    expected_version: int | None,
    principal: str,
    reason: str,
) -> dict[str, Any]:
    """Delete one memory, whoever wrote it; its receipts (evidence links) stay, as for the agent."""
    async with conn.transaction():
        await conn.execute(ACT_FOR_USER)
        current = await _current(conn, user_id, memory_id, expected_version)
        await conn.execute(DELETE_MEMORY, memory_id, user_id)
        await conn.execute(AUDIT_AND_OUTBOX, memory_id, user_id, "delete", _snapshot(current), None, reason, principal)
    return {"id": str(memory_id), "deleted": True, "author": current["author"], "version": current["version"]}
