"""A real Prometheus scrapes every service during an end-to-end run: every panel query of every
Grafana dashboard returns data, and the alert rules load and evaluate (issue 7).

Prometheus is Debian's package (deploy/tools/install-prometheus.sh), run here as a child
process with its own storage in a temp dir, on a free port, with the shipped
deploy/prometheus/prometheus.yml rewritten to this session's ops ports and a 1 s scrape
interval. Besides the five pipeline services it scrapes two extra processes:

- a curator with MEMWRIGHT_POLICY=llm against the scripted fake OpenAI server
  (tests/fakes/llm_server.py), so the LLM panels get calls, tokens, an error and a failed run;
- an ingest whose Kafka is unreachable, so it answers 503 and counts produce errors.

Real traffic flows through ingest, sweeper, curator, indexer and api: explicit preferences that
become memories, a user whose budget of one is full, a user-written memory deleted again, a
rejected request, a malformed record for the dead-letter topic, reads of the api.

Each panel query is then run as Grafana runs it: a range query over the test's time span with
Grafana's variables replaced ($__rate_interval by Grafana's own formula). Every one must return
at least one series with at least one number (not only NaN). There is no exclusion.
"""

from __future__ import annotations

import asyncio
import json
import math
import re
import shutil
import subprocess
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
import asyncpg
import pytest
import yaml
from aiokafka import AIOKafkaProducer
from memwright.auth import mint
from memwright.localrun import SERVICES, ServiceProcesses, free_ports
from memwright.settings import AuthSettings
from prometheus_client.parser import text_string_to_metric_families

from tests.conftest import JWT_SECRET
from tests.e2e.conftest import Pipeline
from tests.e2e.helpers import eventually, new_user, signal
from tests.fakes.llm_server import FakeLlm, Reply, error, text, tool_call, tool_results
from tests.unit.test_alert_rules import PROMTOOL, RULE_TESTS, RULES, alerts, promtool
from tests.unit.test_dashboards import DASHBOARDS, load, panels, promql_references

ROOT = Path(__file__).resolve().parents[2]
SHIPPED_CONFIG = ROOT / "deploy" / "prometheus" / "prometheus.yml"
PROMETHEUS = shutil.which("prometheus")
SCRAPE_SECONDS = 1
STEP_SECONDS = 1

# (dashboard, panel title, refId) -> why that query cannot return data in a test run.
EXCLUDED: dict[tuple[str, str, str], str] = {}

pytestmark = pytest.mark.skipif(
    PROMETHEUS is None, reason="no prometheus binary: run deploy/tools/install-prometheus.sh (make test runs it)"
)


@dataclass
class Prometheus:
    url: str
    started: float  # unix time the server started scraping

    async def get(self, http: aiohttp.ClientSession, path: str, **params: str) -> Any:
        async with http.get(self.url + path, params=params) as r:
            body = await r.json()
            assert r.status == 200 and body["status"] == "success", (path, params, body)
            return body["data"]

    async def instant(self, http: aiohttp.ClientSession, expr: str) -> list[dict[str, Any]]:
        result: list[dict[str, Any]] = (await self.get(http, "/api/v1/query", query=expr))["result"]
        return result

    async def over_the_run(self, http: aiohttp.ClientSession, expr: str, end: float) -> list[dict[str, Any]]:
        data = await self.get(
            http,
            "/api/v1/query_range",
            query=expr,
            start=f"{self.started:.3f}",
            end=f"{end:.3f}",
            step=f"{STEP_SECONDS}s",
        )
        result: list[dict[str, Any]] = data["result"]
        return result


def grafana_expr(expr: str, range_seconds: float) -> str:
    """The query Grafana sends: its variables replaced by what Grafana would put there."""
    interval = STEP_SECONDS  # $__interval: the range query's step
    # Grafana: $__rate_interval = max($__interval + scrape interval, 4 x scrape interval)
    rate_interval = max(interval + SCRAPE_SECONDS, 4 * SCRAPE_SECONDS)
    for name, value in {
        "__rate_interval": f"{rate_interval}s",
        "__interval": f"{interval}s",
        "__range": f"{math.ceil(range_seconds)}s",
    }.items():
        expr = expr.replace("${" + name + "}", value).replace("$" + name, value)
    assert "$" not in expr, f"a Grafana variable this test does not know: {expr}"
    return expr


