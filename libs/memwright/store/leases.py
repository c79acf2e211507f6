"""Claims, heartbeats and release of a user's memory agent (invariants 2, 3 and 4).

A claim is ONE statement: it picks the user whose oldest waiting signal is the
oldest (fairness), whose lease is free or expired and whose advisory lock nobody
holds, bumps the lease epoch (the fencing token) and takes the advisory lock on
the caller's connection. The caller keeps that connection for the whole run.
"""

from __future__ import annotations

from dataclasses import dataclass

import asyncpg

CLAIM_NEXT = """
WITH candidate AS (
    SELECT a.user_id
    FROM backlog b
    JOIN agents a ON a.user_id = b.user_id
    WHERE (a.lease_expires_at IS NULL OR a.lease_expires_at < now())
      -- a crashed-but-connected worker still holds the advisory lock: skip, do not wait
      AND NOT EXISTS (
          SELECT 1 FROM pg_locks l
          WHERE l.locktype = 'advisory' AND l.objsubid = 1 AND l.database = (
                SELECT oid FROM pg_database WHERE datname = current_database())
            AND ((l.classid::bigint << 32) | l.objid::bigint) = hashtextextended(a.user_id, 0))
    ORDER BY b.waiting_since, b.user_id  -- invariant 4: longest-waiting user first
    LIMIT 1
    FOR UPDATE OF a SKIP LOCKED          -- invariant 2: a second curator skips a claimed user
)
UPDATE agents a
SET lease_owner = $1,
    lease_epoch = a.lease_epoch + 1,
    lease_expires_at = now() + make_interval(secs => $2)
FROM candidate c
WHERE a.user_id = c.user_id
  AND pg_try_advisory_lock(hashtextextended(c.user_id, 0))  -- same statement, same connection
RETURNING a.user_id, a.lease_epoch, a.watermark, a.memory_budget
"""

RENEW = """
UPDATE agents SET lease_expires_at = now() + make_interval(secs => $4)
WHERE user_id = $1 AND lease_owner = $2 AND lease_epoch = $3
RETURNING lease_expires_at
"""

MARK_ABANDONED = """
UPDATE curation_runs SET status = 'abandoned', finished_at = now(), error = 'lease expired while running'
WHERE user_id = $1 AND status = 'running'
RETURNING run_id
"""


@dataclass(frozen=True)
class Lease:
    user_id: str
    owner: str
    epoch: int
    watermark: int
    budget: int


async def claim_next(conn: asyncpg.Connection, owner: str, lease_seconds: float) -> Lease | None:
    row = await conn.fetchrow(CLAIM_NEXT, owner, lease_seconds)
    if row is None:
        return None
    return Lease(row["user_id"], owner, row["lease_epoch"], row["watermark"], row["memory_budget"])


async def mark_abandoned_runs(conn: asyncpg.Connection, user_id: str) -> int:
    """Runs still 'running' for a user we just claimed died with their lease (invariant 3)."""
    return len(await conn.fetch(MARK_ABANDONED, user_id))


async def renew(conn: asyncpg.Connection | asyncpg.Pool, lease: Lease, lease_seconds: float) -> bool:
    return await conn.fetchval(RENEW, lease.user_id, lease.owner, lease.epoch, lease_seconds) is not None


async def release(conn: asyncpg.Connection, lease: Lease) -> None:
    """Free the lease (if still ours) and the advisory lock held by this connection."""
    await conn.execute(
        "UPDATE agents SET lease_owner = NULL, lease_expires_at = NULL "
        "WHERE user_id = $1 AND lease_owner = $2 AND lease_epoch = $3",
        lease.user_id, lease.owner, lease.epoch,
    )
    await conn.execute("SELECT pg_advisory_unlock(hashtextextended($1, 0))", lease.user_id)


async def backlog_stats(conn: asyncpg.Connection | asyncpg.Pool) -> tuple[int, float]:
    row = await conn.fetchrow(
        "SELECT count(*) AS users, coalesce(extract(epoch FROM now() - min(waiting_since)), 0) AS age FROM backlog"
    )
    assert row is not None
    return int(row["users"]), float(row["age"])
