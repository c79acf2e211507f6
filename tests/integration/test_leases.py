"""Lease semantics against the real PostgreSQL: heartbeats, takeovers, recovery records.

The curator processes that use these are tested in test_curator_processes.py.
"""

from __future__ import annotations

import asyncio

import asyncpg
import pytest
from memwright.agent.rules import RulesPolicy
from memwright.agent.run import Fenced, fail_run, run_agent, start_run
from memwright.store import leases
from memwright.store.db import connect

from tests.integration.helpers import sweep


async def _lock_holders(db: asyncpg.Pool, lease: leases.Lease) -> list[int]:
    return [
        r["pid"]
        for r in await db.fetch(
            """SELECT pid FROM pg_locks WHERE locktype = 'advisory' AND objsubid = 1 AND granted
               AND ((classid::bigint << 32) | objid::bigint) = hashtextextended($1, $2)""",
            lease.user_id,
            lease.epoch,
        )
    ]


async def test_the_claim_holds_the_runs_lock_on_its_connection_and_renews_while_it_lives(
    db: asyncpg.Pool, pg_dsn: str
) -> None:
    await sweep(db, "alice", "Always answer in metric units")
    run_conn = await connect(pg_dsn)
    try:
        lease = await leases.claim_next(run_conn, "c1", 30)
        assert lease is not None and lease.pid == run_conn.get_server_pid()
        assert await _lock_holders(db, lease) == [lease.pid]
        assert await leases.renew(db, lease, 30)

        await db.execute("SELECT pg_terminate_backend($1)", lease.pid)
        for _ in range(50):  # termination is asynchronous
            if not await _lock_holders(db, lease):
                break
            await asyncio.sleep(0.05)
        assert await _lock_holders(db, lease) == []
        assert not await leases.renew(db, lease, 30)  # the heartbeat stops: the run's connection is gone
    finally:
        await run_conn.close()


async def test_an_expired_lease_whose_connection_died_is_recovered_at_once(db: asyncpg.Pool, pg_dsn: str) -> None:
    await sweep(db, "alice", "Always answer in metric units")
    crashed = await connect(pg_dsn)
    first = await leases.claim_next(crashed, "crashed", 0.3)
    assert first is not None
    await crashed.close()  # the lock dies with the connection
    async with db.acquire() as conn:
        assert await leases.claim_next(conn, "other", 30) is None  # an unexpired lease is never taken
        await asyncio.sleep(0.4)
        second = await leases.claim_next(conn, "other", 30)  # grace is 30 s: not needed here
        assert second is not None
        assert (second.user_id, second.epoch) == ("alice", first.epoch + 1)
        assert (second.previous_owner, second.takeover) == ("crashed", "connection_lost")


async def test_a_silent_holder_is_taken_over_after_the_grace_and_its_commit_is_fenced(
    db: asyncpg.Pool, pg_dsn: str
) -> None:
    await sweep(db, "alice", "Always answer in metric units", ago=5)
    zombie = await connect(pg_dsn)  # paused: connected, holding its lock, not heartbeating
    try:
        stale = await leases.claim_next(zombie, "zombie", 0.3)
        assert stale is not None
        run_id = await start_run(zombie, stale, "rules")
        async with db.acquire() as conn:
            await asyncio.sleep(0.4)  # expired, but inside the grace
            assert await leases.claim_next(conn, "other", 0.3, grace_seconds=0.5) is None
            await asyncio.sleep(0.5)
            fresh = await leases.claim_next(conn, "other", 30, grace_seconds=0.5)
            assert fresh is not None and fresh.epoch == stale.epoch + 1
            assert fresh.takeover == "holder_silent"
            assert await leases.mark_abandoned_runs(conn, fresh) == 1
            # the zombie still holds its own lock, which does not block the new run's
            assert await _lock_holders(db, stale) == [stale.pid]
            assert await _lock_holders(db, fresh) == [fresh.pid]

            with pytest.raises(Fenced):
                await run_agent(zombie, stale, RulesPolicy(), run_id)
            assert not await leases.renew(db, stale, 30)
            await fail_run(zombie, run_id, "fenced", "lease epoch taken over")
            await leases.release(conn, fresh)
    finally:
        await zombie.close()
    run = await db.fetchrow("SELECT status, finished_at, error FROM curation_runs WHERE run_id = $1", run_id)
    assert run["status"] == "fenced"
    assert "taken over by other" in run["error"] and "lease epoch taken over" in run["error"]
    for table in ("memories", "memory_evidence", "memory_audit", "index_outbox", "agent_state"):
        assert await db.fetchval(f"SELECT count(*) FROM {table}") == 0, table
    assert await db.fetchval("SELECT watermark FROM agents WHERE user_id = 'alice'") == 0


async def test_a_failed_run_is_retried_after_its_retry_time_not_at_once(db: asyncpg.Pool) -> None:
    await sweep(db, "alice", "Always answer in metric units")
    async with db.acquire() as conn:
        lease = await leases.claim_next(conn, "c1", 30)
        assert lease is not None
        await leases.release_for_retry(conn, lease, 0.4)
        assert await leases.claim_next(conn, "c1", 30) is None
        await asyncio.sleep(0.5)
        again = await leases.claim_next(conn, "c1", 30)
        assert again is not None and again.user_id == "alice" and again.takeover is None


async def test_a_renewal_never_revives_a_lease_that_was_taken_over(db: asyncpg.Pool) -> None:
    await sweep(db, "alice", "hi")
    async with db.acquire() as a, db.acquire() as b:
        old = await leases.claim_next(a, "a", 30)
        assert old is not None
        await leases.release(a, old)
        new = await leases.claim_next(b, "b", 30)
        assert new is not None
        assert not await leases.renew(db, old, 30)
        assert await leases.renew(db, new, 30)
