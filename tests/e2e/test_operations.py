"""Every service exposes /healthz, /readyz and Prometheus /metrics, and logs JSON lines."""

from __future__ import annotations

import json

import aiohttp
from memwright.localrun import SERVICES

from tests.e2e.conftest import Pipeline


async def test_every_service_serves_health_readiness_and_its_own_metrics(
    pipeline: Pipeline, http: aiohttp.ClientSession
) -> None:
    for name in SERVICES:
        base = pipeline.procs.ops_url(name)
        async with http.get(base + "/healthz") as r:
            assert r.status == 200, name
        async with http.get(base + "/readyz") as r:
            assert r.status == 200 and (await r.json())["ready"], name
        async with http.get(base + "/metrics") as r:
            assert r.status == 200 and r.headers["Content-Type"].startswith("text/plain"), name
            assert f"memwright_{name}_" in await r.text(), name


def test_services_log_structured_json_lines(pipeline: Pipeline) -> None:
    for name in SERVICES:
        lines = (pipeline.procs.log_dir / f"{name}.log").read_text().splitlines()
        events = [json.loads(line) for line in lines if line.startswith("{")]
        started = [e for e in events if e.get("event") == f"{name}_started"]
        assert started and started[0]["service"] == name and "timestamp" in started[0], name