def has_a_number(series: list[dict[str, Any]]) -> bool:
    """At least one sample of one series is a number (a ratio of zeros or an empty histogram is NaN)."""
    return any(math.isfinite(float(v)) for s in series for _, v in s["values"])


def scrape_config(targets: dict[str, list[int]]) -> dict[str, Any]:
    """deploy/prometheus/prometheus.yml with this session's ports, a 1 s interval and the rules."""
    config: dict[str, Any] = yaml.safe_load(SHIPPED_CONFIG.read_text())
    interval = f"{SCRAPE_SECONDS}s"
    config["global"] = {"scrape_interval": interval, "scrape_timeout": interval, "evaluation_interval": interval}
    config["rule_files"] = [str(RULES)]
    jobs = {job["job_name"]: job for job in config["scrape_configs"]}
    assert set(jobs) == set(SERVICES), "the shipped config must scrape every service"
    for name, job in jobs.items():
        (static,) = job["static_configs"]
        static["targets"] = [f"127.0.0.1:{port}" for port in targets[name]]
    return config


@pytest.fixture(scope="module")
def extra(pipeline: Pipeline, session_tmp: Path) -> Iterator[ServiceProcesses]:
    """Ports and processes for the llm curator and the ingest without Kafka (started by the test)."""
    procs = ServiceProcesses(pipeline.env, session_tmp / "prometheus-extra-logs")
    yield procs
    if procs.procs:  # the test failed before stopping them
        procs.stop()


