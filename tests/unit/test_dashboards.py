"""Grafana dashboards: each parses, has a Prometheus datasource variable, and every panel
query uses only metrics (and labels) that libs/memwright/metrics.py defines.

The metric names come from the prometheus_client registry that importing memwright.metrics
fills: a Counter `x` is exposed as `x_total`, a Histogram as `x_bucket`, `x_sum`, `x_count`.
test_alert_rules.py checks the alert expressions with the same helpers.
"""

from __future__ import annotations

import json
import re
from functools import cache
from pathlib import Path
from typing import Any

import memwright.metrics
import pytest
from prometheus_client import REGISTRY
from prometheus_client.metrics import MetricWrapperBase

ROOT = Path(__file__).resolve().parents[2]
DASHBOARD_DIR = ROOT / "deploy" / "grafana" / "dashboards"
EXPECTED = set("overview intake sweeps-and-fairness curation-and-llm-cost index-convergence".split())
DASHBOARDS = sorted(DASHBOARD_DIR.glob("*.json"))

# PromQL words that are neither metrics nor functions (functions are followed by "(").
KEYWORDS = set("by without on ignoring group_left group_right bool and or unless offset inf nan".split())
IDENT = re.compile(r"(?<![\w.$])[a-zA-Z_:][a-zA-Z0-9_:]*")
GROUPING = re.compile(r"\b(?:by|without|on|ignoring|group_left|group_right)\s*\(([^)]*)\)")
MATCHERS = re.compile(r"\{([^}]*)\}")
LEGEND = re.compile(r"\{\{\s*([a-zA-Z_][a-zA-Z0-9_]*)\s*\}\}")


@cache
def known_metrics() -> dict[str, frozenset[str]]:
    """Every series name memwright exposes, mapped to the label names it carries."""
    labels = {
        m._name: frozenset(m._labelnames)  # prometheus_client keeps label names only here
        for m in vars(memwright.metrics).values()
        if isinstance(m, MetricWrapperBase)
    }
    names: dict[str, frozenset[str]] = {}
    for family in REGISTRY.collect():
        if not family.name.startswith("memwright_"):
            continue
        own = labels.get(family.name) or labels.get(family.name + "_total") or frozenset()
        if family.type == "counter":
            names[family.name + "_total"] = own
        elif family.type == "histogram":
            for suffix in ("_sum", "_count"):
                names[family.name + suffix] = own
            names[family.name + "_bucket"] = own | {"le"}
        else:
            names[family.name] = own
    return names


def promql_references(expr: str) -> tuple[set[str], set[str]]:
    """(metric names, label names) a PromQL expression uses."""
    text = re.sub(r'"(?:[^"\\]|\\.)*"', '""', expr)  # string literals
    used_labels = {
        m.split("=")[0].split("!")[0].strip() for block in MATCHERS.findall(text) for m in block.split(",") if m.strip()
    }
    used_labels |= {lab.strip() for block in GROUPING.findall(text) for lab in block.split(",") if lab.strip()}
    text = MATCHERS.sub("", text)
    text = GROUPING.sub("", text)
    text = re.sub(r"\[[^\]]*\]", "", text)  # range selectors, $__rate_interval included
    metrics = set()
    for m in IDENT.finditer(text):
        if m.group() in KEYWORDS or text[m.end() :].lstrip().startswith("("):
            continue  # a keyword, or a function / aggregation name
        metrics.add(m.group())
    return metrics, used_labels


def check_expr(expr: str, extra_labels: set[str] | None = None) -> list[str]:
    """Problems with one expression: unknown metrics, or labels none of its metrics has."""
    known = known_metrics()
    metrics, labels = promql_references(expr)
    problems = [f"unknown metric {m!r}" for m in sorted(metrics - known.keys())]
    if not metrics:
        problems.append("references no memwright metric")
    available = set().union(*(known.get(m, frozenset()) for m in metrics))
    problems += [
        f"label {lab!r} is on none of {sorted(metrics)}"
        for lab in sorted((labels | (extra_labels or set())) - available)
    ]
    return problems


