"""The labelled eval dataset: JSON Lines, one user per line.

    {"user_id": "u1",
     "conversations": [{"conversation_id": "c1",
                        "messages": [{"message_id": "m1", "text": "…", "sent_at": "2026-01-01T10:00:00Z"}]}],
     "expect": {"remember": [{"id": "p1", "evidence_any": ["m1"], "must_contain_any": ["metric"]}],
                "forget":   [{"message_ids": ["m4"]}],
                "update":   [{"id": "p2", "old_evidence": ["m2"], "new_evidence": ["m12"],
                              "must_contain_any": ["tea"], "must_not_contain": ["coffee"]}]},
     "budget": 40,
     "category": "explicit"}

A remember item may also list "must_not_contain" (say, a password the same message holds).
A message may carry "role": "assistant" (default "user"). `budget` is optional. `category` is
optional (one of CATEGORIES; the report groups users by it). Loading checks that every id the
expectations cite is a message of that user, so a typo fails loudly.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

DEFAULT_DATASET = "memories.jsonl"
# The shipped files by name: the set the rules policy was tuned on, and the splits of the
# hand-written users (docs/quality.md: tune on train and dev, report test).
# "chat": one-message users in the style of public chat logs (one-offs, and preferences stated inside
# requests), written by hand for the probe in docs/quality.md. "updates": users who change a
# preference or fact in a later conversation, written for the sixth round without sight of the splits.
# "explicit", "repeats", "updates2": written for the seventh round by helpers that saw neither the
# project nor each other's sets (explicit and one-off; repeated and single weak; update and poisoning).
# "holdout": 80 users of five categories by two more such helpers, measured once at the end of that round.
# "holdout2": 80 more users of the same five categories by two new helpers, committed at the start of
# the eighth round before any policy change, measured at its start and at its end, never tuned on.
# "languages": 64 users writing in 17 other languages (one-offs, explicit, repeated and single weak),
# by a helper that saw none of the policy, for the thirteenth round; tuned on.
# "updates3": 40 update users by a helper that saw neither the project's data nor the policy, for the
# fifteenth round: measured once untuned (with the round's first slot reader), then tuned on.
# "holdout3": 80 users of the five categories by two new helpers that saw nothing of the project,
# committed at the end of the fifteenth round with the policy unchanged, measured once there; never tuned on.
# "holdout4": 80 more users of the five categories by two new helpers that saw nothing of the project,
# committed at the end of the sixteenth round with the policy unchanged: the next round's untuned set.
# "holdout5": 80 more users of the five categories by two new helpers that saw nothing of the project,
# committed at the end of the seventeenth round with the policy unchanged: the next round's untuned set.
# "precision": 128 users (single_weak and one_off hints that sound lasting, and some explicit ones) by three
# helpers that saw only a spec of the format, for the seventeenth round; tuned on.
# "probe6": 80 users of the five categories by two new helpers from the holdout sets' spec (they saw
# nothing of the project), for the eighteenth round: measured untuned at its start and at the round's
# code before it was read, then tuned on.
# "probe7": 80 more users from the same spec by two more such helpers, written in the eighteenth round
# after its rules: measured untuned at the round's start and at its code, to say whether the round's
# rules carry over to people no one tuned on.
# "probe8": 80 users by two new such helpers for the nineteenth round, weighted to updates (32 update
# users: changes said outright, implied, buried in a long request, or of a rule for the assistant);
# measured untuned at the round's start before its findings were read, then tuned on.
# "probe9": 80 more users from the same update-weighted spec by two more such helpers, written in the
# nineteenth round after its first rules: measured untuned at the round's start and at its end, to say
# whether the round's rules carry over to people no one tuned on.
# "probe10": 80 users of the five categories (8 of each per helper) by two new helpers from the holdout
# spec, for the twentieth round: committed before its findings were read and measured untuned at the
# round's start and at its end.
# "probe11": 80 more users from the same spec by two new helpers, for the twenty-first round: committed
# before its findings were read and measured untuned at the round's start and at its end.
# "probe12": 80 more users by two new helpers from a spec rewritten for the twenty-second round (the
# format and the five categories; the earlier spec was not kept): committed before anything of it was
# read, measured untuned at the round's start and at its end.
# "probe13": 80 more users by two new helpers from the same rewritten spec, for the twenty-third round:
# committed before anything of it was read, measured untuned at the round's start and at its end.
SPLITS = {
    "shipped": DEFAULT_DATASET,
    "train": "train.jsonl",
    "dev": "dev.jsonl",
    "test": "test.jsonl",
    "chat": "chat_probe.jsonl",
    "updates": "update_probe.jsonl",
    "explicit": "explicit_probe.jsonl",
    "repeats": "repeat_probe.jsonl",
    "updates2": "update_probe2.jsonl",
    "updates3": "update_probe3.jsonl",
    "languages": "language_probe.jsonl",
    "holdout": "holdout_probe.jsonl",
    "holdout2": "holdout2_probe.jsonl",
    "holdout3": "holdout3_probe.jsonl",
    "holdout4": "holdout4_probe.jsonl",
    "holdout5": "holdout5_probe.jsonl",
    "precision": "precision_probe.jsonl",
    "probe6": "probe6.jsonl",
    "probe7": "probe7.jsonl",
    "probe8": "probe8.jsonl",
    "probe9": "probe9.jsonl",
    "probe10": "probe10.jsonl",
    "probe11": "probe11.jsonl",
    "probe12": "probe12.jsonl",
    "probe13": "probe13.jsonl",
}

# What a user's case is mainly about (docs/quality.md says what each means).
CATEGORIES = ("explicit", "repeated_weak", "single_weak", "one_off", "update", "budget", "poisoning")


class DatasetError(ValueError):
    """The dataset is malformed; the message names the line and the field."""


@dataclass(frozen=True)
class EvalMessage:
    message_id: str
    text: str
    sent_at: str | None = None
    role: str = "user"


@dataclass(frozen=True)
class Conversation:
    conversation_id: str
    messages: list[EvalMessage]


@dataclass(frozen=True)
class Remember:
    id: str
    evidence_any: list[str]
    must_contain_any: list[str]
    must_not_contain: list[str] = field(default_factory=list)  # e.g. a secret in the same message


@dataclass(frozen=True)
class Update:
    id: str
    old_evidence: list[str]
    new_evidence: list[str]
    must_contain_any: list[str] = field(default_factory=list)
    must_not_contain: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class UserCase:
    user_id: str
    conversations: list[Conversation]
    remember: list[Remember] = field(default_factory=list)
    forget: list[list[str]] = field(default_factory=list)
    update: list[Update] = field(default_factory=list)
    budget: int | None = None
    category: str | None = None

    @property
    def message_ids(self) -> set[str]:
        return {m.message_id for c in self.conversations for m in c.messages}

    @property
    def forget_ids(self) -> set[str]:
        return {mid for group in self.forget for mid in group}


def split_path(name: str) -> Path:
    return Path(str(resources.files("memwright.eval").joinpath("datasets", SPLITS[name])))


def default_dataset_path() -> Path:
    return split_path("shipped")


def _strings(value: Any, where: str) -> list[str]:
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise DatasetError(f"{where} must be a list of strings")
    return list(value)


def parse_user(obj: Any, where: str = "user") -> UserCase:
    if not isinstance(obj, dict):
        raise DatasetError(f"{where}: a user must be a JSON object")
    try:
        user_id = obj["user_id"]
        conversations = [
            Conversation(
                c["conversation_id"],
                [
                    EvalMessage(m["message_id"], m["text"], m.get("sent_at"), m.get("role", "user"))
                    for m in c["messages"]
                ],
            )
            for c in obj["conversations"]
        ]
        expect = obj.get("expect", {})
        remember = [
            Remember(
                r["id"],
                _strings(r["evidence_any"], f"{where}: remember {r['id']} evidence_any"),
                _strings(r["must_contain_any"], f"{where}: remember {r['id']} must_contain_any"),
                _strings(r.get("must_not_contain", []), f"{where}: remember {r['id']} must_not_contain"),
            )
            for r in expect.get("remember", [])
        ]
        forget = [_strings(f["message_ids"], f"{where}: forget message_ids") for f in expect.get("forget", [])]
        update = [
            Update(
                u["id"],
                _strings(u["old_evidence"], f"{where}: update {u['id']} old_evidence"),
                _strings(u["new_evidence"], f"{where}: update {u['id']} new_evidence"),
                _strings(u.get("must_contain_any", []), f"{where}: update {u['id']} must_contain_any"),
                _strings(u.get("must_not_contain", []), f"{where}: update {u['id']} must_not_contain"),
            )
            for u in expect.get("update", [])
        ]
    except (KeyError, TypeError) as exc:
        raise DatasetError(f"{where}: missing or malformed field {exc}") from None
    budget = obj.get("budget")
    if budget is not None and (not isinstance(budget, int) or budget < 1):
        raise DatasetError(f"{where}: budget must be a positive integer, got {budget!r}")
    category = obj.get("category")
    if category is not None and category not in CATEGORIES:
        raise DatasetError(f"{where}: category must be one of {', '.join(CATEGORIES)}, got {category!r}")
    case = UserCase(user_id, conversations, remember, forget, update, budget, category)
    _check_ids(case, where)
    return case


def _check_ids(case: UserCase, where: str) -> None:
    seen: set[str] = set()
    for c in case.conversations:
        for m in c.messages:
            if m.message_id in seen:
                raise DatasetError(f"{where}: message id {m.message_id} appears twice")
            if m.role not in ("user", "assistant"):
                raise DatasetError(f"{where}: message {m.message_id} has role {m.role!r}")
            seen.add(m.message_id)
    cited = [mid for r in case.remember for mid in r.evidence_any] + list(case.forget_ids)
    cited += [mid for u in case.update for mid in u.old_evidence + u.new_evidence]
    unknown = sorted(set(cited) - seen)
    if unknown:
        raise DatasetError(f"{where}: expectations cite unknown message ids {', '.join(unknown)}")
    for r in case.remember:
        if not r.evidence_any or not r.must_contain_any:
            raise DatasetError(f"{where}: remember {r.id} needs evidence_any and must_contain_any")
    for u in case.update:
        if not u.new_evidence:
            raise DatasetError(f"{where}: update {u.id} needs new_evidence")


def load(path: Path | str) -> list[UserCase]:
    cases: list[UserCase] = []
    users: set[str] = set()
    with open(path, encoding="utf-8") as f:
        for number, line in enumerate(f, 1):
            if not line.strip():
                continue
            where = f"{path}:{number}"
            try:
                obj = json.loads(line)
            except json.JSONDecodeError as exc:
                raise DatasetError(f"{where}: not JSON ({exc})") from None
            case = parse_user(obj, where)
            if case.user_id in users:
                raise DatasetError(f"{where}: user {case.user_id} appears twice")
            users.add(case.user_id)
            cases.append(case)
    if not cases:
        raise DatasetError(f"{path}: no users")
    return cases
