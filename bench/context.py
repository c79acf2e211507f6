"""The start-of-turn read: GET /v1/users/{id}/context (every working agent, every turn) on ONE api
process, each figure beside the raw SELECT of the same previews straight through asyncpg from the
bench process (a pool as large as the api's), with the same users at the same loads, in this run.

Users have 40 memories each (half agent-, half user-written, some longer than a preview). Figures:
- open loop at fixed offered loads: the full answer (200, the cached block), and conditional reads
  that are answered 304 (If-None-Match with the current ETag), against the raw SELECT;
- closed-loop ceilings of the raw SELECT, the 200s, the 304s, and, on a second api process with
  the cache off (MEMWRIGHT_CONTEXT_CACHE_USERS=0), the 200s that read and render every preview;
- how the api answered (memwright_api_context_reads_total on its ops port: not_modified, hit,
  miss), so a figure for 304s or cached reads is known to be one;
- the api process's CPU time per answer (/proc/<pid>/stat), which a busy machine disturbs far
  less than it disturbs rates and latencies;
- by memory count: users with 0, 10 and 40 memories at one fixed load, 200s and 304s, each beside
  the raw SELECT for the same users at the same load.

Only the api runs in this phase; it needs no Kafka.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import aiohttp
import asyncpg
import yarl
from memwright.settings import PostgresSettings

from bench.harness import BenchStack
from bench.loadgen import LoadResult, closed_loop, open_loop
from bench.probes import cpu_seconds, rss_bytes

# the SELECT the api ran on every context read before the cache (memories.list_previews)
RAW_SELECT = """SELECT memory_id, author, kind, text, version, updated_at FROM memories
WHERE user_id = $1 ORDER BY created_at, memory_id"""

PHRASES = (
    "prefers answers in metric units",
    "is allergic to peanuts and asks that recipes avoid them",
    "works in Python and Go, mostly on backend services, and likes type hints everywhere",
    "wants short answers with bullet points unless they ask for detail",
    "lives in Lyon and travels to Berlin every month for work, usually by night train",
    "has a cat called Miso",
    "is learning Japanese (JLPT N3) and likes example sentences with furigana when kanji are new to them",
    "never wants emoji in answers",
)

SEED = """
INSERT INTO memories (memory_id, user_id, author, kind, text, created_at)
SELECT gen_random_uuid(), $1, CASE WHEN i % 2 = 0 THEN 'agent' ELSE 'user' END, 'preference',
       'The user ' || ($2::text[])[1 + i % array_length($2::text[], 1)] || ' (note ' || i || ')',
       now() - make_interval(secs => 1000 - i)
FROM generate_series(1, $3) AS i
"""


@dataclass(frozen=True)
class ContextConfig:
    users: int = 50
    memories: int = 40
    rates_200: tuple[float, ...] = (1000.0,)
    rates_304: tuple[float, ...] = (1000.0, 2000.0)
    duration_s: float = 8.0
    warmup_s: float = 2.0
    ceiling_s: float = 6.0
    ceiling_concurrency: int = 32
    memory_counts: tuple[int, ...] = (0, 10, 40)
    by_memories_rate: float = 500.0


def _users(users: int, memories: int = 40) -> list[str]:
    """The bench's users with `memories` memories each (the 40-memory ones keep their old names)."""
    return [f"ctx{i}" if memories == 40 else f"ctx{memories}m{i}" for i in range(users)]


def _api_sender(
    http: aiohttp.ClientSession,
    url: str,
    stack: BenchStack,
    users: list[str],
    etags: dict[str, str] | None,
    expect: int,
) -> Callable[[int], Awaitable[int]]:
    auth = stack.auth()
    headers = {u: {**auth, **({"If-None-Match": etags[u]} if etags else {})} for u in users}
    urls = {u: yarl.URL(f"{url}/v1/users/{u}/context", encoded=True) for u in users}  # parsed once

    async def send(i: int) -> int:
        user = users[i % len(users)]
        async with http.get(urls[user], headers=headers[user]) as r:
            await r.read()
            return 1 if r.status == expect else 0

    return send


def _raw_sender(pool: asyncpg.Pool, users: list[str], memories: int = 40) -> Callable[[int], Awaitable[int]]:
    async def send(i: int) -> int:
        rows = await pool.fetch(RAW_SELECT, users[i % len(users)])
        return 1 if len(rows) == memories else 0

    return send


async def _etags(
    http: aiohttp.ClientSession, url: str, stack: BenchStack, users: list[str], memories: int
) -> dict[str, str]:
    etags: dict[str, str] = {}
    for user in users:
        async with http.get(f"{url}/v1/users/{user}/context", headers=stack.auth()) as r:
            body = await r.json()
            assert r.status == 200 and body["memory_count"] == memories, (r.status, body)
            etags[user] = r.headers["ETag"]
    return etags