def panels(dashboard: dict[str, Any]) -> list[dict[str, Any]]:
    """Every panel, including those nested in collapsed rows; rows themselves excluded."""
    out: list[dict[str, Any]] = []
    for p in dashboard["panels"]:
        out += [p] if p["type"] != "row" else p.get("panels", [])
    return out


def load(path: Path) -> dict[str, Any]:
    return json.loads(path.read_text())


def test_every_expected_dashboard_exists() -> None:
    assert {p.stem for p in DASHBOARDS} == EXPECTED


def test_metric_names_come_from_metrics_py() -> None:
    known = known_metrics()
    assert "memwright_curator_runs_total" in known and "outcome" in known["memwright_curator_runs_total"]
    assert "memwright_ingest_request_duration_seconds_bucket" in known
    assert "memwright_curator_oldest_waiting_seconds" in known
    assert "memwright_curator_runs" not in known  # the bare counter name is not a series


def test_reference_check_rejects_unknown_metrics_and_labels() -> None:
    assert check_expr('sum by (outcome) (rate(memwright_curator_runs_total{outcome="failed"}[5m]))') == []
    assert check_expr("rate(memwright_curator_runz_total[5m])") == [
        "unknown metric 'memwright_curator_runz_total'",
    ]
    assert check_expr("sum by (reason) (rate(memwright_curator_runs_total[5m]))") == [
        "label 'reason' is on none of ['memwright_curator_runs_total']",
    ]


@pytest.mark.parametrize("path", DASHBOARDS, ids=lambda p: p.stem)
def test_dashboard_has_a_prometheus_datasource_variable(path: Path) -> None:
    dash = load(path)
    assert dash["uid"].startswith("memwright-") and dash["title"]
    variables = {v["name"]: v for v in dash["templating"]["list"]}
    assert variables["datasource"]["type"] == "datasource"
    assert variables["datasource"]["query"] == "prometheus"


@pytest.mark.parametrize("path", DASHBOARDS, ids=lambda p: p.stem)
def test_every_panel_queries_only_defined_metrics(path: Path) -> None:
    dash = load(path)
    problems = []
    for panel in panels(dash):
        assert panel["datasource"] == {"type": "prometheus", "uid": "${datasource}"}, panel["title"]
        assert panel["targets"], f"panel {panel['title']!r} has no query"
        for t in panel["targets"]:
            assert t["datasource"]["uid"] == "${datasource}", panel["title"]
            legend = set(LEGEND.findall(t.get("legendFormat", "")))
            problems += [f"{panel['title']!r}: {p}" for p in check_expr(t["expr"], legend)]
    assert not problems, "\n".join(problems)


@pytest.mark.parametrize("path", DASHBOARDS, ids=lambda p: p.stem)
def test_panels_have_unique_ids_and_a_place_on_the_grid(path: Path) -> None:
    dash = load(path)
    ids = [p["id"] for p in dash["panels"]]
    assert len(ids) == len(set(ids))
    for p in dash["panels"]:
        assert {"x", "y", "w", "h"} <= p["gridPos"].keys(), p["title"]
        assert p["gridPos"]["x"] + p["gridPos"]["w"] <= 24, p["title"]


def test_dashboard_uids_are_unique() -> None:
    uids = [load(p)["uid"] for p in DASHBOARDS]
    assert len(uids) == len(set(uids))


def test_docs_list_every_metric() -> None:
    """docs/metrics.md has a row for every metric family in metrics.py, and no others."""
    doc = (ROOT / "docs" / "metrics.md").read_text()
    rows = set(re.findall(r"^\| `(memwright_[a-z_]+)` \|", doc, flags=re.MULTILINE))
    families = {name.removesuffix("_bucket") for name in known_metrics() if not name.endswith(("_sum", "_count"))}
    assert rows == families
