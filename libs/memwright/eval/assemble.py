"""Assemble the hand-written eval users into train / dev / test JSON Lines.

The users are written by hand in datasets/source/*.txt, one small text format (below); this
module only turns them into the `memwright eval` format, checks them with the loader, and
splits them by user, stratified by category, with a fixed seed; a user already in a committed
split stays there, so adding users never moves one between splits. It writes no phrasing of its
own. `python -m memwright.eval.assemble` rewrites datasets/{train,dev,test}.jsonl;
`--check` exits 1 when the committed files differ from what the sources give.

The source format, one item per line (blank lines and lines starting with // are ignored):

    @ explicit                 a new user of this category (`@ budget budget=2` sets a budget)
    #                          a new conversation (the next one starts a few days later)
    plain text                 a user message; it goes to the user's forget list
    *a text                    a user message labelled `a`, for the expectations below
    ~ text                     a user message that is neither expected nor forgotten (ambiguous)
    > text                     an assistant message
    + a b | kw1, kw2 | x       remember: evidence any of a, b; the text must contain kw1 or kw2
                               (and not x: optional, e.g. a password in the same message)
    ^ a > b | kw1 | old1, old2 update: old evidence a, new evidence b; must contain kw1, none of old1, old2

Message ids are m1, m2, ... in order (assistant turns included); conversation ids c1, c2, ...;
user ids are a short hash of the source file and the user's position in it, so they say nothing
about the category and stay put when users are appended.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import random
import sys
from collections import defaultdict
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from memwright.eval.dataset import CATEGORIES, DatasetError, parse_user

DATASETS = Path(__file__).parent / "datasets"
SOURCES = DATASETS / "source"
SPLITS = (("train", 0.5), ("dev", 0.2), ("test", 0.3))
SEED = 14
EPOCH = datetime(2026, 2, 2, 8, 0, tzinfo=UTC)


class SourceError(ValueError):
    """A source file is malformed; the message names the file and line."""


def _user_id(source: str, index: int) -> str:
    return "h" + hashlib.sha256(f"{source}:{index}".encode()).hexdigest()[:8]


def _words(text: str) -> list[str]:
    return [w.strip() for w in text.split(",") if w.strip()]


def parse_source(text: str, source: str) -> list[dict[str, Any]]:
    """The users one source file holds, in the `memwright eval` format (not yet validated)."""
    users: list[dict[str, Any]] = []
    user: dict[str, Any] | None = None
    labels: dict[str, str] = {}
    cited: set[str] = set()
    neutral: set[str] = set()
    n_msg = 0
    start = EPOCH

    def finish() -> None:
        if user is None:
            return
        forget = [
            m["message_id"]
            for c in user["conversations"]
            for m in c["messages"]
            if m.get("role", "user") == "user" and m["message_id"] not in cited and m["message_id"] not in neutral
        ]
        if forget:
            user["expect"]["forget"] = [{"message_ids": forget}]
        users.append(user)

    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        where = f"{source}:{number}"
        if not line or line.startswith("//"):
            continue
        if line.startswith("@"):
            finish()
            parts = line[1:].split()
            if not parts:
                raise SourceError(f"{where}: a user needs a category")
            index = len(users)
            user = {"user_id": _user_id(source, index), "category": parts[0], "conversations": [], "expect": {}}
            for option in parts[1:]:
                key, _, value = option.partition("=")
                if key != "budget" or not value.isdigit():
                    raise SourceError(f"{where}: unknown option {option!r}")
                user["budget"] = int(value)
            labels, cited, neutral, n_msg = {}, set(), set(), 0
            digest = int(hashlib.sha256(user["user_id"].encode()).hexdigest()[:6], 16)
            start = EPOCH + timedelta(hours=digest % 2000, minutes=digest % 60)
            continue
        if user is None:
            raise SourceError(f"{where}: text before the first @ line")
        conversations: list[dict[str, Any]] = user["conversations"]
        if line.startswith("#"):
            conversations.append({"conversation_id": f"c{len(conversations) + 1}", "messages": []})
            continue
        if line[0] in "+^":
            refs, _, rest = line[1:].partition("|")
            if line[0] == "+":
                evidence = refs.split()
                item: dict[str, Any] = {"id": f"r{len(user['expect'].get('remember', [])) + 1}"}
                user["expect"].setdefault("remember", []).append(item)
                names = evidence
            else:
                old, _, new = refs.partition(">")
                contain, _, gone = rest.partition("|")
                item = {"id": f"u{len(user['expect'].get('update', [])) + 1}"}
                user["expect"].setdefault("update", []).append(item)
                names = old.split() + new.split()
            unknown = [r for r in names if r not in labels]
            if unknown or not names:
                raise SourceError(f"{where}: unknown or no labels {unknown}")
            if line[0] == "+":
                contain, _, gone = rest.partition("|")
                item["evidence_any"] = [labels[r] for r in evidence]
                item["must_contain_any"] = _words(contain)
                if _words(gone):
                    item["must_not_contain"] = _words(gone)
            else:
                item["old_evidence"] = [labels[r] for r in old.split()]
                item["new_evidence"] = [labels[r] for r in new.split()]
                item["must_contain_any"] = _words(contain)
                item["must_not_contain"] = _words(gone)
            ids = [labels[r] for r in names]
            cited.update(ids)
            continue
        if not conversations:
            raise SourceError(f"{where}: a message before the first # line")
        n_msg += 1
        mid = f"m{n_msg}"
        sent = start + timedelta(days=3 * (len(conversations) - 1), minutes=2 * n_msg)
        message: dict[str, Any] = {"message_id": mid, "text": "", "sent_at": sent.strftime("%Y-%m-%dT%H:%M:%SZ")}
        if line.startswith(">"):
            message["role"] = "assistant"
            body = line[1:]
        elif line.startswith("*"):
            label, _, body = line[1:].partition(" ")
            if not label or label in labels:
                raise SourceError(f"{where}: label {label!r} is empty or used twice")
            labels[label] = mid
        elif line.startswith("~"):
            neutral.add(mid)
            body = line[1:]
        else:
            body = line[1:] if line.startswith("\\") else line
        message["text"] = body.strip()
        if not message["text"]:
            raise SourceError(f"{where}: an empty message")
        conversations[-1]["messages"].append(message)
    finish()
    return users


def read_sources(directory: Path = SOURCES) -> list[dict[str, Any]]:
    users: list[dict[str, Any]] = []
    for path in sorted(directory.glob("*.txt")):
        for user in parse_source(path.read_text(encoding="utf-8"), path.name):
            try:
                parse_user(user, f"{path.name}: user {user['user_id']}")
            except DatasetError as exc:
                raise SourceError(str(exc)) from None
            if user["category"] not in CATEGORIES:
                raise SourceError(f"{path.name}: user {user['user_id']} has category {user['category']!r}")
            users.append(user)
    ids = [u["user_id"] for u in users]
    if len(ids) != len(set(ids)):
        raise SourceError("two users share an id")
    return users


def split(
    users: list[dict[str, Any]], seed: int = SEED, frozen: dict[str, str] | None = None
) -> dict[str, list[dict[str, Any]]]:
    """By user, stratified by category, deterministic: each category is shuffled with the seed and cut.

    `frozen` (user id -> split, read from the committed files) keeps every committed user where it
    is, so appending users never moves one from test to train: a new user goes to the split of its
    category that is furthest below its share.
    """
    frozen = frozen or {}
    by_category: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for u in users:
        by_category[u["category"]].append(u)
    out: dict[str, list[dict[str, Any]]] = {name: [] for name, _ in SPLITS}
    for category in CATEGORIES:
        group = sorted(by_category.get(category, []), key=lambda u: u["user_id"])
        random.Random(f"{seed}:{category}").shuffle(group)
        if not any(u["user_id"] in frozen for u in group):
            n_train = round(len(group) * SPLITS[0][1])
            n_dev = round(len(group) * SPLITS[1][1])
            out["train"] += group[:n_train]
            out["dev"] += group[n_train : n_train + n_dev]
            out["test"] += group[n_train + n_dev :]
            continue
        counts = dict.fromkeys(out, 0)
        for u in group:
            if u["user_id"] in frozen:
                counts[frozen[u["user_id"]]] += 1
        for u in group:
            name = frozen.get(u["user_id"])
            if name is None:
                total = sum(counts.values()) + 1
                name = max(SPLITS, key=lambda share: share[1] * total - counts[share[0]])[0]
                counts[name] += 1
            out[name].append(u)
    return out


def committed(directory: Path = DATASETS) -> dict[str, str]:
    """user id -> split, as the committed files have it (empty when there are none)."""
    found: dict[str, str] = {}
    for name, _ in SPLITS:
        path = directory / f"{name}.jsonl"
        if path.exists():
            for line in path.read_text(encoding="utf-8").splitlines():
                if line.strip():
                    found[json.loads(line)["user_id"]] = name
    return found


def render(users: list[dict[str, Any]]) -> str:
    return "".join(json.dumps(u, ensure_ascii=False) + "\n" for u in users)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m memwright.eval.assemble", description=__doc__.splitlines()[0])
    p.add_argument("--check", action="store_true", help="exit 1 when the committed splits differ from the sources")
    args = p.parse_args(argv)
    try:
        splits = split(read_sources(), frozen=committed())
    except SourceError as exc:
        print(f"assemble: {exc}", file=sys.stderr)
        return 2
    stale = []
    for name, users in splits.items():
        path = DATASETS / f"{name}.jsonl"
        text = render(users)
        if args.check:
            if not path.exists() or path.read_text(encoding="utf-8") != text:
                stale.append(path.name)
        else:
            path.write_text(text, encoding="utf-8")
        counts: dict[str, int] = defaultdict(int)
        for u in users:
            counts[u["category"]] += 1
        print(f"{name}: {len(users)} users ({', '.join(f'{c} {counts[c]}' for c in CATEGORIES)})")
    if stale:
        print(f"assemble: {', '.join(stale)} differ from the sources; run python -m memwright.eval.assemble")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
