"""curator: claims the longest-waiting user, runs that user's one memory agent, commits.

Runs up to MEMWRIGHT_CONCURRENCY users at once; any number of curator processes can
share one database. The rules live in libs: claims, heartbeats and takeovers in
memwright.store.leases, the fenced commit in memwright.agent.run. This shell wires them:

- a claim keeps its connection (it holds the run's advisory lock) for the whole run;
- a heartbeat renews the lease every lease/3 seconds; when a renewal fails (the lease was
  taken over, or the run's connection is gone) the run is stopped before its next step and
  records itself fenced (its commit would be refused anyway);
- a committed run releases its lease; a failed run releases it with a retry time one lease
  length away, so a user whose runs keep failing does not take a slot in a tight loop; a
  fenced run has nothing to release (its lease belongs to another run).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
import time
import uuid
from typing import Any

import asyncpg
import structlog
from memwright import logs, metrics
from memwright.agent.rules import RulesPolicy
from memwright.agent.run import Fenced, Policy, fail_run, run_agent, start_run
from memwright.ops import Readiness, ops_app, run_until_stopped, start_site
from memwright.settings import CuratorSettings
from memwright.store import leases
from memwright.store.db import create_pool

log = structlog.get_logger()
MEMORY_COUNT_SECONDS = 60.0  # counting every memory is a scan: less often than the backlog


def make_policy(settings: CuratorSettings) -> Policy:
    if settings.policy == "llm":
        from memwright.agent.llm import LlmPolicy  # the openai client only when asked for

        return LlmPolicy(settings)
    return RulesPolicy()


class Curator:
    def __init__(self, settings: CuratorSettings, pool: asyncpg.Pool, policy: Policy) -> None:
        self.settings = settings
        self.pool = pool
        self.policy = policy
        self.worker = settings.curator_id or f"{socket.gethostname()}-{os.getpid()}"
        self.running: set[asyncio.Task[None]] = set()
        self.slot_freed = asyncio.Event()

    async def loop(self, stop: asyncio.Event) -> None:
        while not stop.is_set():
            if len(self.running) < self.settings.concurrency and await self.claim_one():
                continue  # work and a free slot: claim the next user at once
            # no work, or every slot busy: wait for a poll interval, a finished run or stop
            self.slot_freed.clear()
            await _first_of(stop, self.slot_freed, timeout=self.settings.poll_seconds)
        if self.running:
            await asyncio.wait(self.running)  # finish what was claimed; new claims have stopped

    async def claim_one(self) -> bool:
        try:
            conn = await self.pool.acquire()
        except Exception as exc:  # the database is down or slow: try again at the next poll
            log.warning("claim_failed", error=str(exc))
            return False
        try:
            lease = await leases.claim_next(
                conn, self.worker, self.settings.lease_seconds, default_budget=self.settings.memory_budget
            )
        except Exception as exc:
            await self._give_back(conn)
            log.warning("claim_failed", error=str(exc))
            return False
        if lease is None:
            await self._give_back(conn)
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
        task = asyncio.create_task(self.run_one(conn, lease))
        self.running.add(task)
        task.add_done_callback(self._run_done)
        return True

    def _run_done(self, task: asyncio.Task[None]) -> None:
        self.running.discard(task)
        self.slot_freed.set()

    async def run_one(self, conn: asyncpg.Connection, lease: leases.Lease) -> None:
        started = time.monotonic()
        bound = log.bind(user_id=lease.user_id, lease_epoch=lease.epoch)
        outcome = "failed"
        run_id: uuid.UUID | None = None
        metrics.CURATOR_ACTIVE_RUNS.inc()
        lease_lost = asyncio.Event()
        heartbeat = asyncio.create_task(self.heartbeat(lease, bound, lease_lost))
        try:
            # a curator paused inside its commit must not hold the user's agents row for ever;
            # RESET ALL when the connection goes back to the pool undoes this
            await conn.execute(f"SET idle_in_transaction_session_timeout = {_millis(self.settings.lease_seconds)}")
            abandoned = await leases.mark_abandoned_runs(conn, lease)
            if abandoned:
                metrics.CURATOR_RUNS.labels("abandoned").inc(abandoned)
                metrics.CURATOR_ABANDONED_RECOVERED.inc(abandoned)
                bound.warning("abandoned_runs_recovered", runs=abandoned, previous_owner=lease.previous_owner)
            run_id = await start_run(conn, lease, self.policy.name)
            bound = bound.bind(run_id=str(run_id))
            changes, tools = await run_agent(conn, lease, self.policy, run_id, lease_lost)
            metrics.CURATOR_BUDGET_REFUSALS.inc(tools.budget_refusals)
            outcome = "committed"
            bound.info("run_committed", changes=changes, refusals=len(tools.refusals))
        except Fenced as exc:
            outcome = "fenced"
            metrics.CURATOR_FENCED.inc()
            bound.warning("commit_fenced", error=str(exc))
            await self._record(conn, run_id, "fenced", str(exc), bound)
        except Exception as exc:
            if conn.is_closed():
                error = f"connection to PostgreSQL lost, nothing committed: {exc!r}"
                bound.warning("run_failed", error=error)
            else:
                error = repr(exc)
                bound.exception("run_failed")
            await self._record(conn, run_id, "failed", error, bound)
        finally:
            heartbeat.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await heartbeat  # no renewal may land after the release below
            metrics.CURATOR_ACTIVE_RUNS.dec()
            metrics.CURATOR_RUNS.labels(outcome).inc()
            metrics.CURATOR_RUN_SECONDS.labels(outcome).observe(time.monotonic() - started)
            try:
                if outcome == "committed":
                    await leases.release(conn, lease)
                elif outcome == "failed":
                    await leases.release_for_retry(self.pool, lease, self.settings.lease_seconds)
            except Exception as exc:
                bound.warning("release_failed", error=str(exc))  # the lease expires by itself
            await self._give_back(conn)

    async def heartbeat(self, lease: leases.Lease, bound: Any, lease_lost: asyncio.Event) -> None:
        """Renew the lease every lease/3 s; once it is lost, say so (the run stops) and stop (invariant 3)."""
        interval = self.settings.lease_seconds / 3
        while True:
            await asyncio.sleep(interval)
            try:
                renewed = await leases.renew(self.pool, lease, self.settings.lease_seconds)
            except Exception as exc:
                bound.warning("heartbeat_failed", error=str(exc))  # try again; the lease may still expire
                continue
            if not renewed:
                metrics.CURATOR_HEARTBEATS_LOST.inc()
                bound.warning("lease_lost", detail="taken over or the run's connection is gone; the run stops")
                lease_lost.set()
                return

    async def _record(
        self, conn: asyncpg.Connection, run_id: uuid.UUID | None, status: str, error: str, bound: Any
    ) -> None:
        """Write the run's outcome, on its own connection if it is still alive, else on another."""
        if run_id is None:
            return
        try:
            if not conn.is_closed():
                await fail_run(conn, run_id, status, error)
                return
        except Exception as exc:
            bound.warning("could_not_record_outcome", error=str(exc))
        try:
            async with self.pool.acquire() as other:
                await fail_run(other, run_id, status, error)
        except Exception as exc:
            bound.warning("could_not_record_outcome", error=str(exc))

    async def _give_back(self, conn: asyncpg.Connection) -> None:
        """Return a connection; the pool's reset unlocks any advisory lock it still holds."""
        try:
            await self.pool.release(conn)
        except Exception as exc:
            log.warning("connection_release_failed", error=str(exc))

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
            await _first_of(stop, timeout=5)


