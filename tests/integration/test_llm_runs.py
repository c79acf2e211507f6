"""The LLM policy against the real PostgreSQL, with the real openai client talking to a local
scripted server: an LLM failure (500s or timeouts after the client's retries) fails the run with
nothing committed, the user's signals stay in the backlog, and the next run redoes them; the
budget refusal travels to the model and back through a real commit."""

from __future__ import annotations

import asyncio

import asyncpg
import pytest
from memwright.agent.llm import LlmPolicy, LlmUnavailable
from memwright.agent.run import Fenced, fail_run, run_agent, start_run
from memwright.settings import CuratorSettings
from memwright.store import leases

from tests.fakes.llm_server import FakeLlm, error, slow, text, tool_call, tool_results
from tests.integration.helpers import sweep

NOTHING_COMMITTED = ("memories", "memory_evidence", "memory_audit", "index_outbox", "agent_state")


def llm_policy(llm: FakeLlm, timeout_s: float = 5.0, max_retries: int = 1) -> LlmPolicy:
    settings = CuratorSettings(pg_dsn="unused", policy="llm", llm_base_url=llm.base_url, llm_model="fake")
    return LlmPolicy(settings, timeout_s=timeout_s, max_retries=max_retries)


async def run_once(db: asyncpg.Pool, policy: LlmPolicy) -> str:
    """Claim the waiting user and run its agent as the curator does; return the run's status."""
    async with db.acquire() as conn:
        lease = await leases.claim_next(conn, "test-curator", 60)
        assert lease is not None, "nobody is waiting"
        run_id = await start_run(conn, lease, policy.name)
        try:
            await run_agent(conn, lease, policy, run_id)
            return "committed"
        except LlmUnavailable as exc:
            await fail_run(conn, run_id, "failed", repr(exc))
            return "failed"
        finally:
            await leases.release(conn, lease)


async def assert_nothing_committed(db: asyncpg.Pool) -> None:
    for table in NOTHING_COMMITTED:
        assert await db.fetchval(f"SELECT count(*) FROM {table}") == 0, table
    assert await db.fetchval("SELECT count(*) FROM backlog") == 1  # still waiting: the next sweep retries
    assert await db.fetchval("SELECT watermark FROM agents") == 0


@pytest.mark.parametrize(
    "failure",
    [
        pytest.param([error(500), error(503)], id="http-500s"),
        pytest.param([slow(2.0, text("late")), slow(2.0, text("late"))], id="timeouts"),
    ],
)
async def test_an_llm_failure_fails_the_run_with_nothing_committed_and_the_next_run_succeeds(
    db: asyncpg.Pool, failure: list
) -> None:
    [mid] = await sweep(db, "alice", "Always answer in metric units.")
    async with FakeLlm() as llm:
        # the model first stages a change, then the endpoint fails for good (retries included)
        llm.push(tool_call("create_memory", text="Always answer in metric units.", evidence=[mid]), *failure)
        assert await run_once(db, llm_policy(llm, timeout_s=0.5)) == "failed"
        assert len(llm.requests) == 3  # one good call, then the failing call and its retry
        await assert_nothing_committed(db)
        status, error_text = await db.fetchrow("SELECT status, error FROM curation_runs")
        assert status == "failed" and "LlmUnavailable" in error_text

        llm.push(tool_call("create_memory", text="Always answer in metric units.", evidence=[mid]), text("done"))
        assert await run_once(db, llm_policy(llm)) == "committed"
    assert await db.fetchval("SELECT text FROM memories") == "Always answer in metric units."
    assert await db.fetchval("SELECT message_id FROM memory_evidence") == mid
    assert await db.fetchval("SELECT count(*) FROM backlog") == 0
    assert await db.fetchval("SELECT watermark FROM agents") == await db.fetchval("SELECT max(seq) FROM messages")
    assert [r["status"] for r in await db.fetch("SELECT status FROM curation_runs ORDER BY started_at")] == [
        "failed",
        "committed",
    ]


