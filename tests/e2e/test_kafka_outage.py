"""Ingest never hangs when Kafka is gone: it answers 503 quickly, and recovers by itself."""

from __future__ import annotations

import subprocess
import time

import aiohttp
import pytest
from memwright.localrun import ServiceProcesses

from tests.conftest import STACK
from tests.e2e.conftest import Pipeline
from tests.e2e.helpers import eventually, new_user, signal

BOUND_SECONDS = 8.0  # MEMWRIGHT_PRODUCE_TIMEOUT_S (5 s) plus slack for a loaded machine


async def _post(http: aiohttp.ClientSession, url: str, pipeline: Pipeline, body: dict) -> tuple[int, float]:
    started = time.monotonic()
    async with http.post(url + "/v1/signals", json=body, headers=pipeline.auth()) as r:
        await r.read()
        return r.status, time.monotonic() - started


async def test_ingest_answers_503_when_kafka_is_unreachable_from_the_start(
    pipeline: Pipeline, http: aiohttp.ClientSession
) -> None:
    procs = ServiceProcesses(
        {**pipeline.env, "MEMWRIGHT_KAFKA_BOOTSTRAP": "127.0.0.1:1"}, pipeline.procs.log_dir / "no-kafka"
    )
    procs.start("ingest")
    try:
        await eventually(lambda: _ops_up(http, procs), what="ingest's ops port")
        async with http.get(procs.ops_url("ingest") + "/readyz") as r:
            assert r.status == 503  # not ready without Kafka
        status, took = await _post(http, procs.url("ingest"), pipeline, signal(new_user(), "hello"))
        assert status == 503 and took < BOUND_SECONDS
    finally:
        assert procs.stop() == {"ingest": 0}


async def _ops_up(http: aiohttp.ClientSession, procs: ServiceProcesses) -> bool:
    try:
        async with http.get(procs.ops_url("ingest") + "/healthz") as r:
            return r.status == 200
    except aiohttp.ClientError:
        return False


@pytest.mark.disruptive
async def test_kafka_stopped_then_restarted_gives_503s_then_the_pipeline_recovers(
    pipeline: Pipeline, http: aiohttp.ClientSession
) -> None:
    user = new_user()
    subprocess.run([str(STACK), "stop", "kafka"], check=True)
    try:
        status, took = await _post(http, pipeline.ingest, pipeline, signal(user, "hello", message_id="during"))
        assert status == 503, "a signal during the outage must be refused, not silently dropped"
        assert took < BOUND_SECONDS, f"ingest took {took:.1f}s to answer during the outage"
    finally:
        subprocess.run([str(STACK), "start", "kafka"], check=True)

    async def accepted() -> bool:
        status, _ = await _post(
            http, pipeline.ingest, pipeline, signal(user, "Always answer in metric units", message_id="after")
        )
        return status == 202

    await eventually(accepted, timeout=60, what="ingest to accept signals again")

    async def remembered() -> list:
        async with http.get(f"{pipeline.api}/v1/users/{user}/memories", headers=pipeline.auth()) as r:
            return (await r.json())["memories"]

    memories = await eventually(remembered, timeout=90, what="the post-outage signal to become a memory")
    assert [m["preview"] for m in memories] == ["Always answer in metric units."]
