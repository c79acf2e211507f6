"""curator: claims the longest-waiting user, runs that user's one memory agent, commits.

Runs up to MEMWRIGHT_CONCURRENCY users at once; any number of curator processes can
share one database (claims are atomic, commits are fenced by the lease epoch).
"""

from __future__ import annotations

import asyncio
import os
import socket
import time

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

    async def loop(self, stop: asyncio.Event) -> None:
        while not stop.is_set():
            claimed = False
            if len(self.running) < self.settings.concurrency:
                claimed = await self.claim_one()
            if not claimed:
                try:
                    await asyncio.wait_for(stop.wait(), self.settings.poll_seconds)
                except TimeoutError:
                    pass
        if self.running:
            await asyncio.wait(self.running)  # finish what was claimed; new claims have stopped

    async def claim_one(self) -> bool:
        conn = await self.pool.acquire()
        try:
            lease = await leases.claim_next(conn, self.worker, self.settings.lease_seconds)
        except (OSError, asyncpg.PostgresError) as exc:
            await self.pool.release(conn)
            log.warning("claim_failed", error=str(exc))
            return False
        if lease is None:
            await self.pool.release(conn)
            return False
        metrics.CURATOR_CLAIMS.inc()
        task = asyncio.create_task(self.run_one(conn, lease))
        self.running.add(task)
        task.add_done_callback(self.running.discard)
        return True

    async def run_one(self, conn: asyncpg.Connection, lease: leases.Lease) -> None:
        started = time.monotonic()
        bound = log.bind(user_id=lease.user_id, lease_epoch=lease.epoch)
        outcome = "failed"
        run_id = None
        heartbeat = asyncio.create_task(self.heartbeat(lease))
        try:
            abandoned = await leases.mark_abandoned_runs(conn, lease.user_id)
            if abandoned:
                metrics.CURATOR_RUNS.labels("abandoned").inc(abandoned)
            run_id = await start_run(conn, lease, self.policy.name)
            bound = bound.bind(run_id=str(run_id))
            changes, tools = await run_agent(conn, lease, self.policy, run_id)
            metrics.CURATOR_BUDGET_REFUSALS.inc(tools.budget_refusals)
            outcome = "committed"
            bound.info("run_committed", changes=changes, refusals=len(tools.refusals))
        except Fenced as exc:
            outcome = "fenced"
            metrics.CURATOR_FENCED.inc()
            bound.warning("run_fenced", error=str(exc))
            if run_id:
                await fail_run(conn, run_id, "fenced", str(exc))
        except Exception as exc:
            bound.exception("run_failed")
            if run_id and not conn.is_closed():
                try:
                    await fail_run(conn, run_id, "failed", repr(exc))
                except Exception:
                    bound.warning("could_not_record_failure")
        finally:
            heartbeat.cancel()
            metrics.CURATOR_RUNS.labels(outcome).inc()
            metrics.CURATOR_RUN_SECONDS.labels(outcome).observe(time.monotonic() - started)
            try:
                if not conn.is_closed():
                    await leases.release(conn, lease)
            except Exception:
                bound.warning("release_failed")  # the lease expires by itself
            await self.pool.release(conn)

    async def heartbeat(self, lease: leases.Lease) -> None:
        interval = self.settings.lease_seconds / 3
        while True:
            await asyncio.sleep(interval)
            try:
                if not await leases.renew(self.pool, lease, self.settings.lease_seconds):
                    log.warning("lease_lost", user_id=lease.user_id, lease_epoch=lease.epoch)
                    return
            except Exception as exc:
                log.warning("heartbeat_failed", error=str(exc))

    async def publish_backlog(self, stop: asyncio.Event) -> None:
        while not stop.is_set():
            try:
                users, age = await leases.backlog_stats(self.pool)
                metrics.CURATOR_BACKLOG_USERS.set(users)
                metrics.CURATOR_OLDEST_WAIT.set(age)
            except Exception as exc:
                log.warning("backlog_stats_failed", error=str(exc))
            try:
                await asyncio.wait_for(stop.wait(), 5)
            except TimeoutError:
                pass


async def serve(settings: CuratorSettings, stop: asyncio.Event) -> None:
    pool = await create_pool(settings.pg_dsn, 1, settings.concurrency + 3)
    curator = Curator(settings, pool, make_policy(settings))
    readiness = Readiness()
    readiness.add("postgres", lambda: pool.fetchval("SELECT true"))
    ops = await start_site(ops_app(readiness), settings.ops_host, settings.ops_port)
    log.info("curator_started", worker=curator.worker, concurrency=settings.concurrency, policy=settings.policy)
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
