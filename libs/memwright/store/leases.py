"""Claims, heartbeats and release of a user's memory agent (invariants 2, 3 and 4).

Ownership of a user is its lease: the agents row (owner, epoch, expiry). A claim is ONE
statement: it picks the user whose oldest waiting signal is the oldest (fairness) and
whose lease is free or expired, bumps the lease epoch (the fencing token), extends the
expiry and takes the run's advisory lock on the caller's connection.

A curator process makes its claims on its one long-lived `Liveness` connection, which so
holds the advisory locks of all the process's runs. A run holds no connection of its own:
it borrows a pooled one for its snapshot and another for its commit, and none while the
model thinks (invariant 2: connections, not users, would otherwise limit scale).

The advisory lock is keyed by (user, epoch), so it names one run. It says "this run's
curator is alive": it dies with the liveness connection (crash, kill -9,
pg_terminate_backend), and a heartbeat renews a lease only while that connection still
holds the run's lock. When the liveness connection is lost, every run it held loses its
lease (the curator stops them) and the next use opens a new one.

An expired lease is taken over:
- at once, when the run's lock is gone (its curator's connection died: nothing of it can commit);
- after one more lease length (the grace), when the lock is still held (a paused or
  partitioned curator). Its lock does not block the new run, whose lock has a different
  key; the stale run's commit is refused by the epoch fence (agent/run.py).
A valid (unexpired) lease is never taken, whatever pg_locks says: pg_locks is read once
per statement and is not transactional, so it only ever decides between "expired and
dead" and "expired and silent", never whether a fresh lease is free.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TypeVar

import asyncpg
import structlog

from memwright.store.db import connect

T = TypeVar("T")
log = structlog.get_logger()

# The run's advisory lock, held by a connection with pid `pid` (or by anyone when pid is NULL).
# Advisory locks with a bigint key show in pg_locks as classid (high 32 bits), objid (low 32 bits).
_RUN_LOCK_HELD = """EXISTS (
    SELECT 1 FROM pg_locks l
    WHERE l.locktype = 'advisory' AND l.objsubid = 1 AND l.granted
      AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())
      AND ((l.classid::bigint << 32) | l.objid::bigint) = hashtextextended({user}, {epoch})
      AND ({pid}::integer IS NULL OR l.pid = {pid}::integer))"""

CLAIM_NEXT = f"""
WITH candidate AS MATERIALIZED (
    SELECT a.user_id, a.lease_epoch, a.lease_owner AS previous_owner,
           CASE WHEN a.lease_owner IS NULL THEN NULL
                WHEN {_RUN_LOCK_HELD.format(user="a.user_id", epoch="a.lease_epoch", pid="NULL")}
                THEN 'holder_silent' ELSE 'connection_lost' END AS takeover
    FROM backlog b
    JOIN agents a ON a.user_id = b.user_id
    WHERE a.lease_expires_at IS NULL
       OR (a.lease_expires_at < now()
           AND (a.lease_owner IS NULL  -- released with a retry time (a failed run)
                -- invariant 3: an expired lease whose run's connection is gone is recovered at once;
                -- one whose run still holds its lock (paused, partitioned) after one more lease length
                OR a.lease_expires_at < now() - make_interval(secs => $3)
                OR NOT {_RUN_LOCK_HELD.format(user="a.user_id", epoch="a.lease_epoch", pid="NULL")}))
    ORDER BY b.waiting_since, b.user_id  -- invariant 4: longest-waiting user first
    LIMIT 1
    FOR UPDATE OF a SKIP LOCKED          -- invariant 2: a second curator skips a user being claimed
)
UPDATE agents a
SET lease_owner = $1,
    lease_epoch = a.lease_epoch + 1,     -- invariant 3: the new fencing token
    lease_expires_at = now() + make_interval(secs => $2)
FROM candidate c
WHERE a.user_id = c.user_id
  AND a.lease_epoch = c.lease_epoch
  -- invariant 2: the run's lock on this connection, in the same statement; c only, so it is
  -- evaluated for the one candidate row and never for other users
  AND pg_try_advisory_lock(hashtextextended(c.user_id, c.lease_epoch + 1))
RETURNING a.user_id, a.lease_epoch, a.watermark,
          coalesce(a.memory_budget, $4::integer) AS memory_budget,  -- per-user override, else the setting
          c.previous_owner, c.takeover, now() AS claimed_at
"""

RENEW = f"""
UPDATE agents SET lease_expires_at = now() + make_interval(secs => $4)
WHERE user_id = $1 AND lease_owner = $2 AND lease_epoch = $3
  -- invariant 3: a run whose connection (and so its lock) is gone stops renewing
  AND {_RUN_LOCK_HELD.format(user="$1", epoch="$3", pid="$5")}
