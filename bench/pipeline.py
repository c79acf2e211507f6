"""The five services together: signal-to-memory latency (1 s and long window), fairness under
skew, and every service's resident memory idle and under an ingest load.

Latency is measured from the client's side: from the ingest's 202 to the first api answer that
lists the user's memory. Fairness waits are read from PostgreSQL: a message's wait ends when the
first committed curation run whose watermark covers it finished (curation_runs.finished_at,
messages.accepted_at and messages.seq), so nothing is inferred from logs.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Callable
from dataclasses import dataclass
from types import TracebackType
from typing import Any

import aiohttp
import asyncpg
from memwright.localrun import SERVICES, ServiceProcesses

from bench.harness import CHATTER, POSITIVE_TEXTS, BenchStack, memory_count, post_signals, signal
from bench.loadgen import open_loop, percentile
from bench.probes import Watch, connections_to, rss_bytes, wait_for


@dataclass(frozen=True)
class PipelineConfig:
    latency_samples: int = 30
    fairness_window_s: float = 2.0
    fairness_seconds: float = 12.0
    light_users: int = 100
    light_rate: float = 0.25  # signals/s per light user; the heavy user sends HEAVY_FACTOR times that
    load_rps: float = 500.0
    load_seconds: float = 8.0
    long_window_s: float = 60.0


HEAVY_FACTOR = 100

WAITS = """
SELECT m.user_id,
       extract(epoch FROM (SELECT min(r.finished_at) FROM curation_runs r
                           WHERE r.user_id = m.user_id AND r.status = 'committed' AND r.watermark_to >= m.seq)
                          - m.accepted_at) AS wait
