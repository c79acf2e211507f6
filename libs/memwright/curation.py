"""The Curator: claims the longest-waiting user, runs that user's one memory agent, commits.

Runs up to MEMWRIGHT_CONCURRENCY users at once; any number of curator processes can share one
database. The rules live in memwright.store.leases (claims, heartbeats, takeovers) and
memwright.agent.run (the fenced commit); this class drives them:

- every claim is made on the process's one liveness connection (`leases.Liveness`), which so
  holds the advisory locks of all its runs; a run holds no connection of its own: it borrows a
  pooled one for its snapshot and one for its commit, none while the model thinks (invariant 2);
- one heartbeat per process renews the leases of all its runs in one statement every lease/3 s;
  a run whose lease was not renewed (taken over, or the liveness connection is gone) is stopped
  before its next step and records itself fenced (its commit would be refused anyway);
- when the liveness connection is lost, all its runs are stopped at once and the next claim
  connects again; when it stops answering for a lease length, it is given up the same way;
- a committed run releases its lease; a failed run releases it with a retry time one lease
  length away, so a user whose runs keep failing does not take a slot in a tight loop; a fenced
  run releases its lease if it is still its own (lost with the connection, not taken over), so
  its user is claimed again at once. Each run gives its lock back on the liveness connection.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from dataclasses import dataclass, field
from typing import Any

import asyncpg
import structlog

from memwright import metrics
from memwright.agent.run import Fenced, Policy, fail_run, run_agent, start_run
from memwright.settings import CuratorSettings
from memwright.store import leases

log = structlog.get_logger()
MEMORY_COUNT_SECONDS = 60.0  # counting every memory is a scan: less often than the backlog
CONNECTION_ERRORS = (OSError, asyncpg.PostgresConnectionError, asyncpg.InterfaceError)


@dataclass
class Run:
    """A claimed user, from its claim until its lease is released."""

    lease: leases.Lease
    lease_lost: asyncio.Event = field(default_factory=asyncio.Event)


class Curator:
    def __init__(
        self,
        settings: CuratorSettings,
        pool: asyncpg.Pool,
        liveness: leases.Liveness,
        policy: Policy,
        worker: str,
    ) -> None:
        self.settings = settings
        self.pool = pool
        self.liveness = liveness
        self.policy = policy
        self.worker = worker
        self.runs: dict[tuple[str, int], Run] = {}  # by (user, epoch): the runs holding a lease
        self.running: set[asyncio.Task[None]] = set()
        self.slot_freed = asyncio.Event()
        liveness.on_lost = self.liveness_lost

    async def loop(self, stop: asyncio.Event) -> None:
        heartbeat = asyncio.create_task(self.heartbeat())
        try:
            while not stop.is_set():
                if len(self.running) < self.settings.concurrency and await self.claim_one():
                    continue  # work and a free slot: claim the next user at once
                # no work, or every slot busy: wait for a poll interval, a finished run or stop
                self.slot_freed.clear()
                await first_of(stop, self.slot_freed, timeout=self.settings.poll_seconds)
            if self.running:
                await asyncio.wait(self.running)  # finish what was claimed; new claims have stopped
        finally:
            heartbeat.cancel()
            await asyncio.gather(heartbeat, return_exceptions=True)

    async def claim_one(self) -> bool:
        try:
            lease = await self.liveness.claim(
                self.worker, self.settings.lease_seconds, default_budget=self.settings.memory_budget
            )
        except Exception as exc:  # the database is down or slow: try again at the next poll
            log.warning("claim_failed", error=str(exc))
            return False
        if lease is None:
            return False
        metrics.CURATOR_CLAIMS.inc()
        if lease.takeover:
            metrics.CURATOR_LEASE_CONFLICTS.labels(lease.takeover).inc()
            log.warning(
                "lease_taken_over",
                user_id=lease.user_id,
                lease_epoch=lease.epoch,
                previous_owner=lease.previous_owner,
                reason=lease.takeover,
            )
        run = Run(lease)
        self.runs[(lease.user_id, lease.epoch)] = run
        if lease.pid != self.liveness.pid:  # its connection died as the claim returned
            self._lose(run, "the liveness connection was lost as the run was claimed")
        task = asyncio.create_task(self.run_one(run))
        self.running.add(task)
        task.add_done_callback(self._run_done)
        return True

    def _run_done(self, task: asyncio.Task[None]) -> None:
        self.running.discard(task)
        self.slot_freed.set()

    async def run_one(self, run: Run) -> None:
        lease = run.lease
        started = time.monotonic()
        bound = log.bind(user_id=lease.user_id, lease_epoch=lease.epoch)
        outcome = "failed"
        run_id: uuid.UUID | None = None
        metrics.CURATOR_ACTIVE_RUNS.inc()
        try:
            async with self.pool.acquire() as conn:  # a short borrow: recovery records and the run's row
                abandoned = await leases.mark_abandoned_runs(conn, lease)
                run_id = await start_run(conn, lease, self.policy.name)
            if abandoned:
                metrics.CURATOR_RUNS.labels("abandoned").inc(abandoned)
                metrics.CURATOR_ABANDONED_RECOVERED.inc(abandoned)
                bound.warning("abandoned_runs_recovered", runs=abandoned, previous_owner=lease.previous_owner)
            bound = bound.bind(run_id=str(run_id))
            # the pool, not a connection: the run borrows one for its snapshot and one for its commit
            changes, tools = await run_agent(self.pool, lease, self.policy, run_id, run.lease_lost)
            metrics.CURATOR_BUDGET_REFUSALS.inc(tools.budget_refusals)
            outcome = "committed"
            bound.info("run_committed", changes=changes, refusals=len(tools.refusals))
        except Fenced as exc:
            outcome = "fenced"
            metrics.CURATOR_FENCED.inc()
            bound.warning("commit_fenced", error=str(exc))
            await self._record(run_id, "fenced", str(exc), bound)
        except Exception as exc:
            if isinstance(exc, CONNECTION_ERRORS):
                error = f"connection to PostgreSQL lost, nothing committed: {exc!r}"
                bound.warning("run_failed", error=error)
            else:
                error = repr(exc)
                bound.exception("run_failed")
            await self._record(run_id, "failed", error, bound)
        finally:
            self.runs.pop((lease.user_id, lease.epoch), None)  # no renewal counts it lost from here on
            metrics.CURATOR_ACTIVE_RUNS.dec()
            metrics.CURATOR_RUNS.labels(outcome).inc()
            metrics.CURATOR_RUN_SECONDS.labels(outcome).observe(time.monotonic() - started)
            retry_after = self.settings.lease_seconds if outcome == "failed" else 0.0
            try:
                # committed: free; failed: free after a retry time; fenced: free if still ours (the
                # connection was lost, the lease was not taken over), else nothing; the lock in any case
                await self.liveness.release(lease, retry_after)
            except Exception as exc:
                bound.warning("release_failed", error=str(exc))  # the lease expires by itself

    async def heartbeat(self) -> None:
        """Renew the leases of all runs every lease/3 s; stop the runs whose lease is lost (invariant 3)."""
        interval = self.settings.lease_seconds / 3
        answered = time.monotonic()
        while True:
            await asyncio.sleep(interval)
            held = [r.lease for r in self.runs.values() if not r.lease_lost.is_set()]
            if not held:
                answered = time.monotonic()
                continue
            try:
                renewed = await self.liveness.renew(self.worker, held, self.settings.lease_seconds, timeout=interval)
            except leases.LivenessLost:
                continue  # its runs were stopped; the next claim connects again
            except Exception as exc:
                log.warning("heartbeat_failed", error=repr(exc))  # try again; the leases may still expire
                if time.monotonic() - answered > self.settings.lease_seconds:
                    log.warning("liveness_unresponsive", seconds=round(time.monotonic() - answered, 1))
                    self.liveness.drop()  # its runs' leases have expired: stop them, connect again
                continue
            answered = time.monotonic()
            for lease in held:
                run = self.runs.get((lease.user_id, lease.epoch))
                if run is not None and (lease.user_id, lease.epoch) not in renewed:
                    self._lose(run, "taken over, or the liveness connection is gone; the run stops")

    def liveness_lost(self, pid: int) -> None:
        """The liveness connection `pid` is gone, and with it the locks of its runs: stop them."""
        lost = [r for r in self.runs.values() if r.lease.pid == pid and not r.lease_lost.is_set()]
        log.warning("liveness_connection_lost", pid=pid, runs=len(lost))
        for run in lost:
            self._lose(run, "the liveness connection holding its lock is gone; the run stops")

    def _lose(self, run: Run, detail: str) -> None:
        if run.lease_lost.is_set():
            return
        metrics.CURATOR_HEARTBEATS_LOST.inc()
        log.warning("lease_lost", user_id=run.lease.user_id, lease_epoch=run.lease.epoch, detail=detail)
        run.lease_lost.set()

    async def _record(self, run_id: uuid.UUID | None, status: str, error: str, bound: Any) -> None:
        """Write the outcome of a run that did not commit, on a pooled connection."""
        if run_id is None:
            return
        try:
            await fail_run(self.pool, run_id, status, error)
        except Exception as exc:
            bound.warning("could_not_record_outcome", error=str(exc))

    async def publish_backlog(self, stop: asyncio.Event) -> None:
        counted_at = -MEMORY_COUNT_SECONDS
        while not stop.is_set():
            try:
                users, age = await leases.backlog_stats(self.pool)
                metrics.CURATOR_BACKLOG_USERS.set(users)
                metrics.CURATOR_OLDEST_WAIT.set(age)
                if time.monotonic() - counted_at >= MEMORY_COUNT_SECONDS:
                    for author, count in (await memories_by_author(self.pool)).items():
                        metrics.CURATOR_MEMORIES.labels(author).set(count)
                    counted_at = time.monotonic()
            except Exception as exc:
                log.warning("backlog_stats_failed", error=str(exc))
            await first_of(stop, timeout=5)


async def memories_by_author(pool: asyncpg.Pool) -> dict[str, int]:
    """Memories of all users together by author, for memwright_curator_memories (no user label)."""
    counts = {"user": 0, "agent": 0}  # both series exist from the start, even at 0
    for row in await pool.fetch("SELECT author, count(*) AS n FROM memories GROUP BY author"):
        counts[row["author"]] = row["n"]
    return counts


def millis(seconds: float) -> int:
    return max(1000, int(seconds * 1000))


async def first_of(*events: asyncio.Event, timeout: float) -> None:
    """Wait until one of `events` is set or `timeout` seconds pass."""
    waiters = [asyncio.create_task(e.wait()) for e in events]
    try:
        await asyncio.wait(waiters, timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for w in waiters:
            w.cancel()