async def _by_memories(
    http: aiohttp.ClientSession, url: str, pid: int, stack: BenchStack, raw_pool: asyncpg.Pool, cfg: ContextConfig,
    say: Callable[[str], None],
) -> list[dict[str, Any]]:  # fmt: skip
    """200s and 304s at one fixed load for users of 0, 10 and 40 memories, each beside the raw SELECT
    (and the api's CPU per answer, which a busy machine disturbs far less than latencies)."""
    rate = cfg.by_memories_rate
    say(f"context: by memory count, {cfg.users} users each, {rate:g} req/s")
    out = []
    for memories in cfg.memory_counts:
        users = _users(cfg.users, memories)
        etags = await _etags(http, url, stack, users, memories)
        raw = _raw_sender(raw_pool, users, memories)
        base = await open_loop(raw, rate, cfg.duration_s)
        row: dict[str, Any] = {"memories": memories, "raw": base.summary()}
        for mode, tags, expect in (("200", None, 200), ("304", etags, 304)):
            cpu = cpu_seconds(pid)
            got = await open_loop(_api_sender(http, url, stack, users, tags, expect), rate, cfg.duration_s)
            cpu_ms = _per_answer(cpu_seconds(pid) - cpu, got)
            row[mode] = {**got.summary(), "api_cpu_ms": cpu_ms}
            say(_line(f"{memories} memories, {mode}s", got, base) + f"   [api CPU {cpu_ms} ms each]")
        out.append(row)
    return out


def _line(label: str, api: LoadResult, raw: LoadResult) -> str:
    a, r = api.summary(), raw.summary()
    return (
        f"  {label:<24} api p50 {a['p50_ms']} ms  p99 {a['p99_ms']} ms  {a['achieved_rps']}/s "
        f"({a['refused'] + a['errors'] + a['timeouts']} failed)   |  raw SELECT p50 {r['p50_ms']} ms  "
        f"p99 {r['p99_ms']} ms  {r['achieved_rps']}/s"
    )


async def _reads(http: aiohttp.ClientSession, ops_url: str) -> dict[str, float]:
    """memwright_api_context_reads_total by result, from the api's ops port."""
    async with http.get(ops_url + "/metrics") as r:
        text = await r.text()
    out = {}
    for result in ("not_modified", "hit", "miss"):
        prefix = f'memwright_api_context_reads_total{{result="{result}"}} '
        line = next((x for x in text.splitlines() if x.startswith(prefix)), None)
        out[result] = float(line.removeprefix(prefix)) if line else float("nan")
    return out


def _delta(before: dict[str, float], after: dict[str, float]) -> dict[str, int]:
    return {k: int(after[k] - before[k]) for k in after}


