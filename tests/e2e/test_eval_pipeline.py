"""`memwright eval` on a small subset of the shipped dataset and one dev user of each category,
through the real ingest, sweeper and curator processes: the last line is the metrics object (per
set, and per category for the categorised one), and its numbers agree with what PostgreSQL holds
(scoring itself is unit-tested on hand-made data in tests/unit/test_eval_scoring.py and
test_eval_splits.py). Only the shipped subset is gated; the dev figures are not pinned here, the
policy is being tuned on them."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from pathlib import Path

import asyncpg
from memwright.eval.dataset import CATEGORIES, default_dataset_path, split_path
from memwright.store.migrate import sibling_dsn

from tests.conftest import ROOT, SESSION, drop_database

SUBSET = {
    "u01": "explicit preference",
    "u16": "weak signal in two conversations",
    "u27": "repeated inside one conversation only",
    "u32": "one-offs only",
    "u38": "a contradiction: coffee, then tea",
    "u49": "three preferences, a budget of two",
}
FIELDS = [
    "users",
    "expected",
    "memories",
    "precision",
    "recall",
    "false_memory_rate",
    "update_accuracy",
    "evidence_accuracy",
    "max_memories_per_user",
    "budget_violations",
]


async def _read(dsn: str) -> tuple[dict[str, list[tuple[str, list[str]]]], dict[str, int], dict[str, set[str]]]:
    conn = await asyncpg.connect(dsn)
    try:
        memories: dict[str, list[tuple[str, list[str]]]] = {}
        for r in await conn.fetch(
            """SELECT m.user_id, m.text, array_agg(e.message_id ORDER BY e.message_id) AS evidence
               FROM memories m JOIN memory_evidence e ON e.memory_id = m.memory_id
               WHERE m.author = 'agent' GROUP BY m.memory_id"""
        ):
            memories.setdefault(r["user_id"], []).append((r["text"], list(r["evidence"])))
        budgets = {r["user_id"]: r["memory_budget"] for r in await conn.fetch("SELECT * FROM agents")}
        messages: dict[str, set[str]] = {}
        for r in await conn.fetch("SELECT user_id, message_id FROM messages"):
            messages.setdefault(r["user_id"], set()).add(r["message_id"])
        return memories, budgets, messages
    finally:
        await conn.close()


def _one_per_category() -> list[str]:
    seen: dict[str, str] = {}
    for line in split_path("dev").read_text().splitlines():
        seen.setdefault(json.loads(line)["category"], line)
    return [seen[c] for c in CATEGORIES]


def test_memwright_eval_runs_the_pipeline_and_its_metrics_match_the_database(
    stack: dict[str, str], tmp_path: Path
) -> None:
    lines = [line for line in default_dataset_path().read_text().splitlines() if json.loads(line)["user_id"] in SUBSET]
    subset = tmp_path / "subset.jsonl"
    subset.write_text("\n".join(lines) + "\n")
    dev = tmp_path / "devsample.jsonl"
    dev.write_text("\n".join(_one_per_category()) + "\n")
    dev_users = {json.loads(line)["user_id"] for line in _one_per_category()}
    database = f"memwright_evaltest_{SESSION}"
    env = {**os.environ, **stack}
    env.pop("MEMWRIGHT_LLM_BASE_URL", None)
    try:
        done = subprocess.run(
            [
                *(sys.executable, "-m", "memwright", "eval", "--dataset", str(subset), "--dataset", str(dev)),
                *("--database", database, "--check", "--gate", "subset"),
            ],
            env=env,
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=280,
        )
        assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-4000:]
        assert "== devsample: 7 users" in done.stdout and "reported, not enforced" in done.stdout
        summary = json.loads(done.stdout.strip().splitlines()[-1])
        assert summary["policy"] == "rules" and summary["gated"] == ["subset"]
        metrics = summary["sets"]["subset"]
        assert list(metrics) == FIELDS
        assert metrics == {
            "users": 6,
            "expected": 6,  # u01 1, u16 1, u38 1 update, u49 3
            "memories": 5,  # u01 1, u16 1, u38 1, u49 2 (a budget of two)
            "precision": 1.0,
            "recall": 1.0,
            "false_memory_rate": 0.0,
            "update_accuracy": 1.0,
            "evidence_accuracy": 1.0,
            "max_memories_per_user": 2,
            "budget_violations": 0,
        }
        sample = summary["sets"]["devsample"]
        assert list(sample["categories"]) == list(CATEGORIES)
        assert all(c["users"] == 1 for c in sample["categories"].values())

        # the same figures, straight from PostgreSQL
        memories, budgets, messages = asyncio.run(_read(sibling_dsn(stack["MEMWRIGHT_PG_DSN"], database)))
        ours = {u: ms for u, ms in memories.items() if u in SUBSET}
        assert sum(len(v) for v in ours.values()) == metrics["memories"]
        assert max(len(v) for v in ours.values()) == metrics["max_memories_per_user"]
        theirs = sum(len(ms) for u, ms in memories.items() if u in dev_users)
        assert theirs == sample["memories"] == sum(c["memories"] for c in sample["categories"].values())
        assert set(memories) <= SUBSET.keys() | dev_users
        assert budgets["u49"] == 2 and len(memories["u49"]) == 2  # the budget was in place before the sweep
        assert set(ours) == {"u01", "u16", "u38", "u49"}  # one-offs and single-conversation repeats: none
        assert all(set(ev) <= messages[user] for user, ms in memories.items() for _, ev in ms)
        [(tea, evidence)] = memories["u38"]
        assert "tea" in tea and "coffee" not in tea and evidence == ["m1", "m3"]
        [(scientist, evidence)] = memories["u16"]
        assert "data scientist" in scientist and evidence == ["m1", "m3"]
    finally:
        drop_database(stack, sibling_dsn(stack["MEMWRIGHT_PG_DSN"], database))
