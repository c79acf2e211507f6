"""The sweeper process stops within a bounded time on SIGTERM, even while it holds signals it
cannot write (before: faust waited for every unacked event, and a window that could not be
written kept the process alive for good; 3 of 3 still alive 90 s after SIGTERM)."""

from __future__ import annotations

import asyncio
import json
import subprocess
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import aiohttp
import pytest
from aiokafka import AIOKafkaProducer
from memwright.localrun import ServiceProcesses
from memwright.services.sweeper.app import STOP_DEADLINE_SECONDS
from memwright.settings import KafkaSettings
from memwright.sweeping import DRAIN_SECONDS
from memwright.topics import ensure_topics, isolated_env, prefixed_topics

from tests.e2e.helpers import eventually, signal

pytestmark = pytest.mark.timeout(180)


@pytest.fixture
def lone_sweeper(stack: dict[str, str], session_tmp: Path) -> Iterator[tuple[ServiceProcesses, KafkaSettings]]:
    """A sweeper alone, on topics of its own, whose PostgreSQL refuses every connection."""
    prefix = f"stop{uuid.uuid4().hex[:8]}"
    kafka = prefixed_topics(stack["MEMWRIGHT_KAFKA_BOOTSTRAP"], prefix)
    asyncio.run(ensure_topics(kafka, sweeper_app_id=f"{prefix}-sweeper"))
    env = {
        **isolated_env(kafka, prefix),
        "MEMWRIGHT_PG_DSN": "postgresql://memwright:memwright@127.0.0.1:1/memwright",  # nothing listens
        "MEMWRIGHT_SWEEPER_DATA_DIR": str(session_tmp / prefix),
        "MEMWRIGHT_WINDOW_SECONDS": "1",
        "MEMWRIGHT_LOG_LEVEL": "info",
    }
    procs = ServiceProcesses(env, session_tmp / prefix / "logs")
    procs.start("sweeper")
    yield procs, kafka
    procs.stop()  # already stopped by the test, or SIGKILLed here after 30 s


async def _metric(procs: ServiceProcesses, line_start: str) -> float:
    try:
        async with aiohttp.ClientSession() as http, http.get(procs.ops_url("sweeper") + "/metrics") as r:
            text = await r.text()
    except aiohttp.ClientError:
        return 0.0
    return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines() if line.startswith(line_start))


async def test_sigterm_stops_a_sweeper_holding_signals_it_cannot_write_within_the_deadline(
    lone_sweeper: tuple[ServiceProcesses, KafkaSettings],
) -> None:
    procs, kafka = lone_sweeper
    producer = AIOKafkaProducer(bootstrap_servers=kafka.kafka_bootstrap, acks="all")
    await producer.start()
    try:
        for user in ("ann", "ben"):
            value = json.dumps(signal(user, "hello")).encode()  # valid: only PostgreSQL is missing
            await producer.send_and_wait(kafka.topic_signals, key=user.encode(), value=value)
    finally:
        await producer.stop()

    async def failing_writes() -> bool:
        return await _metric(procs, 'memwright_sweeper_window_write_failures_total{kind="unavailable"}') > 0

    await eventually(failing_writes, 90, "the sweeper to consume the signals and fail to write them")
    assert await _metric(procs, "memwright_sweeper_oldest_unwritten_window_seconds") > 0
    async with aiohttp.ClientSession() as http, http.get(procs.ops_url("sweeper") + "/readyz") as r:
        checks = (await r.json())["checks"]
    assert r.status == 503 and checks["postgres"] is False and "windows_written" in checks  # true for 60 s

    proc = procs.procs["sweeper"]
    started = time.monotonic()
    proc.terminate()
    try:
        code = await asyncio.to_thread(proc.wait, STOP_DEADLINE_SECONDS + 10)
    except subprocess.TimeoutExpired:
        pytest.fail(f"the sweeper was still running {STOP_DEADLINE_SECONDS + 10:.0f} s after SIGTERM")
    took = time.monotonic() - started
    assert took < DRAIN_SECONDS + 10, f"stopped, but only after {took:.1f} s"
    assert code == 0, f"exit code {code}: the graceful path did not finish (see {procs.log_dir})"
