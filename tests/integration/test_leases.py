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


# ---- one liveness connection per curator process --------------------------------------------


async def test_one_liveness_connection_holds_the_locks_of_many_runs_and_renews_them_in_one_statement(
    db: asyncpg.Pool, pg_dsn: str
) -> None:
    for i, user in enumerate(("alice", "bob", "carol")):
        await sweep(db, user, "Always answer in metric units", ago=30 - i)
    async with leases.Liveness(pg_dsn, "test-liveness") as live:
        held = [await live.claim("c1", 30) for _ in range(3)]
        assert all(lease is not None and lease.pid == live.pid for lease in held)
        runs = [lease for lease in held if lease is not None]
        assert [await _lock_holders(db, lease) for lease in runs] == [[live.pid]] * 3
        assert await live.renew("c1", runs, 30, timeout=5) == {(x.user_id, x.epoch) for x in runs}

        await live.release(runs[0])  # its lease is free and its lock given back, the others untouched
        assert await _lock_holders(db, runs[0]) == []
        assert await db.fetchval("SELECT lease_owner FROM agents WHERE user_id = $1", runs[0].user_id) is None
        assert await live.renew("c1", runs, 30, timeout=5) == {(x.user_id, x.epoch) for x in runs[1:]}
        await db.execute("DELETE FROM backlog WHERE user_id = $1", runs[0].user_id)  # as if it had committed

        # a lease taken over (expired, then the grace) is never renewed, though its lock is still held here
        await db.execute("UPDATE agents SET lease_expires_at = now() - interval '1 minute' WHERE user_id = 'bob'")
        async with db.acquire() as other:
            taken = await leases.claim_next(other, "c2", 30, grace_seconds=0)
            assert taken is not None and taken.user_id == "bob" and taken.takeover == "holder_silent"
            assert await live.renew("c1", runs, 30, timeout=5) == {("carol", runs[2].epoch)}
            await leases.release(other, taken)
    assert await db.fetchval("SELECT count(*) FROM pg_locks WHERE locktype = 'advisory'") == 0  # closed: all freed


async def test_a_lost_liveness_connection_reports_its_runs_renews_none_of_them_and_connects_again(
    db: asyncpg.Pool, pg_dsn: str
) -> None:
    await sweep(db, "alice", "Always answer in metric units", ago=20)
    await sweep(db, "bob", "Never use emoji", ago=10)
    lost: list[int] = []
    async with leases.Liveness(pg_dsn, "test-liveness", on_lost=lost.append) as live:
        first = await live.claim("c1", 30)
        assert first is not None and first.user_id == "alice"
        old_pid = first.pid
        assert await db.fetchval("SELECT pg_terminate_backend($1)", old_pid)
        for _ in range(50):  # the server's notice arrives asynchronously
            if lost:
                break
            await asyncio.sleep(0.05)
        assert lost == [old_pid] and await _lock_holders(db, first) == []

        assert await live.renew("c1", [first], 30, timeout=5) == set()  # its lock died with the connection
        second = await live.claim("c1", 30)  # the next use connects again
        assert second is not None and second.user_id == "bob" and second.pid == live.pid != old_pid
        assert await _lock_holders(db, second) == [second.pid]
        await live.release(first)  # the run was stopped: its lease is freed from the new connection
        async with db.acquire() as other:
            again = await leases.claim_next(other, "c2", 30)
            assert again is not None and again.user_id == "alice" and again.takeover is None
            await leases.release(other, again)
        assert lost == [old_pid]


async def test_a_claim_whose_answer_was_lost_frees_its_lease_and_lock_before_the_next_use(
    db: asyncpg.Pool, pg_dsn: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    await sweep(db, "alice", "Always answer in metric units", ago=20)
    await sweep(db, "bob", "Never use emoji", ago=10)
    real_claim_next = leases.claim_next

    async def answer_lost(*args: object, **kwargs: object) -> leases.Lease | None:
        await real_claim_next(*args, **kwargs)  # type: ignore[arg-type]  # the lease and lock are taken...
        raise TimeoutError  # ...and the caller never learns of it

    async with leases.Liveness(pg_dsn, "test-liveness") as live:
        kept = await live.claim("c1", 30)  # a run this process knows of: left alone
        assert kept is not None and kept.user_id == "alice"
        monkeypatch.setattr(leases, "claim_next", answer_lost)
        with pytest.raises(TimeoutError):
            await live.claim("c1", 30)
        monkeypatch.setattr(leases, "claim_next", real_claim_next)
        lost = await db.fetchrow("SELECT lease_owner, lease_epoch FROM agents WHERE user_id = 'bob'")
        assert lost["lease_owner"] == "c1"  # bob's lease and lock are held by a run nobody runs

        assert await live.renew("c1", [kept], 30, timeout=5) == {("alice", kept.epoch)}  # a heartbeat is not held up
        again = await live.claim("c1", 30)  # the next claim first frees what it does not know of...
        assert again is not None and again.user_id == "bob" and again.takeover is None  # ...so bob is claimable at once
        assert again.epoch == lost["lease_epoch"] + 1
        assert await _lock_holders(db, leases.Lease("bob", "c1", lost["lease_epoch"], 0, 0)) == []
        assert await _lock_holders(db, again) == [live.pid] and await _lock_holders(db, kept) == [live.pid]
        await live.release(again)
        await live.release(kept)