async def memories_by_author(pool: asyncpg.Pool) -> dict[str, int]:
    """Memories of all users together by author, for memwright_curator_memories (no user label)."""
    counts = {"user": 0, "agent": 0}  # both series exist from the start, even at 0
    for row in await pool.fetch("SELECT author, count(*) AS n FROM memories GROUP BY author"):
        counts[row["author"]] = row["n"]
    return counts


def _millis(seconds: float) -> int:
    return max(1000, int(seconds * 1000))


async def _first_of(*events: asyncio.Event, timeout: float) -> None:
    """Wait until one of `events` is set or `timeout` seconds pass."""
    waiters = [asyncio.create_task(e.wait()) for e in events]
    try:
        await asyncio.wait(waiters, timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for w in waiters:
            w.cancel()


async def serve(settings: CuratorSettings, stop: asyncio.Event) -> None:
    # one connection per running user (it holds the run's lock), plus claims, heartbeats and stats
    pool = await create_pool(settings.pg_dsn, 1, settings.concurrency + 3)
    curator = Curator(settings, pool, make_policy(settings))
    readiness = Readiness()
    readiness.add("postgres", lambda: pool.fetchval("SELECT true"))
    ops = await start_site(ops_app(readiness), settings.ops_host, settings.ops_port)
    log.info(
        "curator_started",
        worker=curator.worker,
        concurrency=settings.concurrency,
        lease_seconds=settings.lease_seconds,
        policy=settings.policy,
    )
    try:
        await asyncio.gather(curator.loop(stop), curator.publish_backlog(stop))
    finally:
        await ops.cleanup()
        await pool.close()
        log.info("curator_stopped")


def main() -> None:
    settings = CuratorSettings.from_env()
    logs.configure("curator", settings.log_level, settings.log_json)
    run_until_stopped(lambda stop: serve(settings, stop))
