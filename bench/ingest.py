"""Ingest: POST /v1/signals at fixed offered loads (open loop) against the raw producer
(memwright.producer.SignalProducer: aiokafka, acks=all, idempotent) with the same payloads
at the same loads, both in this run; then both ceilings (closed loop) and their ratio.
While ingest is loaded, count its database and LLM calls (see bench/probes.py).

Only ingest runs in this phase, on topics of its own that nobody consumes.
"""

from __future__ import annotations

import asyncio
import json
import os
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import aiohttp
from aiokafka import AIOKafkaProducer
from memwright.events import parse_signal
from memwright.producer import SignalProducer
from memwright.settings import IngestSettings

from bench.fakellm import CountingLlm
from bench.harness import CHATTER, BenchStack
from bench.loadgen import LoadResult, closed_loop, open_loop
from bench.probes import Watch, backends_on, client_sessions, rss_bytes

USERS = 1000


@dataclass(frozen=True)
class IngestConfig:
    single_rates: tuple[float, ...] = (500.0, 1000.0, 2000.0)
    batch_rates: tuple[float, ...] = (20.0, 80.0)  # requests/s of BATCH signals each
    batch: int = 50
    duration_s: float = 8.0
    warmup_s: float = 2.0
    ceiling_s: float = 6.0
    ceiling_concurrency: int = 32


def _payloads(tag: str, batch: int) -> Callable[[int], list[dict[str, Any]]]:
    def make(i: int) -> list[dict[str, Any]]:
        return [
            {
                "schema_version": 1,
                "user_id": f"u{(i * batch + j) % USERS}",
                "message_id": f"{tag}-{i}-{j}",
                "conversation_id": "c1",
                "text": CHATTER[(i + j) % len(CHATTER)],
            }
            for j in range(batch)
        ]

    return make


def _http_sender(http: aiohttp.ClientSession, url: str, stack: BenchStack, make, batch: int):  # type: ignore[no-untyped-def]
    headers = {**stack.auth(), "Content-Type": "application/json"}

    async def send(i: int) -> int:
        signals = make(i)
        body = json.dumps(signals[0] if batch == 1 else {"signals": signals})
        async with http.post(url, data=body, headers=headers) as r:
            await r.read()
            return len(signals) if r.status == 202 else 0

    return send


def _raw_sender(producer: SignalProducer, make) -> Callable[[int], Awaitable[int]]:  # type: ignore[no-untyped-def]
    async def send(i: int) -> int:
        return await asyncio.wait_for(producer.send_many(make(i)), 10)

    return send


def _kafka_sender(producer: AIOKafkaProducer, topic: str, make) -> Callable[[int], Awaitable[int]]:  # type: ignore[no-untyped-def]
    """Bare aiokafka (acks=all, idempotent) with records encoded beforehand: Kafka's own ceiling."""
    cache: dict[int, list[tuple[bytes, bytes]]] = {}

    def records(i: int) -> list[tuple[bytes, bytes]]:
        key = i % 64  # a small pool of pre-encoded payloads: no validation, no JSON, on this path
        if key not in cache:
            cache[key] = [(s.user_id.encode(), s.to_bytes()) for s in (parse_signal(x) for x in make(key))]
        return cache[key]

    async def send(i: int) -> int:
        batch = records(i)
        futures = [await producer.send(topic, key=k, value=v) for k, v in batch]
        await asyncio.wait_for(asyncio.gather(*futures), 10)
        return len(batch)

    return send


def _line(label: str, ingest: LoadResult, raw: LoadResult) -> str:
    i, r = ingest.summary(), raw.summary()
    return (
        f"  {label:<22} ingest p50 {i['p50_ms']} ms  p99 {i['p99_ms']} ms  {i['achieved_rps']}/s "
        f"({i['refused'] + i['errors'] + i['timeouts']} failed)   |  raw producer p50 {r['p50_ms']} ms  "
        f"p99 {r['p99_ms']} ms  {r['achieved_rps']}/s"
    )


