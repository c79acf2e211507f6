"""A run commits everything in one transaction, or nothing (invariant 3), and the database
itself enforces the budget (5), the append-only audit (6) and the user's memories (7); a memory
the user deleted is seen by the run and comes back only with new evidence (12)."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime

import asyncpg
import pytest
from memwright.agent.prompts import render_context
from memwright.agent.rules import RulesPolicy
from memwright.agent.run import load_snapshot, run_agent, start_run
from memwright.agent.tools import MemoryTools, Message
from memwright.agent.working import WorkingMemory
from memwright.store import leases, user_writes
from memwright.store.leases import Lease

from tests.integration.helpers import sweep


class ExplodingPolicy(RulesPolicy):
    """Does the real work through the tools, then crashes before the commit."""

    async def run(self, tools: MemoryTools, new_messages: list[Message]) -> list[str]:
        await super().run(tools, new_messages)
        assert tools.changes, "the policy should have staged a change"
        raise RuntimeError("crash in the middle of the run")


async def _run(db: asyncpg.Pool, policy: RulesPolicy) -> None:
    async with db.acquire() as conn:
        lease = await leases.claim_next(conn, "t", 60)
        assert lease is not None
        try:
            run_id = await start_run(conn, lease, policy.name)
            await run_agent(conn, lease, policy, run_id)
        finally:
            await leases.release(conn, lease)


async def test_a_crashed_run_leaves_nothing_and_the_next_run_redoes_the_same_signals(db: asyncpg.Pool) -> None:
    [mid] = await sweep(db, "alice", "Never use emoji.")
    with pytest.raises(RuntimeError):
        await _run(db, ExplodingPolicy())
    for table in ("memories", "memory_evidence", "memory_audit", "index_outbox", "agent_state"):
        assert await db.fetchval(f"SELECT count(*) FROM {table}") == 0, table
    assert await db.fetchval("SELECT count(*) FROM backlog") == 1

    await _run(db, RulesPolicy())
    assert await db.fetchval("SELECT count(*) FROM memories") == 1
    assert await db.fetchval("SELECT message_id FROM memory_evidence") == mid
    assert await db.fetchval("SELECT count(*) FROM memory_audit") == 1
    assert await db.fetchval("SELECT count(*) FROM index_outbox") == 1
    assert await db.fetchval("SELECT count(*) FROM backlog") == 0
    assert await db.fetchval("SELECT watermark FROM agents") == await db.fetchval("SELECT max(seq) FROM messages")


async def _insert(conn: asyncpg.Connection, user: str, author: str, text: str = "x") -> uuid.UUID:
    mid = uuid.uuid4()
    await conn.execute(
        "INSERT INTO memories (memory_id, user_id, author, text) VALUES ($1, $2, $3, $4)", mid, user, author, text
    )
    return mid


async def test_the_database_refuses_agent_memories_beyond_the_budget(db: asyncpg.Pool) -> None:
    await db.execute("INSERT INTO agents (user_id, memory_budget) VALUES ('alice', 2)")
    async with db.acquire() as conn:
        await _insert(conn, "alice", "agent")
        await _insert(conn, "alice", "agent")
        await _insert(conn, "alice", "user")  # the user's own memories do not count
        with pytest.raises(asyncpg.CheckViolationError, match="budget"):
            await _insert(conn, "alice", "agent")


async def test_the_database_refuses_agent_changes_to_user_written_memories(db: asyncpg.Pool) -> None:
    async with db.acquire() as conn:
        mid = await _insert(conn, "alice", "user", "I am allergic to nuts")
        for statement in (
            "UPDATE memories SET text = 'changed' WHERE memory_id = $1",
            "DELETE FROM memories WHERE memory_id = $1",
        ):
            async with conn.transaction():
                await conn.execute("SET LOCAL memwright.actor = 'agent'")
                with pytest.raises(asyncpg.InsufficientPrivilegeError, match="written by the user"):
                    await conn.execute(statement, mid)
        async with conn.transaction():
            await conn.execute("SET LOCAL memwright.actor = 'user'")
            await conn.execute("UPDATE memories SET text = 'I am allergic to peanuts' WHERE memory_id = $1", mid)


async def test_the_audit_trail_is_append_only(db: asyncpg.Pool) -> None:
    await sweep(db, "alice", "Always answer in metric units")
    await _run(db, RulesPolicy())
    with pytest.raises(asyncpg.InsufficientPrivilegeError):
        await db.execute("UPDATE memory_audit SET reason = 'rewritten'")
    with pytest.raises(asyncpg.InsufficientPrivilegeError):
        await db.execute("DELETE FROM memory_audit")


async def test_the_configured_budget_applies_to_users_without_their_own(db: asyncpg.Pool) -> None:
    await sweep(db, "alice", "Always answer in metric units.", "Never use emoji.")
    async with db.acquire() as conn:
        lease = await leases.claim_next(conn, "t", 60, default_budget=1)  # MEMWRIGHT_MEMORY_BUDGET=1
        assert lease is not None and lease.budget == 1
        try:
            _, tools = await run_agent(conn, lease, RulesPolicy(), await start_run(conn, lease, "rules"))
        finally:
            await leases.release(conn, lease)
    assert tools.budget_refusals == 1
    assert await db.fetchval("SELECT count(*) FROM memories") == 1
    async with db.acquire() as conn, conn.transaction():
        await conn.execute("SELECT set_config('memwright.memory_budget', '1', true)")
        with pytest.raises(asyncpg.CheckViolationError, match="budget of 1"):
            await _insert(conn, "alice", "agent")
    await db.execute("UPDATE agents SET memory_budget = 5 WHERE user_id = 'alice'")  # a per-user override wins
    await sweep(db, "alice", "hello again", conv="c2")
    async with db.acquire() as conn:
        lease = await leases.claim_next(conn, "t", 60, default_budget=1)
        assert lease is not None and lease.budget == 5
        await leases.release(conn, lease)


# ---- deleted stays deleted (invariant 12) ------------------------------------------------


async def _memories(db: asyncpg.Pool) -> list[asyncpg.Record]:
    return list(
        await db.fetch(
            """SELECT m.memory_id, m.text, array_agg(e.message_id ORDER BY e.message_id) AS evidence
               FROM memories m JOIN memory_evidence e USING (memory_id) GROUP BY m.memory_id"""
        )
    )


async def test_a_memory_the_user_deleted_comes_back_only_with_a_message_from_a_later_conversation(
    db: asyncpg.Pool,
) -> None:
    # a weak signal in two conversations graduates to a memory, then the user deletes it (the api's path)
    [m1] = await sweep(db, "alice", "I'm really into bouldering, it's how I unwind.", conv="c1", ago=7200)
    await _run(db, RulesPolicy())
    [m2] = await sweep(db, "alice", "I love bouldering even though my arms hurt.", conv="c2", ago=3600)
    await _run(db, RulesPolicy())
    [inferred] = await _memories(db)
    assert "bouldering" in inferred["text"] and list(inferred["evidence"]) == [m1, m2]
    async with db.acquire() as conn:
        await user_writes.delete(conn, "alice", inferred["memory_id"], None, "alice", "not true")

    # the run sees it, with its evidence and conversations, and so does the llm policy's context
    async with db.acquire() as conn:
        lease = await leases.claim_next(conn, "t", 60)
        assert lease is None  # nothing new to curate: the deletion alone starts no run
        watermark = await conn.fetchval("SELECT watermark FROM agents WHERE user_id = 'alice'")
        snapshot = await load_snapshot(conn, Lease("alice", "t", 0, watermark, 40))
    [gone] = snapshot.deleted
    assert (gone.memory_id, gone.text, gone.evidence) == (str(inferred["memory_id"]), inferred["text"], (m1, m2))
    assert gone.conversations == {"c1", "c2"}
    tools = MemoryTools("alice", snapshot.memories, snapshot.shown, 40, snapshot.working, snapshot.deleted)
    context = render_context(tools, snapshot.new_messages)
    assert "## Memories the user deleted" in context and f"{gone.memory_id} deleted by the user" in context
    assert f"its evidence: {m1}, {m2}" in context

    # a re-run over the same old messages does not bring it back
    await db.execute("UPDATE agents SET watermark = 0 WHERE user_id = 'alice'")
    await db.execute("INSERT INTO backlog (user_id, waiting_since) VALUES ('alice', now())")
    await _run(db, RulesPolicy())
    assert await _memories(db) == []
    # nor does a hypothesis still holding them (as a policy that did not drop it would), in the next run
    working = WorkingMemory()
    for mid, conv in ((m1, "c1"), (m2, "c2")):
        working.note("User likes bouldering", conv, mid, datetime.now(UTC).isoformat())
    await db.execute("UPDATE agent_state SET hypotheses = $1 WHERE user_id = 'alice'", working.hypotheses_json())
    await sweep(db, "alice", "What's a good name for a cat?", conv="c3")
    await _run(db, RulesPolicy())
    assert await _memories(db) == []

    # a new message in a later conversation does
    [m4] = await sweep(db, "alice", "I'm really into bouldering these days.", conv="c4")
    await _run(db, RulesPolicy())
    [back] = await _memories(db)
    assert "bouldering" in back["text"] and m4 in back["evidence"]