async def test_a_transient_500_is_retried_inside_the_run(db: asyncpg.Pool) -> None:
    [mid] = await sweep(db, "alice", "Never use emojis.")
    async with FakeLlm() as llm:
        llm.push(error(500), tool_call("create_memory", text="Never use emojis.", evidence=[mid]), text("done"))
        assert await run_once(db, llm_policy(llm)) == "committed"
    assert await db.fetchval("SELECT count(*) FROM memories") == 1


async def test_the_budget_refusal_reaches_the_model_which_consolidates_and_it_all_commits(db: asyncpg.Pool) -> None:
    await db.execute("INSERT INTO agents (user_id, memory_budget) VALUES ('alice', 2)")
    first = await sweep(db, "alice", "Never use emojis.", "Never use emojis or exclamation marks.", conv="c1")
    async with FakeLlm() as llm:
        llm.push(
            tool_call("create_memory", text="Never use emojis.", evidence=[first[0]]),
            tool_call("create_memory", text="Never use emojis or exclamation marks.", evidence=[first[1]]),
            text("two memories"),
        )
        assert await run_once(db, llm_policy(llm)) == "committed"
        ids = [str(r["memory_id"]) for r in await db.fetch("SELECT memory_id FROM memories ORDER BY created_at")]
        [new] = await sweep(db, "alice", "From now on keep answers under 200 words.", conv="c2")

        def consolidate(request: dict) -> object:
            [refusal] = tool_results(request)
            assert "out of room" in refusal and ids[0] in refusal and ids[1] in refusal
            return tool_call(
                "consolidate_memories",
                memory_ids=ids,
                text="Never use emojis or exclamation marks.",
                evidence=[new],
                reason="they overlap",
            )

        llm.push(
            tool_call("create_memory", text="Keep answers under 200 words.", evidence=[new]),
            consolidate,
            tool_call("create_memory", text="Keep answers under 200 words.", evidence=[new]),
            text("merged and remembered"),
        )
        assert await run_once(db, llm_policy(llm)) == "committed"
    rows = await db.fetch(
        """SELECT m.text, array_agg(e.message_id ORDER BY e.message_id) AS evidence FROM memories m
           JOIN memory_evidence e ON e.memory_id = m.memory_id GROUP BY m.memory_id, m.text ORDER BY m.text"""
    )
    assert [(r["text"], list(r["evidence"])) for r in rows] == [
        ("Keep answers under 200 words.", [new]),
        ("Never use emojis or exclamation marks.", sorted([*first, new])),  # the union of the receipts
    ]
    actions = [r["action"] for r in await db.fetch("SELECT action FROM memory_audit ORDER BY audit_id")]
    assert actions == ["create", "create", "delete", "delete", "consolidate", "create"]


async def test_a_run_whose_lease_is_lost_stops_calling_the_model_and_commits_nothing(db: asyncpg.Pool) -> None:
    [mid] = await sweep(db, "alice", "Always answer in metric units.")
    async with FakeLlm() as llm, db.acquire() as conn:
        # a slow first answer, then more steps the run would take if nobody stopped it
        llm.push(
            slow(2.0, tool_call("create_memory", text="Always answer in metric units.", evidence=[mid])),
            tool_call("list_memories"),
            text("done"),
        )
        lease = await leases.claim_next(conn, "test-curator", 60)
        assert lease is not None
        run_id = await start_run(conn, lease, "llm")
        lease_lost = asyncio.Event()
        asyncio.get_running_loop().call_later(0.2, lease_lost.set)  # what the heartbeat does when renewal fails
        with pytest.raises(Fenced, match="lease lost during the run"):
            await run_agent(conn, lease, llm_policy(llm), run_id, lease_lost)
        await leases.release(conn, lease)
        assert len(llm.requests) == 1  # the completion in flight was abandoned; no further ones
    await assert_nothing_committed(db)