async def run(stack: BenchStack, cfg: IngestConfig, say: Callable[[str], None]) -> dict[str, Any]:
    topics = await stack.topics("i")
    # the linger ingest runs with (its default, or the environment's): the baselines use the same
    linger_ms = int(os.environ.get("MEMWRIGHT_PRODUCER_LINGER_MS") or IngestSettings.producer_linger_ms)
    async with CountingLlm() as llm:
        procs = stack.services(
            topics,
            "ingest",
            MEMWRIGHT_LLM_BASE_URL=llm.base_url,  # ingest is TOLD where both are: it must not use them
            MEMWRIGHT_POLICY="llm",
            OPENAI_BASE_URL=llm.base_url,
            OPENAI_API_KEY="bench",
        )
        procs.start("ingest")
        try:
            await procs.wait_ready("ingest", timeout=90)
            pid = procs.procs["ingest"].pid
            await asyncio.sleep(2)
            idle_rss = rss_bytes(pid)
            url = procs.url("ingest") + "/v1/signals"
            sessions_before = await client_sessions(stack.admin_dsn, stack.database)
            llm_before = llm.requests
            watch = Watch(rss={"ingest": pid}, sockets={"postgres": (pid, stack.pg_port), "llm": (pid, llm.port)})
            backends_during = 0
            points: list[dict[str, Any]] = []
            connector = aiohttp.TCPConnector(limit=512)
            async with (
                watch,
                aiohttp.ClientSession(connector=connector, timeout=aiohttp.ClientTimeout(total=30)) as http,
                SignalProducer(stack.bootstrap, topics.kafka.topic_signals, linger_ms=linger_ms) as producer,
                AIOKafkaProducer(
                    bootstrap_servers=stack.bootstrap, acks="all", enable_idempotence=True, linger_ms=linger_ms
                ) as bare,
            ):
                say(
                    "ingest: open-loop fixed loads, HTTP ingest vs the raw producer with the same payloads "
                    f"(producer linger {linger_ms} ms on both)"
                )
                # Warm-up, not counted: the first seconds on new topics pay for metadata, connections and
                # the broker's JIT, and would land in whichever path happened to be measured first.
                for warm in (
                    _raw_sender(producer, _payloads("rw", 1)),
                    _http_sender(http, url, stack, _payloads("hw", 1), 1),
                ):
                    await open_loop(warm, 200, cfg.warmup_s)
                for mode, batch, rates in (
                    ("single", 1, cfg.single_rates),
                    (f"batch{cfg.batch}", cfg.batch, cfg.batch_rates),
                ):
                    for rate in rates:
                        tag = f"{mode}-{rate:g}"
                        raw = await open_loop(_raw_sender(producer, _payloads("r" + tag, batch)), rate, cfg.duration_s)
                        ing = await open_loop(
                            _http_sender(http, url, stack, _payloads("h" + tag, batch), batch), rate, cfg.duration_s
                        )
                        backends_during = max(backends_during, await backends_on(stack.admin_dsn, stack.database))
                        say(_line(f"{mode} @{rate:g} req/s", ing, raw))
                        points.append({"mode": mode, "batch": batch, "ingest": ing.summary(), "raw": raw.summary()})
                say(f"ingest: ceilings, closed loop with {cfg.ceiling_concurrency} concurrent senders")
                ceilings: dict[str, Any] = {}
                for mode, batch in (("single", 1), (f"batch{cfg.batch}", cfg.batch)):
                    raw = await closed_loop(
                        _raw_sender(producer, _payloads("rc" + mode, batch)), cfg.ceiling_concurrency, cfg.ceiling_s
                    )
                    ing = await closed_loop(
                        _http_sender(http, url, stack, _payloads("hc" + mode, batch), batch),
                        cfg.ceiling_concurrency,
                        cfg.ceiling_s,
                    )
                    kafka = await closed_loop(
                        _kafka_sender(bare, topics.kafka.topic_signals, _payloads("kc" + mode, batch)),
                        cfg.ceiling_concurrency,
                        cfg.ceiling_s,
                    )
                    ratio = ing.signals_per_s / raw.signals_per_s if raw.signals_per_s else 0.0
                    ceilings[mode] = {
                        "ingest_signals_per_s": round(ing.signals_per_s, 1),
                        "raw_signals_per_s": round(raw.signals_per_s, 1),
                        "bare_kafka_signals_per_s": round(kafka.signals_per_s, 1),
                        "ingest_p99_ms": ing.summary()["p99_ms"],
                        "raw_p99_ms": raw.summary()["p99_ms"],
                        "ratio": round(ratio, 3),
                    }
                    say(
                        f"  {mode:<22} ingest {ing.signals_per_s:,.0f} signals/s  vs  raw producer "
                        f"{raw.signals_per_s:,.0f} signals/s  -> ingest_vs_raw_ratio {ratio:.2f}   "
                        f"(bare aiokafka, pre-encoded: {kafka.signals_per_s:,.0f} signals/s)"
                    )
            await asyncio.sleep(2)  # PostgreSQL flushes backend statistics about once a second
            sessions_after = await client_sessions(stack.admin_dsn, stack.database)
            calls = {
                "db_sessions": sessions_after - sessions_before,
                "db_backends_seen": backends_during,
                "db_connections_held_max": watch.sockets_peak["postgres"],
                "llm_requests": llm.requests - llm_before,
                "llm_connections_held_max": watch.sockets_peak["llm"],
                "socket_samples": watch.samples,
            }
            say(
                "ingest path calls during the load (expected all 0): "
                + ", ".join(f"{k} {v}" for k, v in calls.items() if k != "socket_samples")
                + f"  [{watch.samples} socket samples of pid {pid}]"
            )
            return {
                "points": points,
                "ceilings": ceilings,
                "ingest_vs_raw_ratio": {mode: c["ratio"] for mode, c in ceilings.items()},
                "calls": calls,
                "producer_linger_ms": linger_ms,
                "rss_idle_mb": round(idle_rss / 2**20, 1),
                "rss_load_mb": round(watch.rss_peak["ingest"] / 2**20, 1),
            }
        finally:
            procs.stop()
