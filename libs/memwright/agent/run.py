"""One run of a user's memory agent: load a snapshot, run a policy through the tool layer,
commit everything in ONE transaction fenced by the lease epoch (invariant 3).
"""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections.abc import AsyncIterator, Coroutine
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Protocol

import asyncpg

from memwright.agent.tools import Change, DeletedMemory, Memory, MemoryTools, Message
from memwright.agent.working import WorkingMemory
from memwright.store.leases import Lease

MAX_MESSAGES_PER_RUN = 200
MAX_DELETED_LOADED = 200  # the user's latest deletions a run knows of (invariant 12)


class Policy(Protocol):
    name: str

    async def run(self, tools: MemoryTools, new_messages: list[Message]) -> list[str]: ...


class Fenced(Exception):
    """The lease was taken over while this run worked; its commit is refused."""


class StaleSnapshot(Exception):
    """A memory changed under the run (for example the user edited it); the run is retried."""


@dataclass
class Snapshot:
    memories: list[Memory]
    new_messages: list[Message]
    shown: dict[str, Message]
    working: WorkingMemory
    new_watermark: int
    deleted: list[DeletedMemory] = field(default_factory=list)


def _message(row: asyncpg.Record) -> Message:
    return Message(row["message_id"], row["conversation_id"], row["text"], row["role"], row["accepted_at"], row["seq"])


# invariant 12: the agent-written memories the user deleted, with the receipts they had
USER_DELETED = """
SELECT d.memory_id, d.before->>'text' AS text, d.at,
       coalesce(array_agg(e.message_id ORDER BY e.message_id) FILTER (WHERE e.message_id IS NOT NULL), '{}')
           AS evidence,
       coalesce(array_agg(DISTINCT m.conversation_id) FILTER (WHERE m.conversation_id IS NOT NULL), '{}')
           AS conversations
FROM (SELECT audit_id, memory_id, before, at FROM memory_audit
      WHERE user_id = $1 AND action = 'delete' AND actor = 'user' AND before->>'author' = 'agent'
      ORDER BY audit_id DESC LIMIT $2) d
LEFT JOIN memory_evidence e ON e.user_id = $1 AND e.memory_id = d.memory_id
LEFT JOIN messages m ON m.user_id = e.user_id AND m.message_id = e.message_id
GROUP BY d.audit_id, d.memory_id, d.before, d.at
ORDER BY d.audit_id
"""


async def load_snapshot(conn: asyncpg.Connection, lease: Lease) -> Snapshot:
    memories = [
        Memory(str(r["memory_id"]), r["author"], r["kind"], r["text"], r["version"], list(r["evidence"]))
        for r in await conn.fetch(
            """SELECT m.memory_id, m.author, m.kind, m.text, m.version,
                      coalesce(array_agg(e.message_id ORDER BY e.message_id)
                               FILTER (WHERE e.message_id IS NOT NULL), '{}') AS evidence
               FROM memories m LEFT JOIN memory_evidence e ON e.memory_id = m.memory_id
               WHERE m.user_id = $1
               GROUP BY m.memory_id ORDER BY m.created_at, m.memory_id""",
            lease.user_id,
        )
    ]
    new_messages = [
        _message(r)
        for r in await conn.fetch(
            """SELECT message_id, conversation_id, text, role, accepted_at, seq FROM messages
               WHERE user_id = $1 AND seq > $2 ORDER BY seq LIMIT $3""",
            lease.user_id,
            lease.watermark,
            MAX_MESSAGES_PER_RUN,
        )
    ]
    state = await conn.fetchrow(
        "SELECT summary, hypotheses, transcript FROM agent_state WHERE user_id = $1", lease.user_id
    )
    working = WorkingMemory.from_row(*state) if state else WorkingMemory()
    # The agent is shown its new messages and the messages behind its hypotheses.
    held = sorted({mid for h in working.hypotheses for mid in h.message_ids})
    shown = {m.message_id: m for m in new_messages}
    for r in await conn.fetch(
        """SELECT message_id, conversation_id, text, role, accepted_at, seq FROM messages
           WHERE user_id = $1 AND message_id = ANY($2::text[])""",
        lease.user_id,
        held,
    ):
        shown.setdefault(r["message_id"], _message(r))
    watermark = max((m.seq for m in new_messages), default=lease.watermark)
    deleted = [
        DeletedMemory(str(r["memory_id"]), r["text"], tuple(r["evidence"]), frozenset(r["conversations"]), r["at"])
        for r in await conn.fetch(USER_DELETED, lease.user_id, MAX_DELETED_LOADED)
    ]
    return Snapshot(memories, new_messages, shown, working, watermark, deleted)