async def run(stack: BenchStack, cfg: ContextConfig, say: Callable[[str], None]) -> dict[str, Any]:
    pool_max = PostgresSettings.pg_pool_max  # the api's pool size; the raw baseline gets the same
    seed = await asyncpg.connect(stack.dsn)
    try:
        for user in _users(cfg.users):
            await seed.execute(SEED, user, list(PHRASES), cfg.memories)
        for memories in set(cfg.memory_counts) - {cfg.memories, 0}:
            for user in _users(cfg.users, memories):
                await seed.execute(SEED, user, list(PHRASES), memories)
    finally:
        await seed.close()
    procs = stack.services(None, "context")
    procs.start("api")
    uncached = stack.services(None, "context-nocache", MEMWRIGHT_CONTEXT_CACHE_USERS="0")
    uncached.start("api")
    try:
        await procs.wait_ready("api", timeout=90)
        await uncached.wait_ready("api", timeout=90)
        url, ops = procs.url("api"), procs.ops_url("api")
        pid = procs.procs["api"].pid
        connector = aiohttp.TCPConnector(limit=512)
        raw_pool = await asyncpg.create_pool(stack.dsn, min_size=pool_max, max_size=pool_max)
        assert raw_pool is not None
        async with aiohttp.ClientSession(connector=connector, timeout=aiohttp.ClientTimeout(total=30)) as http:
            etags: dict[str, str] = {}
            for user in _users(cfg.users):
                async with http.get(f"{url}/v1/users/{user}/context", headers=stack.auth()) as r:
                    body = await r.json()
                    assert r.status == 200 and body["memory_count"] == cfg.memories, (r.status, body)
                    etags[user] = r.headers["ETag"]
            block_chars = len(body["block"])
            say(
                f"context: {cfg.users} users x {cfg.memories} memories (block {block_chars:,} chars, "
                f"~{body['token_estimate']} tokens); one api process vs the raw SELECT through asyncpg "
                f"(pool of {pool_max} in the bench process), open loop"
            )
            users = _users(cfg.users)
            full = _api_sender(http, url, stack, users, None, 200)
            conditional = _api_sender(http, url, stack, users, etags, 304)
            raw = _raw_sender(raw_pool, users)
            # Warm-up, not counted, at each path's highest measured rate: the client's connection pool
            # grows to what that rate needs (new TCP connections to the api slowed the first seconds of
            # the first point by hundreds of ms), and the statement caches fill.
            top = max((*cfg.rates_200, *cfg.rates_304))
            for warm, rate in ((raw, top), (full, max(cfg.rates_200)), (conditional, max(cfg.rates_304))):
                await open_loop(warm, rate, cfg.warmup_s)
            points: list[dict[str, Any]] = []
            rss_load = 0
            for mode, send, rates in (("200", full, cfg.rates_200), ("304", conditional, cfg.rates_304)):
                for rate in rates:
                    base = await open_loop(raw, rate, cfg.duration_s)
                    before, cpu = await _reads(http, ops), cpu_seconds(pid)
                    got = await open_loop(send, rate, cfg.duration_s)
                    cpu_ms = _per_answer(cpu_seconds(pid) - cpu, got)
                    answered = _delta(before, await _reads(http, ops))
                    rss_load = max(rss_load, rss_bytes(pid))
                    say(_line(f"{mode}s @{rate:g} req/s", got, base) + f"   [api CPU {cpu_ms} ms each, {answered}]")
                    points.append(
                        {
                            "mode": mode,
                            "api": got.summary(),
                            "raw": base.summary(),
                            "answered": answered,
                            "api_cpu_ms": cpu_ms,
                        }
                    )
            by_memories = await _by_memories(http, url, pid, stack, raw_pool, cfg, say)
            say(f"context: ceilings, closed loop with {cfg.ceiling_concurrency} concurrent clients")
            ceilings: dict[str, Any] = {}
            raw_ceiling = await closed_loop(raw, cfg.ceiling_concurrency, cfg.ceiling_s)
            ceilings["raw_select"] = {"rps": round(raw_ceiling.achieved_rps, 1), **_p(raw_ceiling)}
            nocache = _api_sender(http, uncached.url("api"), stack, users, None, 200)
            nocache_pid = uncached.procs["api"].pid
            for name, send, api_pid in (
                ("200", full, pid),
                ("304", conditional, pid),
                ("200_cache_off", nocache, nocache_pid),
            ):
                before, cpu = await _reads(http, ops), cpu_seconds(api_pid)
                got = await closed_loop(send, cfg.ceiling_concurrency, cfg.ceiling_s)
                cpu_ms = _per_answer(cpu_seconds(api_pid) - cpu, got)
                answered = _delta(before, await _reads(http, ops))
                ratio = got.achieved_rps / raw_ceiling.achieved_rps if raw_ceiling.achieved_rps else 0.0
                ceilings[name] = {
                    "rps": round(got.achieved_rps, 1),
                    **_p(got),
                    "ratio": round(ratio, 3),
                    "api_cpu_ms": cpu_ms,
                }
                if name != "200_cache_off":
                    ceilings[name]["answered"] = answered
                note = f"api CPU {cpu_ms} ms each, " + (
                    f"answered {answered}" if name != "200_cache_off" else "a second api, cache off"
                )
                say(
                    f"  {name + 's':<24} api {got.achieved_rps:,.0f} req/s (p99 {_p(got)['p99_ms']} ms)  vs  "
                    f"raw SELECT {raw_ceiling.achieved_rps:,.0f} req/s -> ratio {ratio:.2f}   [{note}]"
                )
        await raw_pool.close()
        return {
            "users": cfg.users,
            "memories_per_user": cfg.memories,
            "block_chars": block_chars,
            "points": points,
            "by_memories": by_memories,
            "ceilings": ceilings,
            "context_vs_raw_ratio": ceilings["200"]["ratio"],
            "rss_load_mb": round(rss_load / 2**20, 1),
        }
    finally:
        procs.stop()
        uncached.stop()


def _per_answer(cpu_s: float, result: LoadResult) -> float | None:
    return round(1000 * cpu_s / result.ok, 3) if result.ok else None


def _p(result: LoadResult) -> dict[str, Any]:
    s = result.summary()
    return {"p50_ms": s["p50_ms"], "p99_ms": s["p99_ms"]}
