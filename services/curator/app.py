"""curator: the service shell around memwright.curation.Curator.

Settings, wiring and one lifespan: the pool (snapshots, commits, stats), the liveness connection
(claims, heartbeats, releases: it holds the advisory locks of all this process's runs), the ops
site and the policy, opened in that order and closed in reverse. The rules live in libs:
memwright.curation (the claim loop and heartbeat), memwright.store.leases (claims and takeovers),
memwright.agent.run (the fenced commit).
"""

from __future__ import annotations

import asyncio
import os
import socket

import structlog
from memwright import logs
from memwright.agent.rules import RulesPolicy
from memwright.agent.run import Policy
from memwright.curation import Curator, millis
from memwright.ops import Readiness, ops_app, run_until_stopped, start_site
from memwright.settings import CuratorSettings
from memwright.store import leases
from memwright.store.db import create_pool

log = structlog.get_logger()


def make_policy(settings: CuratorSettings) -> Policy:
    if settings.policy == "llm":
        from memwright.agent.llm import LlmPolicy  # the openai client only when asked for

        return LlmPolicy(settings)
    return RulesPolicy(read_slots=settings.rules_slots)


def application_names(worker: str) -> tuple[str, str]:
    """How this process's connections show in pg_stat_activity: (pool, liveness)."""
    return f"memwright-curator {worker}"[:63], f"memwright-curator-liveness {worker}"[:63]


async def serve(settings: CuratorSettings, stop: asyncio.Event) -> None:
    worker = settings.curator_id or f"{socket.gethostname()}-{os.getpid()}"
    pool_name, liveness_name = application_names(worker)
    # a few pooled connections whatever the concurrency: a run borrows one for its snapshot and
    # one for its commit; a curator paused inside its commit must not hold the user's row for ever
    pool = await create_pool(
        settings.pg_dsn,
        min(settings.pg_pool_min, settings.pg_pool_max),
        settings.pg_pool_max,
        server_settings={
            "application_name": pool_name,
            "idle_in_transaction_session_timeout": str(millis(settings.lease_seconds)),
        },
    )
    try:
        async with leases.Liveness(settings.pg_dsn, liveness_name, timeout=settings.lease_seconds) as liveness:
            policy = make_policy(settings)
            warm = getattr(policy, "warm", None)
            if warm is not None:  # load a policy's model before the first claim, off the event loop
                await asyncio.to_thread(warm)
            curator = Curator(settings, pool, liveness, policy, worker)
            readiness = Readiness()
            readiness.add("postgres", lambda: pool.fetchval("SELECT true"))
            readiness.add("liveness", lambda: liveness.pid is not None)  # reconnected at the next claim
            ops = await start_site(ops_app(readiness), settings.ops_host, settings.ops_port)
            log.info(
                "curator_started",
                worker=worker,
                concurrency=settings.concurrency,
                lease_seconds=settings.lease_seconds,
                policy=settings.policy,
                pool_max=settings.pg_pool_max,
            )
            try:
                await asyncio.gather(curator.loop(stop), curator.publish_backlog(stop))
            finally:
                await ops.cleanup()
    finally:
        await pool.close()
        log.info("curator_stopped")


def main() -> None:
    settings = CuratorSettings.from_env()
    logs.configure("curator", settings.log_level, settings.log_json)
    run_until_stopped(lambda stop: serve(settings, stop))