@pytest.fixture(scope="module")
def prometheus(
    pipeline: Pipeline, extra: ServiceProcesses, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Prometheus]:
    assert PROMETHEUS is not None
    work = tmp_path_factory.mktemp("prometheus")
    targets = {name: [pipeline.procs.ops_port(name)] for name in SERVICES}
    targets["curator"].append(extra.ops_port("curator"))
    targets["ingest"].append(extra.ops_port("ingest"))
    (work / "prometheus.yml").write_text(yaml.safe_dump(scrape_config(targets), sort_keys=False))
    (port,) = free_ports(1)
    url = f"http://127.0.0.1:{port}"
    with open(work / "prometheus.log", "wb") as log:
        proc = subprocess.Popen(
            [
                PROMETHEUS,
                f"--config.file={work / 'prometheus.yml'}",
                f"--storage.tsdb.path={work / 'data'}",
                f"--web.listen-address=127.0.0.1:{port}",
                "--log.level=warn",
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        try:
            _wait_ready(proc, url, work / "prometheus.log")
            yield Prometheus(url, time.time())
        finally:
            proc.terminate()
            try:
                proc.wait(20)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


def _wait_ready(proc: subprocess.Popen[bytes], url: str, log: Path, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while True:
        if proc.poll() is not None:
            raise RuntimeError(f"prometheus exited with {proc.returncode}:\n{log.read_text()}")
        try:
            with urllib.request.urlopen(url + "/-/ready", timeout=2) as r:
                if r.status == 200:
                    return
        except OSError:
            pass
        if time.monotonic() > deadline:
            raise TimeoutError(f"prometheus not ready after {timeout:.0f}s:\n{log.read_text()}")
        time.sleep(0.2)


# ---- traffic ----------------------------------------------------------------------------


def user_auth(user: str) -> dict[str, str]:
    token = mint(AuthSettings(jwt_secret=JWT_SECRET), user, ["memories:read", "memories:write"])
    return {"Authorization": f"Bearer {token}"}


async def send(http: aiohttp.ClientSession, pipeline: Pipeline, *signals: dict[str, Any]) -> None:
    async with http.post(
        pipeline.ingest + "/v1/signals", json={"signals": list(signals)}, headers=pipeline.auth()
    ) as r:
        assert r.status == 202, await r.text()


async def curated(pool: asyncpg.Pool, users: list[str]) -> bool:
    """Every user has a committed run and nothing left waiting."""
    done = await pool.fetchval(
        "SELECT count(DISTINCT user_id) FROM curation_runs WHERE user_id = ANY($1) AND status = 'committed'", users
    )
    waiting = await pool.fetchval("SELECT count(*) FROM backlog WHERE user_id = ANY($1)", users)
    return bool(done == len(users) and waiting == 0)


async def rules_traffic(pipeline: Pipeline, http: aiohttp.ClientSession, pool: asyncpg.Pool) -> None:
    """Memories from explicit preferences, a full budget, a user write deleted again, bad input."""
    metric, emoji, full = new_user(), new_user(), new_user()
    # a budget of one: the second preference is refused (memwright_curator_budget_refusals_total)
    await pool.execute("INSERT INTO agents (user_id, memory_budget) VALUES ($1, 1)", full)
    await send(
        http,
        pipeline,
        signal(metric, "Always answer in metric units."),
        signal(emoji, "Never use emoji in replies."),
        signal(full, "Always answer in metric units.", "c1"),
        signal(full, "Never use emoji in replies.", "c2"),
    )
    # rejected by ingest: no token (auth) and an invalid signal (invalid)
    async with http.post(pipeline.ingest + "/v1/signals", json=signal(metric, "hello")) as r:
        assert r.status == 401
    async with http.post(pipeline.ingest + "/v1/signals", json={"user_id": metric}, headers=pipeline.auth()) as r:
        assert r.status == 400
    # produced past ingest, malformed: the sweeper dead-letters it
    producer = AIOKafkaProducer(bootstrap_servers=pipeline.kafka.kafka_bootstrap, acks="all")
    await producer.start()
    try:
        await producer.send_and_wait(pipeline.kafka.topic_signals, key=metric.encode(), value=b"{not json")
    finally:
        await producer.stop()
    await eventually(lambda: curated(pool, [metric, emoji, full]), timeout=60, what="the rules curator's runs")

    # the api: reads, "why", a user-written memory and its deletion (an indexer delete)
    auth = user_auth(metric)
    api = f"{pipeline.api}/v1/users/{metric}"
    async with http.get(api + "/memories", headers=auth) as r:
        (memory,) = (await r.json())["memories"]
    # a few rounds, over more than one scrape: rate() sees no increase in a series' first sample
    for _ in range(3):
        for path in ("/memories", "/context", f"/memories/{memory['id']}", f"/memories/{memory['id']}/history"):
            async with http.get(api + path, headers=auth) as r:
                assert r.status == 200, (path, await r.text())
        await asyncio.sleep(1.5 * SCRAPE_SECONDS)
    upserts = await indexer_upserts(http, pipeline)
    async with http.post(api + "/memories", json={"text": "My cat is Miso"}, headers=auth) as r:
        assert r.status == 201, await r.text()
        mine = await r.json()

    async def indexed() -> bool:  # deleted before it was indexed, it would only be "absent"
        return await indexer_upserts(http, pipeline) > upserts

    await eventually(indexed, what="the user write to be indexed")
    async with http.delete(f"{api}/memories/{mine['id']}", headers=auth) as r:
        assert r.status in (200, 204), await r.text()
    await eventually(lambda: pool.fetchval("SELECT count(*) = 0 FROM index_outbox"), what="the delete to be relayed")


async def indexer_upserts(http: aiohttp.ClientSession, pipeline: Pipeline) -> float:
    async with http.get(pipeline.procs.ops_url("indexer") + "/metrics") as r:
        exposition = await r.text()
    (family,) = [f for f in text_string_to_metric_families(exposition) if f.name == "memwright_indexer_upserts"]
    return sum(sample.value for sample in family.samples if sample.name.endswith("_total"))


def llm_script() -> list[Reply | Any]:
    """The first completion fails (a failed run, retried later); then the model remembers one
    thing per run, citing a message it was shown, and ends the run."""

    def respond(request: dict[str, Any]) -> Reply:
        if tool_results(request):
            return text("Remembered the user's stated preference.")
        context = request["messages"][1]["content"]
        cited = re.findall(r"^- \[([^\]]+)\] conversation .*?, user: ", context, flags=re.MULTILINE)
        if not cited:
            return text("Nothing to remember.")
        return tool_call("create_memory", text="Prefers tea to coffee.", evidence=[cited[-1]])

    return [error(500), *[respond] * 400]


async def llm_traffic(
    pipeline: Pipeline, http: aiohttp.ClientSession, pool: asyncpg.Pool, extra: ServiceProcesses, llm: FakeLlm
) -> None:
    """Rounds of fresh users until the llm curator has a failed run and committed runs in two
    rounds. Rounds are a scrape apart: rate() sees no increase in a series' first sample, so a
    burst that creates a series and ends before the next scrape would show as zero."""
    llm.push(*llm_script())
    extra.start(
        "curator",
        extra_env={
            "MEMWRIGHT_POLICY": "llm",
            "MEMWRIGHT_LLM_BASE_URL": llm.base_url,
            "MEMWRIGHT_LLM_MAX_RETRIES": "0",  # the scripted 500 fails the run at once
            "MEMWRIGHT_LLM_TIMEOUT_S": "10",
            "MEMWRIGHT_POLL_SECONDS": "0.05",  # polls faster than the pipeline's curator: wins most claims
            "MEMWRIGHT_LEASE_SECONDS": "6",  # the failed run's user is retried 6 s later
            "MEMWRIGHT_CURATOR_ID": "llm-curator",
        },
    )
    await extra.wait_ready("curator", timeout=60)
    count = "SELECT count(*) FROM curation_runs WHERE policy = 'llm' AND status = $1"
    rounds_with_commits = 0
    for _ in range(12):
        before = await pool.fetchval(count, "committed")
        users = [new_user() for _ in range(3)]
        await send(http, pipeline, *(signal(u, "I prefer tea to coffee, always.") for u in users))
        await eventually(lambda users=users: curated(pool, users), timeout=60, what="the llm round's runs")
        rounds_with_commits += await pool.fetchval(count, "committed") > before
        if rounds_with_commits >= 2 and await pool.fetchval(count, "failed"):
            return
        await asyncio.sleep(1.5 * SCRAPE_SECONDS)
    raise AssertionError(
        f"the llm curator committed in {rounds_with_commits} rounds; failed runs: "
        f"{await pool.fetchval(count, 'failed')}"
    )


async def kafka_less_ingest(pipeline: Pipeline, http: aiohttp.ClientSession, extra: ServiceProcesses) -> None:
    """An ingest whose Kafka does not answer: 503 and a produce error, as in a Kafka outage."""
    (closed,) = free_ports(1)
    extra.start("ingest", extra_env={"MEMWRIGHT_KAFKA_BOOTSTRAP": f"127.0.0.1:{closed}"})

    async def answers_503() -> bool:
        try:
            async with http.post(
                extra.url("ingest") + "/v1/signals", json=signal(new_user(), "hello"), headers=pipeline.auth()
            ) as r:
                return r.status == 503
        except aiohttp.ClientConnectionError:
            return False  # not listening yet

    await eventually(answers_503, what="the Kafka-less ingest to answer 503")


# ---- the tests ---------------------------------------------------------------------------


async def test_every_dashboard_panel_returns_series_from_a_real_prometheus(
    pipeline: Pipeline,
    prometheus: Prometheus,
    extra: ServiceProcesses,
    http: aiohttp.ClientSession,
    e2e_pool: asyncpg.Pool,
) -> None:
    async def pipeline_scraped() -> bool:
        active = (await prometheus.get(http, "/api/v1/targets", state="active"))["activeTargets"]
        up = {t["scrapeUrl"] for t in active if t["health"] == "up"}
        return all(f"{pipeline.procs.ops_url(name)}/metrics" in up for name in SERVICES)

    await eventually(pipeline_scraped, what="Prometheus to scrape the five services")

    await rules_traffic(pipeline, http, e2e_pool)
    await kafka_less_ingest(pipeline, http, extra)
    async with FakeLlm() as llm:
        try:
            await llm_traffic(pipeline, http, e2e_pool, extra, llm)
            await eventually(
                lambda: e2e_pool.fetchval("SELECT count(*) = 0 FROM index_outbox"), what="the last changes relayed"
            )
            # the range queries must end after a scrape that saw the last increments, or the
            # last round's increase (the first visible to rate() for new series) falls outside
            traffic_end = time.time()

            async def scraped_after_traffic() -> bool:
                stamps = await prometheus.instant(http, "timestamp(up)")
                return len(stamps) == len(SERVICES) + 2 and all(float(s["value"][1]) > traffic_end for s in stamps)

            await eventually(scraped_after_traffic, what="a scrape of every target after the traffic")
            await asyncio.sleep(STEP_SECONDS)

            # the traffic reached Prometheus: each path it exercised has its series
            exercised = [
                'memwright_ingest_requests_total{code="202"}',
                'memwright_ingest_requests_total{code="503"}',
                'memwright_ingest_rejections_total{reason="auth"}',
                'memwright_ingest_rejections_total{reason="invalid"}',
                "memwright_ingest_kafka_produce_errors_total",
                'memwright_sweeper_dlq_records_total{reason="not_json"}',
                "memwright_curator_budget_refusals_total",
                'memwright_curator_runs_total{outcome="failed"}',
                'memwright_curator_llm_calls_total{outcome="ok"}',
                'memwright_curator_llm_calls_total{outcome="error"}',
                'memwright_curator_tool_calls_total{tool="create_memory",result="ok"}',
                'memwright_indexer_events_applied_total{action="delete"}',
                'memwright_api_requests_total{code="201"}',
                # counted from PostgreSQL when the llm curator started, after the first memories
                'memwright_curator_memories{author="agent"}',
            ]
            for selector in exercised:
                await eventually(
                    lambda s=selector: prometheus.instant(http, f"sum({s}) > 0"), what=f"{selector} > 0 in Prometheus"
                )

            end = time.time()
            checked, problems, panel_count = 0, [], 0
            for path in DASHBOARDS:
                for panel in panels(load(path)):
                    panel_count += 1
                    for target in panel["targets"]:
                        key = (path.stem, panel["title"], target["refId"])
                        if key in EXCLUDED:
                            continue
                        expr = grafana_expr(target["expr"], end - prometheus.started)
                        series = await prometheus.over_the_run(http, expr, end)
                        checked += 1
                        if not has_a_number(series):
                            problems.append(f"{key}: {len(series)} series, no number: {expr}")
            assert checked >= 50
            assert not problems, f"{len(problems)} of {checked} panel queries returned no data:\n" + "\n".join(problems)
            print(f"{checked} queries of {panel_count} panels in {len(DASHBOARDS)} dashboards returned data")

            # every metric a panel uses comes from the service its name says, not only from
            # another process (every process exposes the unlabelled metrics of metrics.py)
            used = {
                m
                for p in DASHBOARDS
                for pn in panels(load(p))
                for t in pn["targets"]
                for m in promql_references(t["expr"])[0]
            }
            missing = []
            for metric in sorted(used):
                job = metric.split("_")[1]
                if not await prometheus.instant(http, f'count({metric}{{job="{job}"}})'):
                    missing.append(f"{metric} (job {job})")
            assert not missing, f"not exposed by their own service: {missing}"
        finally:
            codes = extra.stop()
    assert codes == {"ingest": 0, "curator": 0}, f"unclean shutdown: {codes} (logs in {extra.log_dir})"


async def test_alert_rules_load_into_prometheus_and_evaluate_without_errors(
    prometheus: Prometheus, http: aiohttp.ClientSession
) -> None:
    # promtool comes with the same Debian package: the checks of tests/unit/test_alert_rules.py
    assert PROMTOOL is not None, "no promtool next to prometheus: run deploy/tools/install-prometheus.sh"
    assert "SUCCESS" in promtool("check", "rules", str(RULES))
    assert "SUCCESS" in promtool("test", "rules", *map(str, RULE_TESTS))

    async def evaluated() -> list[dict[str, Any]] | None:
        groups = (await prometheus.get(http, "/api/v1/rules"))["groups"]
        rules = [r for g in groups for r in g["rules"]]
        never = [r for r in rules if r["lastEvaluation"].startswith("0001-")]
        return None if never or not rules else rules

    rules = await eventually(evaluated, what="every rule to be evaluated once")
    assert {r["name"] for r in rules} == {a["alert"] for a in alerts()}
    broken = {r["name"]: r.get("lastError") for r in rules if r["health"] != "ok" or r.get("lastError")}
    assert not broken, json.dumps(broken, indent=2)
