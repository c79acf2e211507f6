"""Eval scoring by receipts, on hand-made data; the dataset loader's checks; and the shipped
dataset through the rules policy in-process (a quick guard; `make eval` runs the real pipeline)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from memwright.agent.rules import RulesPolicy
from memwright.eval.dataset import DatasetError, default_dataset_path, load, parse_user
from memwright.eval.offline import run_offline
from memwright.eval.scoring import Observed, ObservedMemory, missed_targets, score


def user(uid: str, expect: dict, n: int = 6, budget: int | None = None) -> dict:
    obj = {
        "user_id": uid,
        "conversations": [
            {"conversation_id": "c1", "messages": [{"message_id": f"m{i}", "text": f"t{i}"} for i in range(1, n + 1)]}
        ],
        "expect": expect,
    }
    if budget:
        obj["budget"] = budget
    return obj


CASES = [
    parse_user(
        user(
            "u1",
            {
                "remember": [
                    {"id": "metric", "evidence_any": ["m1"], "must_contain_any": ["metric"]},
                    {"id": "nurse", "evidence_any": ["m2", "m3"], "must_contain_any": ["nurse"]},
                ],
                "forget": [{"message_ids": ["m4", "m5"]}],
                "update": [
                    {
                        "id": "tea",
                        "old_evidence": ["m1"],
                        "new_evidence": ["m6"],
                        "must_contain_any": ["tea"],
                        "must_not_contain": ["coffee"],
                    }
                ],
            },
        )
    ),
    parse_user(
        user(
            "u2",
            {
                "remember": [{"id": "emoji", "evidence_any": ["m1"], "must_contain_any": ["emoji"]}],
                "update": [
                    {
                        "id": "city",
                        "old_evidence": ["m2"],
                        "new_evidence": ["m3"],
                        "must_contain_any": ["rome"],
                        "must_not_contain": ["paris"],
                    }
                ],
            },
            budget=2,
        )
    ),
]


def test_scores_are_computed_from_receipts_as_the_issue_defines_them() -> None:
    observed = Observed(
        memories={
            "u1": [
                ObservedMemory("Always answer in metric units.", ["m1"]),  # matches metric
                ObservedMemory("User is a NURSE.", ["m3"]),  # matches nurse (case-insensitive, any evidence)
                ObservedMemory("User drinks tea.", ["m1", "m6"]),  # the update, also matches "tea"
                ObservedMemory("User likes jazz.", ["m4", "m5"]),  # only forget evidence: a false memory
                ObservedMemory("User likes chess.", ["m4", "x9"]),  # unknown evidence, not only forget ids
            ],
            "u2": [
                ObservedMemory("Never use emojis.", ["m1"]),
                ObservedMemory("User lives in Rome.", ["m3"]),
                ObservedMemory("User lives in Paris.", ["m2"]),  # stale second memory: the update failed
                ObservedMemory("I am allergic to nuts.", [], author="user"),  # user-written: not scored
            ],
        },
        messages={"u1": {f"m{i}" for i in range(1, 7)}, "u2": {f"m{i}" for i in range(1, 7)}},
        budgets={"u1": 40, "u2": 2},
    )
    metrics, findings = score(CASES, observed)
    assert metrics == {
        "users": 2,
        "expected": 5,  # 3 remember + 2 update items
        "memories": 8,  # agent-written only
        "precision": round(5 / 8, 4),  # metric, nurse, tea, emoji, rome
        "recall": 1.0,  # every item has a matching memory (rome matches even though paris lingers)
        "false_memory_rate": round(1 / 8, 4),
        "update_accuracy": 0.5,  # tea yes; city no (a memory citing old evidence still says paris)
        "evidence_accuracy": round(7 / 8, 4),  # x9 does not exist for u1
        "max_memories_per_user": 5,
        "budget_violations": 1,  # u2 has 3 agent memories over a budget of 2
    }
    assert any("false memory 'User likes jazz.'" in f for f in findings)
    assert any("update city not applied" in f for f in findings)
    assert missed_targets(metrics) == [
        "precision = 0.625 (target >= 0.9)",
        "false_memory_rate = 0.125 (target <= 0.05)",
        "update_accuracy = 0.5 (target >= 0.8)",
        "evidence_accuracy = 0.875 (target >= 1.0)",
        "budget_violations = 1 (target <= 0)",
    ]


def test_nothing_remembered_is_vacuously_precise_but_recalls_nothing() -> None:
    metrics, _ = score(CASES, Observed())
    assert (metrics["precision"], metrics["recall"], metrics["false_memory_rate"]) == (1.0, 0.0, 0.0)
    assert (metrics["update_accuracy"], metrics["evidence_accuracy"], metrics["memories"]) == (0.0, 1.0, 0)


def test_an_update_that_keeps_the_old_word_is_neither_accurate_nor_a_match() -> None:
    observed = Observed(memories={"u1": [ObservedMemory("User drinks tea, not coffee.", ["m1", "m6"])]})
    metrics, _ = score(CASES[:1], observed)
    assert (metrics["update_accuracy"], metrics["precision"]) == (0.0, 0.0)


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ("not json", "not JSON"),
        (json.dumps({"user_id": "u"}), "missing or malformed field"),
        (
            json.dumps(user("u", {"remember": [{"id": "p", "evidence_any": ["m99"], "must_contain_any": ["x"]}]})),
            "unknown message ids m99",
        ),
        (json.dumps(user("u", {"forget": [{"message_ids": ["m7"]}]})), "unknown message ids m7"),
        (json.dumps({**user("u", {}), "budget": 0}), "budget must be a positive integer"),
    ],
)
def test_a_malformed_dataset_fails_with_the_line_and_the_reason(tmp_path: Path, line: str, message: str) -> None:
    path = tmp_path / "bad.jsonl"
    path.write_text(line + "\n")
    with pytest.raises(DatasetError, match=message) as caught:
        load(path)
    assert f"{path}:1" in str(caught.value)


def test_the_shipped_dataset_covers_the_cases_the_issue_lists() -> None:
    cases = load(default_dataset_path())
    assert len(cases) >= 40
    assert sum(len(c.update) for c in cases) >= 8  # contradictions
    assert sum(1 for c in cases if c.budget and c.budget <= 3) >= 3  # small budgets
    assert sum(1 for c in cases if not c.remember and not c.update) >= 8  # one-offs and single-conversation repeats
    multi = [c for c in cases if any(len(set(r.evidence_any)) >= 2 for r in c.remember)]
    assert len(multi) >= 8  # weak signals repeated across conversations
    assert any(m.role == "assistant" for c in cases for conv in c.conversations for m in conv.messages)


async def test_the_rules_policy_meets_the_targets_on_the_shipped_dataset_in_process() -> None:
    cases = load(default_dataset_path())
    metrics, findings = score(cases, await run_offline(RulesPolicy(), cases))
    assert missed_targets(metrics) == [], findings
