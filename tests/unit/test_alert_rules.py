"""Alert rules: promtool accepts them and passes their unit tests, every expression uses
only metrics defined in libs/memwright/metrics.py, and every alert is tested both ways.

promtool comes from Debian's prometheus package (deploy/tools/install-prometheus.sh); the
promtool tests skip only when it is not installed.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml
from memwright import settings

from tests.unit.test_dashboards import check_expr

ROOT = Path(__file__).resolve().parents[2]
PROM = ROOT / "deploy" / "prometheus"
RULES = PROM / "rules" / "memwright.rules.yml"
RULE_TESTS = sorted((PROM / "tests").glob("*.yml"))
PROMTOOL = shutil.which("promtool")
needs_promtool = pytest.mark.skipif(
    PROMTOOL is None, reason="no promtool: run deploy/tools/install-prometheus.sh (make test runs it)"
)


def promtool(*args: str) -> str:
    assert PROMTOOL is not None
    proc = subprocess.run([PROMTOOL, *args], capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert proc.returncode == 0, f"promtool {' '.join(args)}:\n{proc.stdout}\n{proc.stderr}"
    return proc.stdout


def alerts() -> list[dict[str, Any]]:
    groups = yaml.safe_load(RULES.read_text())["groups"]
    return [rule for group in groups for rule in group["rules"] if "alert" in rule]


@needs_promtool
def test_promtool_accepts_the_rules() -> None:
    assert "SUCCESS" in promtool("check", "rules", str(RULES))


@needs_promtool
def test_promtool_rule_unit_tests_pass() -> None:
    assert RULE_TESTS
    assert "SUCCESS" in promtool("test", "rules", *map(str, RULE_TESTS))


@needs_promtool
def test_local_prometheus_config_is_valid() -> None:
    assert "SUCCESS" in promtool("check", "config", str(PROM / "prometheus.yml"))


def test_local_prometheus_scrapes_every_service_on_its_default_ops_port() -> None:
    config = yaml.safe_load((PROM / "prometheus.yml").read_text())
    targets = {
        job["job_name"]: [t for sc in job["static_configs"] for t in sc["targets"]] for job in config["scrape_configs"]
    }
    defaults = {
        "ingest": settings.IngestSettings,
        "api": settings.ApiSettings,
        "sweeper": settings.SweeperSettings,
        "curator": settings.CuratorSettings,
        "indexer": settings.IndexerSettings,
    }
    assert targets == {name: [f"127.0.0.1:{cls.ops_port}"] for name, cls in defaults.items()}


def test_rules_use_only_metrics_defined_in_metrics_py() -> None:
    problems = [f"{a['alert']}: {p}" for a in alerts() for p in check_expr(a["expr"])]
    assert not problems, "\n".join(problems)


def test_every_alert_has_severity_summary_and_description() -> None:
    for alert in alerts():
        assert alert["labels"]["severity"] in {"warning", "critical"}, alert["alert"]
        assert alert["annotations"]["summary"] and alert["annotations"]["description"], alert["alert"]


def test_every_alert_is_tested_firing_and_quiet() -> None:
    fired: set[str] = set()
    quiet: set[str] = set()
    for path in RULE_TESTS:
        for case in yaml.safe_load(path.read_text())["tests"]:
            for check in case.get("alert_rule_test", []):
                (fired if check.get("exp_alerts") else quiet).add(check["alertname"])
    names = {a["alert"] for a in alerts()}
    assert names - fired == set(), "alerts never tested firing"
    assert names - quiet == set(), "alerts never tested staying quiet"


def test_llm_error_alert_counts_every_outcome_llm_py_records_but_ok() -> None:
    """MemwrightLLMErrors divides outcome!="ok" by all calls: llm.py must call success "ok"."""
    source = (ROOT / "libs" / "memwright" / "agent" / "llm.py").read_text()
    assert set(re.findall(r'CURATOR_LLM_CALLS\.labels\("(\w+)"\)', source)) == {"ok", "error", "timeout"}
    (alert,) = [a for a in alerts() if a["alert"] == "MemwrightLLMErrors"]
    assert 'outcome!="ok"' in alert["expr"]


def test_drift_alert_uses_the_indexer_drift_gauge_by_kind() -> None:
    (alert,) = [a for a in alerts() if a["alert"] == "MemwrightIndexerDrift"]
    assert "memwright_indexer_drift_points" in alert["expr"] and "by (kind)" in alert["expr"]
