"""Curator and indexer throughput.

Curator: with the curator stopped, N users each post one explicit preference; once the sweeper
has put all N in the backlog, one curator process (one worker, MEMWRIGHT_CONCURRENCY runs at
once) is started and users/s is read from curation_runs (first start to last finish), so its
start-up is not counted. Then the same with the llm policy against a local OpenAI-compatible
endpoint that answers after `llm_delay_s`, at concurrency 4, 16 and 64 with the default pool (4),
and at 64 with a pool of 16: users/s against the ideal, concurrency / (delay x calls per run), and
the PostgreSQL connections the curator held meanwhile (pg_stat_activity by application_name,
sampled every 0.1 s: its pool and its liveness connection; a run holds none while its model thinks).

Indexer: the indexer is stopped while the rules curator writes those N memories, so their
outbox rows wait; it is then started and `memwright_indexer_events_applied_total` (its ops
port) is watched until all are applied: outbox -> changelog -> Qdrant, events/s. Baseline:
single-point upserts/s into an embedded Qdrant Edge store from this process. Then `memwright index
rebuild` with the indexer stopped (the embedded store is single-process): memories/s.
"""

from __future__ import annotations

import asyncio
import importlib.util
import re
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.harness import POSITIVE_TEXTS, post_signals, signal
from bench.pipeline import Pipeline
from bench.probes import scrape, wait_for

ROOT = Path(__file__).resolve().parents[1]
FAKE_LLM_SERVER = ROOT / "tests" / "fakes" / "llm_server.py"
APPLIED = "memwright_indexer_events_applied_total"
REBUILT = re.compile(r"rebuilt ([\d,]+) memories in ([\d.]+)s")

RUN_SPAN = """
SELECT count(DISTINCT user_id) AS users, count(*) AS runs,
       extract(epoch FROM max(finished_at) - min(started_at))::float8 AS span,
       percentile_cont(0.5) WITHIN GROUP (ORDER BY extract(epoch FROM finished_at - started_at)) AS run_p50
FROM curation_runs WHERE user_id = ANY($1::text[]) AND status = 'committed'
"""


@dataclass(frozen=True)
class CuratorConfig:
    users: int = 300
    llm_users: int = 40
    llm_delay_s: float = 1.0
    concurrency: int = 4
    llm_concurrency: tuple[int, ...] = (4, 16, 64)  # the llm policy's users/s and connections at each
    llm_wide_pool: int = 16  # and once more at the highest concurrency with this MEMWRIGHT_PG_POOL_MAX
    index_events: int = 2000  # user-written memories added to the indexer's backlog


async def _post_users(pipe: Pipeline, users: list[str]) -> int:
    accepted = 0
    for start in range(0, len(users), 50):
        body = {"signals": [signal(u, POSITIVE_TEXTS[i % 4]) for i, u in enumerate(users[start : start + 50])]}
        accepted += await post_signals(pipe.http, pipe.ingest, pipe.stack, body)
    return accepted


async def _swept(pipe: Pipeline, users: list[str], timeout_s: float) -> bool:
    async def all_waiting() -> bool:
        n = await pipe.pool.fetchval("SELECT count(*) FROM backlog WHERE user_id = ANY($1::text[])", users)
        return n == len(users)

    return bool(await wait_for(all_waiting, timeout_s, 0.25))


# the curator's connections (its pool, its liveness connection) and its runs in progress
HELD = """
SELECT (SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()
            AND application_name LIKE 'memwright-curator %') AS pool,
       (SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()
            AND application_name LIKE 'memwright-curator-liveness %') AS liveness,
       (SELECT count(*) FROM curation_runs WHERE status = 'running' AND user_id = ANY($1::text[])) AS runs
"""


async def _held(pipe: Pipeline, users: list[str], stop: asyncio.Event) -> dict[str, int]:
    """Peak connections held by the curator and runs in progress, sampled until `stop`."""
    peak = {"pool": 0, "liveness": 0, "runs": 0}
    while not stop.is_set():
        row = await pipe.pool.fetchrow(HELD, users)
        peak = {k: max(v, int(row[k])) for k, v in peak.items()}
        await asyncio.sleep(0.1)
    return peak


async def _curate(pipe: Pipeline, users: list[str], concurrency: int, **env: str) -> dict[str, Any]:
    """Queue one preference per user with the curator stopped, then time one curator through them."""
    pipe.procs.stop("curator")
    posted = await _post_users(pipe, users)
    swept = await _swept(pipe, users, timeout_s=60 + len(users) / 20)
    stop = asyncio.Event()
    sampler = asyncio.create_task(_held(pipe, users, stop))
    pipe.procs.start("curator", extra_env={"MEMWRIGHT_CONCURRENCY": str(concurrency), **env})
    try:
        await pipe.procs.wait_ready("curator", timeout=120)
        done = await pipe.drained(users, timeout_s=60 + len(users) * 2, outbox=False)
    finally:
        stop.set()
        held = await sampler
    row = await pipe.pool.fetchrow(RUN_SPAN, users)
    span = float(row["span"] or 0)
    return {
        "connections_peak": held["pool"] + held["liveness"],
        "pool_connections_peak": held["pool"],
        "liveness_connections_peak": held["liveness"],
        "runs_at_once_peak": held["runs"],
        "users": len(users),
        "posted": posted,
        "swept": swept,
        "curated": int(row["users"]),
        "runs": int(row["runs"]),
        "concurrency": concurrency,
        "users_per_s": round(int(row["users"]) / span, 2) if span else None,
        "run_p50_s": round(float(row["run_p50"]), 3) if row["run_p50"] is not None else None,
        "finished": done,
    }


