"""Claims, fairness and fencing against the real PostgreSQL (invariants 2, 3, 4)."""

from __future__ import annotations

import asyncpg
import pytest
from memwright.agent.rules import RulesPolicy
from memwright.agent.run import Fenced, run_agent, start_run
from memwright.store import leases

from tests.integration.helpers import sweep


async def test_second_curator_skips_claimed_user(db: asyncpg.Pool) -> None:
    await sweep(db, "alice", "Always answer in metric units")
    async with db.acquire() as a, db.acquire() as b:
        first = await leases.claim_next(a, "curator-a", 60)
        second = await leases.claim_next(b, "curator-b", 60)
    assert first is not None and first.user_id == "alice"
    assert second is None


async def test_claims_follow_waiting_since_order(db: asyncpg.Pool) -> None:
    await sweep(db, "recent", "hi", ago=10)
    await sweep(db, "oldest", "hi", ago=300)
    await sweep(db, "middle", "hi", ago=60)
    order = []
    async with db.acquire() as conn:
        while (lease := await leases.claim_next(conn, "c", 60)) is not None:
            order.append(lease.user_id)
    assert order == ["oldest", "middle", "recent"]


async def test_a_worker_holding_the_advisory_lock_blocks_the_user_even_after_its_lease_expired(
    db: asyncpg.Pool,
) -> None:
    await sweep(db, "alice", "hi", ago=100)
    await sweep(db, "bob", "hi", ago=50)
    async with db.acquire() as zombie, db.acquire() as other:
        lease = await leases.claim_next(zombie, "zombie", 0.001)  # expires at once, lock still held
        assert lease is not None and lease.user_id == "alice"
        taken = await leases.claim_next(other, "other", 60)
        assert taken is not None and taken.user_id == "bob"  # alice is skipped, not waited on
        await leases.release(zombie, lease)


async def test_a_run_whose_lease_was_taken_over_commits_nothing(db: asyncpg.Pool) -> None:
    await sweep(db, "alice", "Always answer in metric units", ago=10)
    async with db.acquire() as slow, db.acquire() as fast:
        stale = await leases.claim_next(slow, "slow", 0.001)
        assert stale is not None
        await leases.release(slow, stale)  # its lease expired and the lock is gone (paused, reconnected)
        fresh = await leases.claim_next(fast, "fast", 60)
        assert fresh is not None and fresh.epoch == stale.epoch + 1

        run_id = await start_run(slow, stale, "rules")
        with pytest.raises(Fenced):
            await run_agent(slow, stale, RulesPolicy(), run_id)
    assert await db.fetchval("SELECT count(*) FROM memories") == 0
    assert await db.fetchval("SELECT count(*) FROM memory_audit") == 0
    assert await db.fetchval("SELECT count(*) FROM index_outbox") == 0
    assert await db.fetchval("SELECT watermark FROM agents WHERE user_id = 'alice'") == 0