FROM messages m WHERE m.user_id = ANY($1::text[])
"""


def _ms(x: float) -> float | None:
    return None if x != x else round(x * 1000, 1)


def _s(x: float) -> float | None:
    return None if x != x else round(x, 2)


class Pipeline:
    def __init__(self, stack: BenchStack, say: Callable[[str], None]) -> None:
        self.stack = stack
        self.say = say
        self.procs: ServiceProcesses
        self.rss_idle: dict[str, int] = {}
        self.rss_load: dict[str, int] = {}
        self.window_s = 1.0
        self.http: aiohttp.ClientSession
        self.pool: asyncpg.Pool

    async def __aenter__(self) -> Pipeline:
        topics = await self.stack.topics("p")
        self.procs = self.stack.services(topics, "pipeline")
        self.procs.start()
        self.http = aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(limit=512), timeout=aiohttp.ClientTimeout(total=30)
        )
        self.pool = await asyncpg.create_pool(self.stack.dsn, min_size=1, max_size=4)
        await self.procs.wait_ready(timeout=120)
        await asyncio.sleep(3)  # let start-up allocations settle before calling it idle
        self.rss_idle = {name: rss_bytes(self.procs.procs[name].pid) for name in SERVICES}
        self.say(
            "pipeline: five services up (window 1 s); idle RSS "
            + ", ".join(f"{k} {v / 2**20:.0f} MB" for k, v in self.rss_idle.items())
        )
        return self

    async def __aexit__(
        self, et: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.http.close()
        await self.pool.close()
        codes = self.procs.stop()
        unclean = {k: v for k, v in codes.items() if v != 0}
        if unclean:
            self.say(f"  (services exited uncleanly: {unclean}; logs in {self.procs.log_dir})")

    # ---- helpers ---------------------------------------------------------------------------

    @property
    def ingest(self) -> str:
        return self.procs.url("ingest")

    @property
    def api(self) -> str:
        return self.procs.url("api")

    async def restart(self, name: str, **env: str) -> None:
        self.procs.stop(name)
        self.procs.start(name, extra_env=env or None)
        await self.procs.wait_ready(name, timeout=120)

    async def set_window(self, seconds: float) -> None:
        if seconds != self.window_s:
            await self.restart("sweeper", MEMWRIGHT_WINDOW_SECONDS=f"{seconds:g}")
            self.window_s = seconds

    async def drained(self, users: list[str] | None = None, timeout_s: float = 120.0, outbox: bool = True) -> bool:
        """Wait until nothing waits for curation (for these users) and, with `outbox`, nothing waits
        to be indexed."""

        async def empty() -> bool:
            if users is None:
                row = await self.pool.fetchrow(
                    "SELECT (SELECT count(*) FROM backlog) AS b, (SELECT count(*) FROM index_outbox) AS o"
                )
            else:
                row = await self.pool.fetchrow(
                    "SELECT (SELECT count(*) FROM backlog WHERE user_id = ANY($1::text[])) AS b, "
                    "(SELECT count(*) FROM index_outbox) AS o",
                    users,
                )
            return bool(row and row["b"] == 0 and (row["o"] == 0 or not outbox))

        return bool(await wait_for(empty, timeout_s, 0.25))

    # ---- signal to memory ------------------------------------------------------------------

    async def signal_to_memory(self, samples: int, spread_s: float, tag: str) -> list[float]:
        """One explicit preference per new user at stratified random times over `spread_s`; return
        the seconds from each 202 to the memory being listed by the api."""
        rng = random.Random(7)
        poll_s = max(0.1, self.window_s / 100)
        timeout_s = self.window_s * 2 + 60

        async def one(i: int) -> float | None:
            await asyncio.sleep((i + rng.random()) * spread_s / samples)
            user = f"{tag}-{self.stack.run_id}-{i}"
            if not await post_signals(self.http, self.ingest, self.stack, signal(user, POSITIVE_TEXTS[i % 4])):
                return None
            acked = time.monotonic()
            while time.monotonic() - acked < timeout_s:
                if await memory_count(self.http, self.api, self.stack, user):
                    return time.monotonic() - acked
                await asyncio.sleep(poll_s)
            return None

        results = await asyncio.gather(*(one(i) for i in range(samples)))
        return [r for r in results if r is not None]

    def _latency_figure(self, window: float, latencies: list[float], samples: int) -> dict[str, Any]:
        p50, p95 = percentile(latencies, 50), percentile(latencies, 95)
        self.say(
            f"  window {window:g}s: signal->memory p50 {p50:.2f}s  p95 {p95:.2f}s  "
            f"max {max(latencies, default=0):.2f}s "
            f"({len(latencies)}/{samples} became memories)  |  baseline: target p95 <= window + 5 s = {window + 5:g}s; "
            f"the window alone waits {window / 2:g}s on average"
        )
        return {
            "window_s": window,
            "p50_s": _s(p50),
            "p95_s": _s(p95),
            "max_s": _s(max(latencies, default=float("nan"))),
            "samples": samples,
            "became_memories": len(latencies),
        }

    # ---- fairness --------------------------------------------------------------------------

    async def fairness(self, cfg: PipelineConfig) -> dict[str, Any]:
        heavy = f"heavy-{self.stack.run_id}"
        light = [f"light-{self.stack.run_id}-{i}" for i in range(cfg.light_users)]
        total_rate = cfg.light_rate * cfg.light_users + cfg.light_rate * HEAVY_FACTOR

        # one cycle: the heavy user HEAVY_FACTOR times, each light user once, evenly interleaved
        cycle = [
            u
            for _, u in sorted(
                [(j / HEAVY_FACTOR, heavy) for j in range(HEAVY_FACTOR)]
                + [((k + 0.5) / len(light), u) for k, u in enumerate(light)]
            )
        ]

        def who(i: int) -> str:
            return cycle[i % len(cycle)]

        async def send(i: int) -> int:
            body = signal(who(i), CHATTER[i % len(CHATTER)], conversation_id=f"c{i % 3}")
            return await post_signals(self.http, self.ingest, self.stack, body)

        load = await open_loop(send, total_rate, cfg.fairness_seconds)
        drained = await self.drained([heavy, *light], timeout_s=cfg.fairness_window_s * 10 + 60)
        rows = await self.pool.fetch(WAITS, [heavy, *light])
        heavy_waits = [float(r["wait"]) for r in rows if r["user_id"] == heavy and r["wait"] is not None]
        light_waits = [float(r["wait"]) for r in rows if r["user_id"] != heavy and r["wait"] is not None]
        uncurated = sum(1 for r in rows if r["wait"] is None)
        figure = {
            "window_s": self.window_s,
            "offered_signals_per_s": round(total_rate, 1),
            "heavy_rate": round(cfg.light_rate * HEAVY_FACTOR, 2),
            "light_rate": cfg.light_rate,
            "light_users": cfg.light_users,
            "signals": len(rows),
            "refused": load.refused + load.errors + load.timeouts,
            "uncurated": uncurated,
            "drained": drained,
            "light_p95_wait_s": _s(percentile(light_waits, 95)),
            "light_max_wait_s": _s(max(light_waits, default=float("nan"))),
            "heavy_p95_wait_s": _s(percentile(heavy_waits, 95)),
            "heavy_max_wait_s": _s(max(heavy_waits, default=float("nan"))),
        }
        self.say(
            f"  fairness ({cfg.light_users} light users at {cfg.light_rate:g}/s, one heavy user at "
            f"{cfg.light_rate * HEAVY_FACTOR:g}/s, window {self.window_s:g}s): light p95 {figure['light_p95_wait_s']}s "
            f"max {figure['light_max_wait_s']}s; heavy p95 {figure['heavy_p95_wait_s']}s "
            f"max {figure['heavy_max_wait_s']}s"
            f"  |  baseline: 2 windows = {2 * self.window_s:g}s"
            + (f"; {uncurated} signals never curated" if uncurated else "")
        )
        return figure

    # ---- footprint under load --------------------------------------------------------------

    async def load_footprint(self, cfg: PipelineConfig) -> dict[str, Any]:
        pids = {name: self.procs.procs[name].pid for name in SERVICES}
        users = 1000

        async def send(i: int) -> int:
            body = signal(f"load-{self.stack.run_id}-{i % users}", CHATTER[i % len(CHATTER)])
            return await post_signals(self.http, self.ingest, self.stack, body)

        async with Watch(rss=pids, interval_s=0.5) as watch:
            load = await open_loop(send, cfg.load_rps, cfg.load_seconds)
            # positive control for the socket probe: services that do use PostgreSQL are seen doing so
            pg = {name: connections_to(pid, self.stack.pg_port) for name, pid in pids.items()}
            drained = await self.drained(timeout_s=180)
        self.rss_load = watch.rss_peak
        s = load.summary()
        self.say(
            f"  under {cfg.load_rps:g} req/s for {cfg.load_seconds:g}s (all services busy): "
            f"ingest p50 {s['p50_ms']} ms "
            f"p99 {s['p99_ms']} ms; peak RSS "
            + ", ".join(f"{k} {v / 2**20:.0f} MB" for k, v in watch.rss_peak.items())
            + f"; PostgreSQL connections held: {pg}"
            + ("" if drained else " (pipeline did not drain in 180 s)")
        )
        return {"load": s, "pg_connections": pg, "drained": drained}

    def footprint(self, ingest_phase: dict[str, Any] | None) -> dict[str, Any]:
        out: dict[str, Any] = {
            name: {
                "idle_mb": round(self.rss_idle.get(name, 0) / 2**20, 1),
                "load_mb": round(self.rss_load.get(name, 0) / 2**20, 1) if self.rss_load else None,
            }
            for name in SERVICES
        }
        if ingest_phase:
            out["ingest_alone"] = {"idle_mb": ingest_phase["rss_idle_mb"], "load_mb": ingest_phase["rss_load_mb"]}
        return out

    # ---- the figures -----------------------------------------------------------------------

    async def short_window_figures(self, cfg: PipelineConfig) -> dict[str, Any]:
        self.say("signal to memory, rules policy, window 1 s")
        await self.set_window(1.0)
        lat = await self.signal_to_memory(cfg.latency_samples, 6.0, "lat1")
        short = self._latency_figure(1.0, lat, cfg.latency_samples)
        self.say(f"fairness under skew, window {cfg.fairness_window_s:g} s")
        await self.set_window(cfg.fairness_window_s)
        fair = await self.fairness(cfg)
        await self.set_window(1.0)
        self.say("footprint under an ingest load")
        load = await self.load_footprint(cfg)
        return {"signal_to_memory_1s": short, "fairness": fair, "pipeline_load": load}

    async def long_window_figures(self, cfg: PipelineConfig) -> dict[str, Any]:
        window = cfg.long_window_s
        self.say(f"signal to memory, rules policy, window {window:g} s (samples spread over one window)")
        await self.drained(timeout_s=60)
        await self.set_window(window)
        lat = await self.signal_to_memory(cfg.latency_samples, window, "latL")
        figure = self._latency_figure(window, lat, cfg.latency_samples)
        await self.set_window(1.0)
        return {f"signal_to_memory_{window:g}s": figure}
