"""The sweeper's own ceiling: signals/s one sweeper process writes to PostgreSQL, against a raw
aiokafka consumer reading (and decoding) the same topic in the same run.

The topic is filled first (N signals over U users, keyed by user, acks=all), so neither reader
waits on a producer. The raw consumer reads every record from the beginning (no group, no
commits) and decodes it as the sweeper does; its rate is from its first record to its last. The
sweeper (one process, a fresh consumer group, 1 s windows: a transaction per user per second,
the least batching a deployment would run) writes messages and backlog rows; its rate is taken
between the 10th and the 90th percentile of `swept_at`, so start-up and the last window do not
count. Its CPU time per signal comes from /proc.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import asyncpg
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from memwright.events import Signal, decode_signal

from bench.harness import BenchStack
from bench.probes import cpu_seconds


@dataclass(frozen=True)
class SweeperConfig:
    signals: int = 60_000
    users: int = 2_000
    timeout_s: float = 300.0


async def _fill(bootstrap: str, topic: str, cfg: SweeperConfig) -> None:
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, acks="all", linger_ms=5, max_batch_size=256 * 1024)
    await producer.start()
    try:
        pending = []
        for i in range(cfg.signals):
            user = f"sw{i % cfg.users}"
            value = Signal(user, f"sw-m{i}", "c1", "can you help me with this function").to_bytes()
            pending.append(await producer.send(topic, value, key=user.encode()))
            if len(pending) >= 5000:
                await asyncio.gather(*pending)
                pending.clear()
        await asyncio.gather(*pending)
    finally:
        await producer.stop()


async def _raw_read(bootstrap: str, topic: str, n: int) -> float:
    """Records/s of a bare consumer reading and decoding n records from the beginning."""
    consumer = AIOKafkaConsumer(
        topic, bootstrap_servers=bootstrap, group_id=None, auto_offset_reset="earliest", enable_auto_commit=False
    )
    await consumer.start()
    try:
        seen, first = 0, 0.0
        while seen < n:
            batches = await consumer.getmany(timeout_ms=1000, max_records=5000)
            for records in batches.values():
                if not first:
                    first = time.monotonic()
                for record in records:
                    decode_signal(record.value)
                seen += len(records)
        return n / (time.monotonic() - first)
    finally:
        await consumer.stop()


async def run(stack: BenchStack, cfg: SweeperConfig, say: Callable[[str], None]) -> dict[str, Any]:
    topics = await stack.topics("s")
    topic = topics.kafka.topic_signals
    say(f"sweeper: {cfg.signals:,} signals of {cfg.users:,} users in {topic} (6 partitions); filling the topic")
    await _fill(stack.bootstrap, topic, cfg)
    raw_rps = await _raw_read(stack.bootstrap, topic, cfg.signals)
    procs = stack.services(topics, "sweeper")
    pool = await asyncpg.create_pool(stack.dsn, min_size=1, max_size=2)
    assert pool is not None
    try:
        procs.start("sweeper")
        cpu_before = 0.0
        pid = procs.procs["sweeper"].pid
        await procs.wait_ready("sweeper", timeout=90)
        cpu_before = cpu_seconds(pid)
        deadline = time.monotonic() + cfg.timeout_s
        users = [f"sw{i}" for i in range(cfg.users)]
        while await pool.fetchval("SELECT count(*) FROM messages WHERE user_id = ANY($1::text[])", users) < cfg.signals:
            if time.monotonic() > deadline:
                raise RuntimeError(f"the sweeper did not write {cfg.signals} signals in {cfg.timeout_s:.0f}s")
            await asyncio.sleep(0.5)
        cpu = cpu_seconds(pid) - cpu_before
        row = await pool.fetchrow(
            """SELECT extract(epoch FROM percentile_disc(0.9) WITHIN GROUP (ORDER BY swept_at)
                                    - percentile_disc(0.1) WITHIN GROUP (ORDER BY swept_at)) AS middle
               FROM messages WHERE user_id = ANY($1::text[])""",
            users,
        )
        sweeper_rps = 0.8 * cfg.signals / max(float(row["middle"]), 1e-3)
    finally:
        await pool.close()
        procs.stop()
    ratio = sweeper_rps / raw_rps if raw_rps else 0.0
    cpu_us = round(1e6 * cpu / cfg.signals, 1)
    say(
        f"  one sweeper {sweeper_rps:,.0f} signals/s (1 s windows, CPU {cpu_us} us per signal)  vs  "
        f"raw aiokafka consumer {raw_rps:,.0f} records/s (read + decode) -> ratio {ratio:.2f}"
    )
    return {
        "signals": cfg.signals,
        "users": cfg.users,
        "window_s": 1.0,
        "sweeper_rps": round(sweeper_rps, 1),
        "raw_consumer_rps": round(raw_rps, 1),
        "ratio": round(ratio, 3),
        "sweeper_cpu_us_per_signal": cpu_us,
    }