RETURNING lease_expires_at
"""

# The advisory-lock keys this connection holds (the run locks of a liveness connection).
_HELD_BY_ME = """
    SELECT (l.classid::bigint << 32) | l.objid::bigint AS key FROM pg_locks l
    WHERE l.locktype = 'advisory' AND l.objsubid = 1 AND l.granted AND l.pid = pg_backend_pid()
      AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())
"""

# The heartbeat of a whole curator process: one statement renews the leases of all its runs.
RENEW_HELD = f"""
WITH held AS MATERIALIZED ({_HELD_BY_ME})  -- the run locks this (liveness) connection holds, read once
UPDATE agents a SET lease_expires_at = now() + make_interval(secs => $4)
FROM unnest($2::text[], $3::bigint[]) AS r(user_id, epoch)
WHERE a.user_id = r.user_id AND a.lease_owner = $1 AND a.lease_epoch = r.epoch
  -- invariant 3: only runs whose lock this connection still holds (a lost connection renews nothing)
  AND hashtextextended(r.user_id, r.epoch) IN (SELECT key FROM held)
RETURNING a.user_id, a.lease_epoch
"""

UNLOCK = "SELECT pg_advisory_unlock(hashtextextended($1, $2))"

# After a claim whose answer never came back (a timeout or a cancellation after the statement ran):
# the leases this process holds locks for but does not know of are freed, then the locks. Without
# it the unknown run's user would wait two lease lengths for a takeover, its lock held for good.
FREE_UNKNOWN_LEASES = f"""
WITH held AS MATERIALIZED ({_HELD_BY_ME})
UPDATE agents a SET lease_owner = NULL, lease_expires_at = NULL
WHERE a.lease_owner = $1
  AND hashtextextended(a.user_id, a.lease_epoch) IN (SELECT key FROM held)
  AND (a.user_id, a.lease_epoch) NOT IN (SELECT * FROM unnest($2::text[], $3::bigint[]))
RETURNING a.user_id, a.lease_epoch
"""
UNLOCK_UNKNOWN = f"""
SELECT count(*) FILTER (WHERE pg_advisory_unlock(held.key)) FROM ({_HELD_BY_ME}) AS held
WHERE held.key NOT IN (SELECT hashtextextended(u, e) FROM unnest($1::text[], $2::bigint[]) AS k(u, e))
"""

# A run's end on the liveness connection, in one round trip: its lease (if still ours) and its lock
# (when $5: the lock is on this connection, not on one that was lost). The row stays locked by the
# update until the statement ends, so no claim sees the lock gone and the lease still held.
RELEASE_HELD = """
WITH released AS (
    UPDATE agents
    SET lease_owner = NULL,
        lease_expires_at = CASE WHEN $4::float8 > 0 THEN now() + make_interval(secs => $4::float8) END
    WHERE user_id = $1 AND lease_owner = $2 AND lease_epoch = $3  -- only a lease that is still ours
    RETURNING user_id
)
SELECT (SELECT count(*) FROM released) AS released,
       CASE WHEN $5 THEN pg_advisory_unlock(hashtextextended($1, $3)) END AS unlocked
"""

MARK_ABANDONED = """
UPDATE curation_runs
SET status = 'abandoned', finished_at = $5,  -- its ownership ended when the new run claimed the lease
    error = format('lease taken over by %s at epoch %s (%s)', $2::text, $3::bigint, $4::text)
WHERE user_id = $1 AND status = 'running' AND lease_epoch < $3  -- invariant 3: recovery
RETURNING run_id
"""

RELEASE = """
UPDATE agents
SET lease_owner = NULL,
    lease_expires_at = CASE WHEN $4::float8 > 0 THEN now() + make_interval(secs => $4::float8) END  -- retry time
