"""`memwright index check` and `memwright index rebuild` against the running pipeline: after the
five services formed and indexed memories, the check finds no drift (as after `make demo`),
a rebuild keeps it that way, and the restarted indexer keeps indexing behind the new alias."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys

import aiohttp
import asyncpg

from tests.conftest import ROOT
from tests.e2e.conftest import Pipeline
from tests.e2e.helpers import eventually, new_user, signal


def index_command(pipeline: Pipeline, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "memwright", "index", *args],
        env={**os.environ, **pipeline.env},
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )


async def _remembered(http: aiohttp.ClientSession, pipeline: Pipeline, user: str, text: str) -> None:
    async with http.post(pipeline.ingest + "/v1/signals", json=signal(user, text), headers=pipeline.auth()) as r:
        assert r.status == 202, await r.text()

    async def formed() -> bool:
        async with http.get(f"{pipeline.api}/v1/users/{user}/memories", headers=pipeline.auth()) as r:
            return bool((await r.json())["memories"])

    await eventually(formed, timeout=60, what=f"a memory for {user}")


async def _indexed(pool: asyncpg.Pool, http: aiohttp.ClientSession, pipeline: Pipeline) -> None:
    async def caught_up() -> bool:
        if await pool.fetchval("SELECT count(*) FROM index_outbox"):
            return False
        async with http.get(pipeline.procs.ops_url("indexer") + "/metrics") as r:
            return "memwright_indexer_consumer_lag 0.0" in await r.text()

    await eventually(caught_up, timeout=60, what="the indexer to catch up")


async def _with_indexer_stopped(
    pipeline: Pipeline, *commands: tuple[str, ...]
) -> list[subprocess.CompletedProcess[str]]:
    """The embedded store is single-process: stop the indexer (it drains first), run, start it again."""
    pipeline.procs.stop("indexer")
    try:
        return [await asyncio.to_thread(index_command, pipeline, *c) for c in commands]
    finally:
        pipeline.procs.start("indexer")
        await pipeline.procs.wait_ready("indexer")


async def test_index_check_finds_no_drift_after_the_pipeline_ran_and_rebuild_keeps_it_so(
    pipeline: Pipeline, http: aiohttp.ClientSession, e2e_pool: asyncpg.Pool
) -> None:
    await _remembered(http, pipeline, new_user(), "Always answer in metric units")
    await _remembered(http, pipeline, new_user(), "Never use emoji in replies.")
    await _indexed(e2e_pool, http, pipeline)

    check, rebuild, again = await _with_indexer_stopped(pipeline, ("check",), ("rebuild",), ("check", "--settle", "0"))
    memories = await e2e_pool.fetchval("SELECT count(*) FROM memories")
    assert check.returncode == 0, check.stdout + check.stderr
    assert f"{memories:,} memories in PostgreSQL, {memories:,} points in Qdrant" in check.stdout
    assert "in sync: 0 missing, 0 stale, 0 orphaned" in check.stdout
    assert rebuild.returncode == 0 and f"rebuilt {memories:,} memories" in rebuild.stdout, rebuild.stdout
    assert again.returncode == 0, again.stdout + again.stderr

    # the restarted indexer writes into the rebuilt collection through the alias
    await _remembered(http, pipeline, new_user(), "From now on, reply in French.")
    await _indexed(e2e_pool, http, pipeline)
    [after] = await _with_indexer_stopped(pipeline, ("check", "--settle", "0"))
    assert after.returncode == 0, after.stdout + after.stderr
    now = await e2e_pool.fetchval("SELECT count(*) FROM memories")
    assert now > memories and f"{now:,} points in Qdrant" in after.stdout, after.stdout