async def _unless_lost(work: Coroutine[Any, Any, list[str]], lease_lost: asyncio.Event | None) -> list[str]:
    if lease_lost is None:
        return await work
    task = asyncio.ensure_future(work)
    lost = asyncio.ensure_future(lease_lost.wait())
    try:
        await asyncio.wait({task, lost}, return_when=asyncio.FIRST_COMPLETED)
    except asyncio.CancelledError:
        task.cancel()  # the curator is stopping: take the policy down with the run
        raise
    finally:
        lost.cancel()
    if not task.done():
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        raise Fenced("lease lost during the run (taken over, or its connection is gone); stopped before committing")
    return task.result()


# ---- the commit ------------------------------------------------------------------------

FENCE = """
UPDATE agents SET watermark = $3
WHERE user_id = $1 AND lease_epoch = $2   -- invariant 3: a zombie whose lease was taken over commits nothing
RETURNING user_id
"""

INSERT_MEMORY = """
INSERT INTO memories (memory_id, user_id, author, kind, text, version) VALUES ($1, $2, 'agent', $3, $4, $5)
"""

UPDATE_MEMORY = """
UPDATE memories SET text = $3, version = $4, updated_at = now()
WHERE memory_id = $1 AND user_id = $2 AND version = $5
RETURNING memory_id
"""

DELETE_MEMORY = "DELETE FROM memories WHERE memory_id = $1 AND user_id = $2 AND version = $3 RETURNING memory_id"

LINK_EVIDENCE = """
INSERT INTO memory_evidence (memory_id, user_id, message_id, run_id)
SELECT $1, $2, unnest($3::text[]), $4
ON CONFLICT DO NOTHING
"""

# the change's audit row (invariant 6) and the outbox row that announces it (invariant 9; memory.changes)
AUDIT_AND_OUTBOX = """
WITH audit AS (
    INSERT INTO memory_audit (memory_id, user_id, action, actor, run_id, before, after, evidence, reason)
    VALUES ($1, $2, $3, 'agent', $4, $5, $6, $7, $8)
    RETURNING audit_id
)
INSERT INTO index_outbox (memory_id, user_id, audit_id) SELECT $1, $2, audit_id FROM audit
"""

REFRESH_BACKLOG = """
WITH pending AS (
    SELECT min(accepted_at) AS oldest FROM messages WHERE user_id = $1 AND seq > $2
), upserted AS (
    INSERT INTO backlog (user_id, waiting_since)
    SELECT $1, oldest FROM pending WHERE oldest IS NOT NULL
    ON CONFLICT (user_id) DO UPDATE SET waiting_since = EXCLUDED.waiting_since, updated_at = now()
    RETURNING user_id
)
DELETE FROM backlog WHERE user_id = $1 AND NOT EXISTS (SELECT 1 FROM pending WHERE oldest IS NOT NULL)
"""

SAVE_STATE = """
INSERT INTO agent_state (user_id, summary, hypotheses, transcript, version, updated_at)
VALUES ($1, $2, $3, $4, 1, now())
ON CONFLICT (user_id) DO UPDATE
SET summary = EXCLUDED.summary, hypotheses = EXCLUDED.hypotheses, transcript = EXCLUDED.transcript,
    version = agent_state.version + 1, updated_at = now()
"""

FINISH_RUN = """
UPDATE curation_runs SET status = 'committed', finished_at = now(), watermark_to = $2,
       messages_seen = $3, changes = $4
WHERE run_id = $1
"""


async def _apply(conn: asyncpg.Connection, user_id: str, run_id: uuid.UUID, c: Change) -> None:
    mid = uuid.UUID(c.memory_id)
    if c.action in ("create", "consolidate"):
        assert c.after is not None
        await conn.execute(INSERT_MEMORY, mid, user_id, c.after["kind"], c.after["text"], c.after["version"])
    elif c.action == "update":
        assert c.after is not None and c.before is not None
        if (
            await conn.fetchval(UPDATE_MEMORY, mid, user_id, c.after["text"], c.after["version"], c.before["version"])
            is None
        ):
            raise StaleSnapshot(f"memory {mid} changed during the run")
    elif c.action == "delete":
        assert c.before is not None
        if await conn.fetchval(DELETE_MEMORY, mid, user_id, c.before["version"]) is None:
            raise StaleSnapshot(f"memory {mid} changed during the run")
    if c.evidence:
        await conn.execute(LINK_EVIDENCE, mid, user_id, c.evidence, run_id)
    await conn.execute(AUDIT_AND_OUTBOX, mid, user_id, c.action, run_id, c.before, c.after, c.evidence, c.reason)