async def _raw_qdrant_upserts(count: int, dim: int = 256) -> float:
    """Single-point upserts/s into a fresh embedded Qdrant Edge store: the floor cost of applying one event."""
    import random

    from memwright.index.backend import Point
    from memwright.index.edge import EdgeBackend

    with tempfile.TemporaryDirectory() as path:
        backend = EdgeBackend.open(path)
        try:
            await backend.create_collection("b", dim)
            rng = random.Random(1)
            vectors = [[rng.random() for _ in range(dim)] for _ in range(64)]
            started = time.monotonic()
            for i in range(count):
                await backend.upsert("b", [Point(str(uuid.uuid4()), {"user_id": f"u{i}"}, vectors[i % 64])])
            return count / (time.monotonic() - started)
        finally:
            await backend.close()


async def _user_memories(pipe: Pipeline, count: int) -> int:
    """User-written memories through the api (each one an outbox row): bulk work for the indexer."""
    users = [f"idx-{pipe.stack.run_id}-{i}" for i in range(max(1, count // 50))]
    slots = asyncio.Semaphore(16)

    async def one(i: int) -> int:
        async with (
            slots,
            pipe.http.post(
                f"{pipe.api}/v1/users/{users[i % len(users)]}/memories",
                json={"text": f"Remember note number {i} about my setup"},
                headers=pipe.stack.auth(),
            ) as r,
        ):
            await r.read()
            return int(r.status == 201)

    return sum(await asyncio.gather(*(one(i) for i in range(count))))


async def _indexer(pipe: Pipeline, cfg: CuratorConfig, say: Callable[[str], None]) -> dict[str, Any]:
    """The indexer was stopped while memories were written; start it and time the outbox through."""
    created = await _user_memories(pipe, cfg.index_events)
    depth = int(await pipe.pool.fetchval("SELECT count(*) FROM index_outbox"))
    pipe.procs.start("indexer")
    metrics_url = pipe.procs.ops_url("indexer") + "/metrics"
    samples: list[tuple[float, float]] = []  # (time, events applied so far), from the ops port's first answer
    deadline = time.monotonic() + 120 + depth / 10
    while time.monotonic() < deadline:
        value = await scrape(pipe.http, metrics_url, APPLIED)
        if value == value:  # not nan: the ops port answers
            samples.append((time.monotonic(), value))
            if value >= depth:
                break
        await asyncio.sleep(0.05)
    await pipe.procs.wait_ready("indexer", timeout=60)
    rate = None
    if samples and samples[-1][1] >= depth:
        idle = [s for s in samples if s[1] == 0]
        t0, v0 = idle[-1] if idle else samples[0]  # the last moment before it began applying
        t1 = next(t for t, v in samples if v >= depth)
        rate = (depth - v0) / (t1 - t0) if t1 > t0 else None
    baseline = await _raw_qdrant_upserts(min(2000, max(200, depth)))
    say(
        f"  indexer: {depth} outbox rows ({created} user-written memories through the api, the rest from the curator) "
        f"relayed and applied at {rate or 0:.0f} events/s  |  baseline: {baseline:.0f} single-point upserts/s "
        "into an embedded Qdrant Edge store from the bench process"
    )
    return {
        "events": depth,
        "events_per_s": round(rate, 1) if rate else None,
        "raw_qdrant_upserts_per_s": round(baseline, 1),
    }


async def _rebuild(pipe: Pipeline, say: Callable[[str], None]) -> dict[str, Any]:
    memories = int(await pipe.pool.fetchval("SELECT count(*) FROM memories"))
    pipe.procs.stop("indexer")  # the embedded store is single-process
    env = {**pipe.procs.env, "MEMWRIGHT_OPS_PORT": str(pipe.procs.ops_port("indexer"))}
    started = time.monotonic()
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "memwright",
        "index",
        "rebuild",
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )
    out, _ = await asyncio.wait_for(proc.communicate(), 600)
    took = time.monotonic() - started
    pipe.procs.start("indexer")
    await pipe.procs.wait_ready("indexer", timeout=120)
    text = out.decode(errors="replace").strip()
    if proc.returncode != 0:
        reason = text.splitlines()[-1] if text else f"exit code {proc.returncode}"
        say(f"  index rebuild: MISSING ({reason})")
        return {"memories": memories, "memories_per_s": None, "missing": reason}
    figure: dict[str, Any] = {
        "memories": memories,
        "command_seconds": round(took, 2),
        "command_memories_per_s": round(memories / took, 1),
    }
    own = REBUILT.search(text)  # the command reports its fill time: memories / that is the rebuild rate
    if own:
        done, seconds = int(own.group(1).replace(",", "")), float(own.group(2))
        figure.update(memories=done, seconds=seconds, memories_per_s=round(done / seconds, 1) if seconds else None)
    else:
        figure.update(seconds=figure["command_seconds"], memories_per_s=figure["command_memories_per_s"])
    say(
        f"  index rebuild: {figure['memories']} memories in {figure['seconds']}s = {figure['memories_per_s']} "
        f"memories/s  |  the whole command, start-up included: {took:.1f}s = {memories / took:.0f} memories/s"
    )
    return figure


def llm_policy_available() -> str | None:
    """None when the llm policy and the scripted fake server exist; otherwise why not."""
    if importlib.util.find_spec("memwright.agent.llm") is None:
        return "libs/memwright/agent/llm.py (the llm policy) has not landed"
    if not FAKE_LLM_SERVER.exists():
        return "tests/fakes/llm_server.py (the scripted fake endpoint) has not landed"
    return None


async def _llm(pipe: Pipeline, cfg: CuratorConfig, say: Callable[[str], None]) -> list[dict[str, Any]]:
    missing = llm_policy_available()
    if missing:
        say(f"  curator, llm policy: MISSING ({missing})")
        return [{"missing": missing}]
    from bench.llmfake import fake_llm_server  # only once the project's fake exists

    figures = []
    async with fake_llm_server(cfg.llm_delay_s) as fake:
        # the default pool (4) at each concurrency; then a wider pool at the highest: what it buys
        points = [(c, None) for c in cfg.llm_concurrency] + [(max(cfg.llm_concurrency), cfg.llm_wide_pool)]
        for concurrency, pool_max in points:
            # at least three waves of runs, so the span is not all ramp-up and drain
            users = [
                f"llm{concurrency}p{pool_max or ''}-{pipe.stack.run_id}-{i}"
                for i in range(max(cfg.llm_users, 3 * concurrency))
            ]
            calls_before = fake.requests()
            figure = await _curate(
                pipe,
                users,
                concurrency,
                MEMWRIGHT_POLICY="llm",
                MEMWRIGHT_LLM_BASE_URL=fake.base_url,
                MEMWRIGHT_LLM_API_KEY="bench",
                **({"MEMWRIGHT_PG_POOL_MAX": str(pool_max)} if pool_max else {}),
            )
            figure["pool_max"] = pool_max or 4
            calls = fake.requests() - calls_before
            per_run = calls / figure["runs"] if figure["runs"] else float("nan")
            ideal = concurrency / (cfg.llm_delay_s * per_run) if per_run == per_run and per_run else None
            figure.update(
                {
                    "llm_delay_s": cfg.llm_delay_s,
                    "llm_calls": calls,
                    "llm_calls_per_run": round(per_run, 2),
                    "ideal_users_per_s": round(ideal, 2) if ideal else None,
                    "of_ideal": round(figure["users_per_s"] / ideal, 2) if ideal and figure["users_per_s"] else None,
                }
            )
            say(
                f"  curator, llm policy ({cfg.llm_delay_s:g}s per answer, {per_run:.1f} calls per run), concurrency "
                f"{concurrency:>2}, pool max {figure['pool_max']:>2}: {figure['users_per_s']} users/s "
                f"({figure['curated']}/{len(users)} users, peak "
                f"{figure['runs_at_once_peak']} runs at once) on {figure['connections_peak']} PostgreSQL connections "
                f"held (pool {figure['pool_connections_peak']} + liveness {figure['liveness_connections_peak']})"
                f"  |  ideal: {ideal or 0:.2f} users/s (concurrency / (delay x calls per run)) = "
                f"{figure['of_ideal'] or 0:.0%} of it; one run at a time would do "
                f"{1 / (cfg.llm_delay_s * per_run) if per_run else 0:.2f}"
            )
            figures.append(figure)
    await pipe.restart("curator")
    return figures


async def run(pipe: Pipeline, cfg: CuratorConfig, say: Callable[[str], None]) -> dict[str, Any]:
    say(f"curator and indexer throughput ({cfg.users} users, one preference each)")
    await pipe.drained(timeout_s=60)
    pipe.procs.stop("indexer")
    users = [f"cur-{pipe.stack.run_id}-{i}" for i in range(cfg.users)]
    rules = await _curate(pipe, users, cfg.concurrency)
    say(
        f"  curator, rules policy: {rules['users_per_s']} users/s per worker ({cfg.concurrency} runs at once, "
        f"run p50 {rules['run_p50_s']}s, {rules['curated']}/{cfg.users} users curated, "
        f"{rules['connections_peak']} PostgreSQL connections held)"
    )
    indexer = await _indexer(pipe, cfg, say)
    rebuild = await _rebuild(pipe, say)
    llm = await _llm(pipe, cfg, say)
    first = next((f for f in llm if f.get("concurrency") == cfg.concurrency), llm[0])  # the default pool
    return {
        "curator_rules": rules,
        "curator_llm": first,  # at the curator's default concurrency, as before
        "curator_llm_by_concurrency": llm,
        "indexer": indexer,
        "index_rebuild": rebuild,
    }
