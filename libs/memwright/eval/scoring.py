"""Scoring by receipts: pure functions over the dataset and what PostgreSQL holds.

- A memory matches an expected item when its evidence includes one of the item's ids
  (`evidence_any`; for an update item its old or new evidence) and its text contains one of
  `must_contain_any` (case-insensitive) -- and none of the item's `must_not_contain`.
- precision = matching memories / all memories; recall = expected items (remember + update)
  matched / expected items.
- A false memory is one whose evidence lies only in the user's `forget` messages.
- update accuracy = update items whose current memory (one citing `new_evidence`) contains none
  of `must_not_contain`, while no memory citing `old_evidence` still does (a contradiction
  updates the memory, it does not add a second one).
- evidence accuracy = memories whose evidence is non-empty and all of it exists and belongs to
  that user.
- budget violations = users with more agent-written memories than their budget.

Ratios over nothing are vacuous: precision and evidence accuracy 1.0, false memory rate 0.0,
recall and update accuracy 1.0 when there was nothing to find.

`by_category` scores each category of users (the dataset's optional `category` field) on its own,
with the same definitions; users without one are grouped as "uncategorised".
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from memwright.eval.dataset import CATEGORIES, Remember, Update, UserCase

DEFAULT_BUDGET = 40
UNCATEGORISED = "uncategorised"


@dataclass(frozen=True)
class ObservedMemory:
    text: str
    evidence: list[str]
    author: str = "agent"


@dataclass
class Observed:
    """What the pipeline left, per dataset user id."""

    memories: dict[str, list[ObservedMemory]] = field(default_factory=dict)
    messages: dict[str, set[str]] = field(default_factory=dict)  # message ids stored for the user
    budgets: dict[str, int] = field(default_factory=dict)


def _contains_any(text: str, needles: list[str]) -> bool:
    low = text.lower()
    return any(n.lower() in low for n in needles)


def matches(memory: ObservedMemory, item: Remember | Update) -> bool:
    if isinstance(item, Remember):
        return (
            bool(set(memory.evidence) & set(item.evidence_any))
            and _contains_any(memory.text, item.must_contain_any)
            and not _contains_any(memory.text, item.must_not_contain)
        )
    cited = set(item.old_evidence) | set(item.new_evidence)
    return (
        bool(set(memory.evidence) & cited)
        and (not item.must_contain_any or _contains_any(memory.text, item.must_contain_any))
        and not _contains_any(memory.text, item.must_not_contain)
    )


def update_accurate(memories: list[ObservedMemory], item: Update) -> bool:
    current = [m for m in memories if set(m.evidence) & set(item.new_evidence)]
    if not current or any(_contains_any(m.text, item.must_not_contain) for m in current):
        return False
    stale = [
        m for m in memories if set(m.evidence) & set(item.old_evidence) and _contains_any(m.text, item.must_not_contain)
    ]
    return not stale


def _ratio(numerator: int, denominator: int, vacuous: float) -> float:
    return round(numerator / denominator, 4) if denominator else vacuous


def score(cases: list[UserCase], observed: Observed) -> tuple[dict[str, Any], list[str]]:
    """Return (the metrics object, human-readable findings for what went wrong)."""
    n_memories = n_matching = n_false = n_good_evidence = 0
    n_expected = n_found = n_updates = n_updates_ok = 0
    max_per_user = 0
    violations = 0
    findings: list[str] = []
    for case in cases:
        memories = [m for m in observed.memories.get(case.user_id, []) if m.author == "agent"]
        known = observed.messages.get(case.user_id, set())
        forget = case.forget_ids
        items: list[Remember | Update] = [*case.remember, *case.update]
        n_memories += len(memories)
        max_per_user = max(max_per_user, len(memories))
        budget = observed.budgets.get(case.user_id, case.budget or DEFAULT_BUDGET)
        if len(memories) > budget:
            violations += 1
            findings.append(f"{case.user_id}: {len(memories)} memories over a budget of {budget}")
        for m in memories:
            if any(matches(m, item) for item in items):
                n_matching += 1
            else:
                findings.append(f"{case.user_id}: unexpected memory {m.text!r} {sorted(m.evidence)}")
            if m.evidence and set(m.evidence) <= forget:
                n_false += 1
                findings.append(f"{case.user_id}: false memory {m.text!r} {sorted(m.evidence)}")
            if m.evidence and set(m.evidence) <= known:
                n_good_evidence += 1
            else:
                findings.append(f"{case.user_id}: bad evidence {sorted(m.evidence)} on {m.text!r}")
        for item in items:
            n_expected += 1
            if any(matches(m, item) for m in memories):
                n_found += 1
            else:
                findings.append(f"{case.user_id}: missed {item.id}")
        for u in case.update:
            n_updates += 1
            if update_accurate(memories, u):
                n_updates_ok += 1
            else:
                findings.append(f"{case.user_id}: update {u.id} not applied")
    metrics = {
        "users": len(cases),
        "expected": n_expected,
        "memories": n_memories,
        "precision": _ratio(n_matching, n_memories, 1.0),
        "recall": _ratio(n_found, n_expected, 1.0),
        "false_memory_rate": _ratio(n_false, n_memories, 0.0),
        "update_accuracy": _ratio(n_updates_ok, n_updates, 1.0),
        "evidence_accuracy": _ratio(n_good_evidence, n_memories, 1.0),
        "max_memories_per_user": max_per_user,
        "budget_violations": violations,
    }
    return metrics, findings


def categories(cases: list[UserCase]) -> dict[str, list[UserCase]]:
    """The users of each category, in the order of CATEGORIES (uncategorised last); only categories present."""
    groups: dict[str, list[UserCase]] = {}
    for case in cases:
        groups.setdefault(case.category or UNCATEGORISED, []).append(case)
    return {name: groups[name] for name in [*CATEGORIES, UNCATEGORISED] if name in groups}


def by_category(cases: list[UserCase], observed: Observed) -> dict[str, dict[str, Any]]:
    """The metrics of each category's users on their own."""
    return {name: score(group, observed)[0] for name, group in categories(cases).items()}


TARGETS = {
    "precision": (">=", 0.9),
    "recall": (">=", 0.8),
    "false_memory_rate": ("<=", 0.05),
    "update_accuracy": (">=", 0.8),
    "evidence_accuracy": (">=", 1.0),
    "budget_violations": ("<=", 0),
}


def missed_targets(metrics: dict[str, Any]) -> list[str]:
    """The targets of issue 3 that `metrics` misses (empty when all are met)."""
    missed = []
    for name, (op, bound) in TARGETS.items():
        value = metrics[name]
        ok = value >= bound if op == ">=" else value <= bound
        if not ok:
            missed.append(f"{name} = {value} (target {op} {bound})")
    return missed
