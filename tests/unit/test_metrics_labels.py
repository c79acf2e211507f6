"""Labelled series whose values are known exist from the start, and the code uses no others."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest
from memwright import metrics
from memwright.index import apply

ROOT = Path(__file__).resolve().parents[2]
LITERAL_LABEL = re.compile(r"metrics\.([A-Z_]+)\.labels\(\"([^\"]+)\"\)")


def test_known_series_are_exported_at_zero_before_any_event() -> None:
    # a fresh process: other tests in this one have counted events already
    page = subprocess.run(
        [sys.executable, "-c", "import memwright.metrics, prometheus_client as p; print(p.generate_latest().decode())"],
        check=True, capture_output=True, text=True,
    ).stdout  # fmt: skip
    assert 'memwright_curator_runs_total{outcome="failed"} 0.0' in page
    assert 'memwright_ingest_rejections_total{reason="auth"} 0.0' in page
    assert 'memwright_curator_run_duration_seconds_count{outcome="fenced"} 0.0' in page


def test_every_literal_label_in_the_code_is_a_known_one() -> None:
    used = [
        (name, value, path.relative_to(ROOT))
        for path in [*ROOT.joinpath("services").rglob("*.py"), *ROOT.joinpath("libs").rglob("*.py")]
        for name, value in LITERAL_LABEL.findall(path.read_text())
    ]
    assert used, "the scan found no labels at all"
    for name, value, where in used:
        metric = getattr(metrics, name)
        if metric in metrics.KNOWN_LABELS:
            assert value in metrics.KNOWN_LABELS[metric], f"{where}: {name} label {value!r} is not in KNOWN_LABELS"


@pytest.mark.parametrize("outcome", [apply.UPSERT, apply.DELETE, apply.UNCHANGED, apply.ABSENT, apply.NEWER])
def test_every_indexer_outcome_is_a_known_label(outcome: str) -> None:
    assert outcome in metrics.KNOWN_LABELS[metrics.INDEXER_EVENTS]


@pytest.mark.parametrize(
    "reason", ["value is not JSON: x", "record has no value", "schema_version must be 1, got 2", "text is too long (9)",
               "signal: 'user_id' is a required property", "signal: unknown field 'x'", "key does not match user_id"]
)  # fmt: skip
def test_every_dead_letter_reason_maps_to_a_known_label(reason: str) -> None:
    from memwright.sweeping import reason_label

    assert reason_label(reason) in metrics.KNOWN_LABELS[metrics.SWEEPER_DLQ]