WHERE user_id = $1 AND lease_owner = $2 AND lease_epoch = $3  -- only a lease that is still ours
"""


@dataclass(frozen=True)
class Lease:
    user_id: str
    owner: str
    epoch: int
    watermark: int
    budget: int
    pid: int = 0  # backend pid of the connection that holds the run's advisory lock
    previous_owner: str | None = None  # set when this claim took over another run's lease
    takeover: str | None = None  # why: 'connection_lost' or 'holder_silent'
    claimed_at: datetime | None = None  # database time of the claim: the run's start


async def claim_next(
    conn: asyncpg.Connection,
    owner: str,
    lease_seconds: float,
    grace_seconds: float | None = None,
    default_budget: int = 40,
) -> Lease | None:
    """Claim the longest-waiting claimable user; the run's lock is then held by `conn`.

    `grace_seconds` (default: one lease length) is how long an expired lease whose run
    still holds its lock is left alone before it is taken over. `default_budget` is the
    memory budget of users without a per-user override (MEMWRIGHT_MEMORY_BUDGET).
    """
    grace = lease_seconds if grace_seconds is None else grace_seconds
    row = await conn.fetchrow(CLAIM_NEXT, owner, lease_seconds, grace, default_budget)
    if row is None:
        return None
    return Lease(
        row["user_id"],
        owner,
        row["lease_epoch"],
        row["watermark"],
        row["memory_budget"],
        conn.get_server_pid(),
        row["previous_owner"],
        row["takeover"],
        row["claimed_at"],
    )


async def mark_abandoned_runs(conn: asyncpg.Connection | asyncpg.Pool, lease: Lease) -> int:
    """Runs still 'running' for a user we just claimed lost their lease (invariant 3)."""
    reason = lease.takeover or "lease released or expired"
    claimed_at = lease.claimed_at or datetime.now(UTC)
    return len(await conn.fetch(MARK_ABANDONED, lease.user_id, lease.owner, lease.epoch, reason, claimed_at))


async def renew(conn: asyncpg.Connection | asyncpg.Pool, lease: Lease, lease_seconds: float) -> bool:
    """Extend the lease; False when it is lost (taken over, or the run's connection is gone)."""
    pid = lease.pid or None
    return await conn.fetchval(RENEW, lease.user_id, lease.owner, lease.epoch, lease_seconds, pid) is not None


async def release(conn: asyncpg.Connection, lease: Lease) -> None:
    """Free the lease (if still ours) and the run's advisory lock held by this connection."""
    await conn.execute(RELEASE, lease.user_id, lease.owner, lease.epoch, 0.0)
    await conn.execute(UNLOCK, lease.user_id, lease.epoch)


async def release_for_retry(conn: asyncpg.Connection | asyncpg.Pool, lease: Lease, retry_after: float) -> None:
    """Free the lease (if still ours) of a run that failed; its user is claimable again after
    `retry_after` seconds, so a user whose runs keep failing does not take a slot in a tight loop.
    Works from any connection (the run's own may be gone)."""
    await conn.execute(RELEASE, lease.user_id, lease.owner, lease.epoch, retry_after)


async def backlog_stats(conn: asyncpg.Connection | asyncpg.Pool) -> tuple[int, float]:
    row = await conn.fetchrow(
        "SELECT count(*) AS users, coalesce(extract(epoch FROM now() - min(waiting_since)), 0) AS age FROM backlog"
    )
    assert row is not None
    return int(row["users"]), float(row["age"])


class LivenessLost(ConnectionError):
    """The liveness connection is gone, and with it the advisory locks of all its runs."""


class Liveness:
    """A curator process's one long-lived connection: claims, heartbeats and releases.

    It holds the advisory lock of every run the process claimed, so those locks die with the
    process (quick takeover, invariant 3) while the runs themselves hold no connection. One
    asyncpg connection runs one statement at a time: every use goes through one lock. When the
    connection is found gone (pg_terminate_backend, a network loss, or `drop`), `on_lost(pid)`
    is called once with the backend pid that held the locks, and the next use connects again.

        async with Liveness(dsn, "memwright-curator-liveness c1", on_lost=stop_runs_of) as live:
            lease = await live.claim("c1", lease_seconds=120)
    """

    def __init__(
        self,
        dsn: str,
        application_name: str,
        on_lost: Callable[[int], None] | None = None,
        timeout: float = 30.0,
    ) -> None:
        self.dsn = dsn
        self.application_name = application_name
        self.on_lost = on_lost
        self.timeout = timeout  # per statement; a renewal passes a shorter one
        self._conn: asyncpg.Connection | None = None
        self._lock = asyncio.Lock()
        self._reported: asyncpg.Connection | None = None  # the connection whose loss was reported
        self._closing = False
        self._held: set[tuple[str, int]] = set()  # (user, epoch) of the runs whose locks this connection holds
        self._unsure_owner: str | None = None  # set when a claim's answer was lost: see FREE_UNKNOWN_LEASES

    async def __aenter__(self) -> Liveness:
        async with self._lock:
            await self._connection()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    @property
    def pid(self) -> int | None:
        """The backend pid holding this process's run locks, or None while disconnected."""
        conn = self._conn
        return None if conn is None or conn.is_closed() else conn.get_server_pid()

    async def close(self) -> None:
        """Close the connection: every lock it holds is released with it."""
        self._closing = True
        async with self._lock:
            if self._conn is not None and not self._conn.is_closed():
                await self._conn.close(timeout=5)

    def drop(self) -> None:
        """Give the connection up (it stopped answering): its runs are lost, the next use reconnects."""
        conn = self._conn
        if conn is not None:
            self._lost(conn)
            conn.terminate()

    async def claim(
        self, owner: str, lease_seconds: float, grace_seconds: float | None = None, default_budget: int = 40
    ) -> Lease | None:
        """claim_next on the liveness connection: the run's lock is held by this process."""

        async def claim_one(conn: asyncpg.Connection) -> Lease | None:
            try:
                lease = await claim_next(conn, owner, lease_seconds, grace_seconds, default_budget)
            except (TimeoutError, asyncio.CancelledError):
                self._unsure_owner = owner  # the statement may have run: freed before the next use
                raise
            if lease is not None:
                self._held.add((lease.user_id, lease.epoch))
            return lease

        return await self._use(claim_one)

    async def renew(self, owner: str, held: list[Lease], lease_seconds: float, timeout: float) -> set[tuple[str, int]]:
        """Extend every lease in `held` in one statement; return the (user, epoch) still ours.

        A lease claimed on a connection that is gone is never renewed (its lock died with it)."""

        async def renew_all(conn: asyncpg.Connection) -> set[tuple[str, int]]:
            mine = sorted((x.user_id, x.epoch) for x in held if x.pid == conn.get_server_pid())
            if not mine:
                return set()
            rows = await conn.fetch(
                RENEW_HELD, owner, [u for u, _ in mine], [e for _, e in mine], lease_seconds, timeout=timeout
            )
            return {(r["user_id"], r["lease_epoch"]) for r in rows}

        return await self._use(renew_all, tidy=False)  # a heartbeat is never delayed by the tidying

    async def release(self, lease: Lease, retry_after: float = 0.0) -> None:
        """Free the lease if it is still ours (claimable again after `retry_after` s) and its lock."""

        async def release_one(conn: asyncpg.Connection) -> None:
            held = lease.pid == conn.get_server_pid()  # else the lock died with the connection it was on
            self._held.discard((lease.user_id, lease.epoch))
            try:
                await conn.fetchrow(RELEASE_HELD, lease.user_id, lease.owner, lease.epoch, retry_after, held)
            except (TimeoutError, asyncio.CancelledError):
                self._unsure_owner = lease.owner  # it may not have run: freed as unknown before the next use
                raise

        await self._use(release_one)

    async def _use(self, work: Callable[[asyncpg.Connection], Awaitable[T]], tidy: bool = True) -> T:
        async with self._lock:
            conn = await self._connection()
            try:
                if tidy and self._unsure_owner is not None:
                    await asyncio.wait_for(self._free_unknown(conn, self._unsure_owner), self.timeout)
                return await asyncio.wait_for(work(conn), self.timeout)
            except Exception as exc:
                if conn.is_closed():
                    self._lost(conn)
                    raise LivenessLost(f"the curator's liveness connection was lost: {exc!r}") from exc
                raise

    async def _free_unknown(self, conn: asyncpg.Connection, owner: str) -> None:
        """Free the leases and locks of runs this process claimed without learning of it."""
        users = [u for u, _ in sorted(self._held)]
        epochs = [e for _, e in sorted(self._held)]
        async with conn.transaction():
            freed = await conn.fetch(FREE_UNKNOWN_LEASES, owner, users, epochs)
            unlocked = await conn.fetchval(UNLOCK_UNKNOWN, users, epochs)
        self._unsure_owner = None
        if freed or unlocked:
            log.warning("liveness_unknown_claims_freed", leases=len(freed), locks=unlocked)

    async def _connection(self) -> asyncpg.Connection:
        if self._conn is not None and not self._conn.is_closed():
            return self._conn
        if self._conn is not None:
            self._lost(self._conn)
        self._held.clear()  # a new connection holds no lock
        self._unsure_owner = None
        if self._closing:
            raise LivenessLost("the liveness connection is closed")
        conn = await asyncio.wait_for(
            connect(self.dsn, server_settings={"application_name": self.application_name}), self.timeout
        )
        conn.add_termination_listener(self._terminated)
        self._conn = conn
        return conn

    def _terminated(self, conn: asyncpg.Connection) -> None:
        if conn is self._conn and not self._closing:
            self._lost(conn)

    def _lost(self, conn: asyncpg.Connection) -> None:
        if conn is self._reported:
            return
        self._reported = conn
        if self.on_lost is not None:
            self.on_lost(conn.get_server_pid())