async def commit_run(
    conn: asyncpg.Connection, lease: Lease, run_id: uuid.UUID, tools: MemoryTools, snapshot: Snapshot
) -> int:
    """Everything of the run in one transaction; raise Fenced if the lease is no longer ours."""
    working = tools.working
    working.compact()
    async with conn.transaction():
        if await conn.fetchval(FENCE, lease.user_id, lease.epoch, snapshot.new_watermark) is None:
            raise Fenced(f"lease epoch {lease.epoch} for this user was taken over")
        await conn.execute("SET LOCAL memwright.actor = 'agent'")
        # invariant 5 in the database: the budget trigger caps agent memories at the run's budget
        await conn.execute("SELECT set_config('memwright.memory_budget', $1, true)", str(lease.budget))
        for change in tools.changes:
            await _apply(conn, lease.user_id, run_id, change)
        await conn.execute(SAVE_STATE, lease.user_id, working.summary, working.hypotheses_json(), working.transcript)
        await conn.execute(REFRESH_BACKLOG, lease.user_id, snapshot.new_watermark)
        await conn.execute(FINISH_RUN, run_id, snapshot.new_watermark, len(snapshot.new_messages), len(tools.changes))
    return len(tools.changes)


async def start_run(conn: asyncpg.Connection | asyncpg.Pool, lease: Lease, policy: str) -> uuid.UUID:
    """Record the run as running; it started when its lease was claimed (when known)."""
    run_id = uuid.uuid4()
    await conn.execute(
        """INSERT INTO curation_runs (run_id, user_id, worker, lease_epoch, status, policy, watermark_from, started_at)
           VALUES ($1, $2, $3, $4, 'running', $5, $6, coalesce($7::timestamptz, now()))""",
        run_id,
        lease.user_id,
        lease.owner,
        lease.epoch,
        policy,
        lease.watermark,
        lease.claimed_at,
    )
    return run_id


FAIL_RUN = """
UPDATE curation_runs
SET status = $2,
    -- a run taken over (abandoned) that later came back and was fenced keeps the time its lease ended
    finished_at = CASE WHEN status = 'abandoned' THEN finished_at ELSE now() END,
    error = CASE WHEN status = 'abandoned' THEN left(error || '; then ' || $3, 2000) ELSE $3 END
WHERE run_id = $1 AND (status = 'running' OR (status = 'abandoned' AND $2 = 'fenced'))
"""


async def fail_run(conn: asyncpg.Connection | asyncpg.Pool, run_id: uuid.UUID, status: str, error: str) -> None:
    """Record a run that did not commit: 'failed', or 'fenced' (its commit was refused)."""
    await conn.execute(FAIL_RUN, run_id, status, error[:2000])


@contextlib.asynccontextmanager
async def _borrowed(db: asyncpg.Connection | asyncpg.Pool) -> AsyncIterator[asyncpg.Connection]:
    """A pooled connection for one step of the run, given back at once; or the caller's own."""
    if isinstance(db, asyncpg.Pool):
        async with db.acquire() as conn:
            yield conn
    else:
        yield db


async def run_agent(
    db: asyncpg.Connection | asyncpg.Pool,
    lease: Lease,
    policy: Policy,
    run_id: uuid.UUID,
    lease_lost: asyncio.Event | None = None,
) -> tuple[int, MemoryTools]:
    """Run the policy over the user's new signals and commit; return (changes, tools).

    Given a pool, the run borrows one connection for its snapshot and one for its commit and
    holds none while the policy works (invariant 2: a run waiting on a model holds no connection).
    `lease_lost` (set by the curator's heartbeat) stops the policy at once with Fenced: its commit
    would be refused anyway, and an LLM policy would go on paying for completions until then."""
    async with _borrowed(db) as conn:
        snapshot = await load_snapshot(conn, lease)
    tools = MemoryTools(
        lease.user_id, snapshot.memories, snapshot.shown, lease.budget, snapshot.working, snapshot.deleted
    )
    results = await _unless_lost(policy.run(tools, snapshot.new_messages), lease_lost)
    tools.working.record(
        {
            "run_id": str(run_id),
            "at": datetime.now(UTC).isoformat(),
            "messages": [m.message_id for m in snapshot.new_messages],
            "results": results[:50],
        }
    )
    async with _borrowed(db) as conn:
        changes = await commit_run(conn, lease, run_id, tools, snapshot)
    return changes, tools
