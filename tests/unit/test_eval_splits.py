"""The hand-written train / dev / test splits: the committed files are exactly what the sources
give (seeded, stratified by category, by user), they hold what docs/quality.md says they hold,
and `memwright eval` reports them per split and per category. No figure of any policy is pinned
here: the splits are for measuring, and the policy is tuned on train and dev only."""

from __future__ import annotations

import json
import re
from collections import Counter
from pathlib import Path

import pytest
from memwright.eval import runner
from memwright.eval.assemble import DATASETS, SourceError, committed, parse_source, read_sources, render, split
from memwright.eval.dataset import CATEGORIES, SPLITS, DatasetError, UserCase, load, parse_user, split_path
from memwright.eval.scoring import Observed, ObservedMemory, by_category

NEW_SPLITS = ("train", "dev", "test")


@pytest.fixture(scope="module")
def splits() -> dict[str, list[UserCase]]:
    return {name: load(split_path(name)) for name in NEW_SPLITS}


def test_the_committed_splits_are_what_the_sources_give() -> None:
    # `python -m memwright.eval.assemble` rewrites them; a hand edit to a .jsonl would show here
    users = read_sources()
    assert split(users) == split(users, frozen=committed())  # as first cut, nobody moved since
    for name, part in split(users, frozen=committed()).items():
        assert (DATASETS / f"{name}.jsonl").read_text(encoding="utf-8") == render(part), name


def test_adding_users_never_moves_a_committed_one() -> None:
    users = read_sources()
    before = committed()
    extra = [{**users[0], "user_id": f"hnew{i:04d}"} for i in range(10)]  # ten more of one category
    after = split(users + extra, frozen=before)
    placed = {u["user_id"]: name for name, part in after.items() for u in part}
    assert all(placed[uid] == name for uid, name in before.items())
    new = Counter(placed[u["user_id"]] for u in extra)
    assert new == {"train": 5, "dev": 2, "test": 3}, new  # the newcomers keep the category's shares


def test_the_split_is_by_user_stratified_and_seeded() -> None:
    users = read_sources()
    first, again = split(users), split(list(reversed(users)))
    assert {k: [u["user_id"] for u in v] for k, v in first.items()} == {
        k: [u["user_id"] for u in v] for k, v in again.items()
    }
    ids = [u["user_id"] for part in first.values() for u in part]
    assert len(ids) == len(set(ids)) == len(users)  # every user in exactly one split
    for category in CATEGORIES:
        n = {name: sum(u["category"] == category for u in part) for name, part in first.items()}
        total = sum(n.values())
        assert abs(n["train"] - 0.5 * total) <= 1 and abs(n["dev"] - 0.2 * total) <= 1, (category, n)
    assert split(users, seed=15) != first  # the seed decides, nothing else


def test_the_splits_hold_what_docs_quality_md_says(splits: dict[str, list[UserCase]]) -> None:
    cases = [c for part in splits.values() for c in part]
    assert len(cases) >= 400
    assert all(c.category in CATEGORIES for c in cases)
    for name, part in splits.items():
        assert {c.category for c in part} == set(CATEGORIES), name
    shipped = {c.user_id for c in load(split_path("shipped"))}
    assert not shipped & {c.user_id for c in cases}
    by = {category: [c for c in cases if c.category == category] for category in CATEGORIES}
    assert all(c.remember and not c.update for c in by["explicit"])
    assert all(any(len(r.evidence_any) >= 2 for r in c.remember) for c in by["repeated_weak"])
    assert all(not c.remember and not c.update and c.forget_ids for c in by["single_weak"] + by["one_off"])
    assert all(c.update for c in by["update"])
    assert all(c.budget and len(c.remember) > c.budget for c in by["budget"])
    assert all(c.forget_ids for c in by["poisoning"])
    assert sum(bool(c.remember) for c in by["poisoning"]) >= 15  # a genuine preference next to the attack
    # every remembered message of a repeated weak signal comes from a different conversation
    for c in by["repeated_weak"]:
        where = {m.message_id: conv.conversation_id for conv in c.conversations for m in conv.messages}
        for r in c.remember:
            assert len({where[m] for m in r.evidence_any}) == len(r.evidence_any), c.user_id


def test_the_phrasing_is_varied_not_templated(splits: dict[str, list[UserCase]]) -> None:
    cases = [c for part in splits.values() for c in part]
    user_texts = [m.text for c in cases for conv in c.conversations for m in conv.messages if m.role == "user"]
    words = [len(t.split()) for t in user_texts]
    assert sum(w >= 150 for w in words) >= 20  # long messages, the preference somewhere in the middle
    assert sum(any(m.role == "assistant" for conv in c.conversations for m in conv.messages) for c in cases) >= 300
    non_english = re.compile(r"[¿¡ñßäöüéèêàçœ]|\b(bitte|por favor|merci|ich|je|tengo|quiero)\b", re.IGNORECASE)
    assert (
        sum(
            any(non_english.search(t) for t in (m.text for conv in c.conversations for m in conv.messages))
            for c in cases
        )
        >= 25
    )
    # the messages that carry what is remembered are not one sentence pattern: no three-word opening
    # starts more than 2% of them (today "what's a good", 6 of 480)
    cited = []
    for c in cases:
        text = {m.message_id: m.text for conv in c.conversations for m in conv.messages}
        ids = {m for r in c.remember for m in r.evidence_any} | {m for u in c.update for m in u.new_evidence}
        cited += [text[m] for m in ids]
    openings = Counter(" ".join(t.lower().split()[:3]) for t in cited)
    assert openings.most_common(1)[0][1] <= 0.02 * len(cited), openings.most_common(5)
    assert len(set(user_texts)) >= 0.97 * len(user_texts)


# written apart from the three splits
PROBES = (
    *("chat", "updates", "explicit", "repeats", "updates2", "updates3", "languages"),
    *("holdout", "holdout2", "holdout3", "holdout4", "holdout5", "precision"),
    *("probe6", "probe7", "probe8", "probe9", "probe10", "probe11", "probe12", "probe13"),
)


def test_key_words_come_from_the_users_own_messages(splits: dict[str, list[UserCase]]) -> None:
    # a memory in the user's terms can pass: some must_contain_any stem is in the cited messages
    probes = [c for name in PROBES for c in load(split_path(name))]
    for case in [*(c for part in splits.values() for c in part), *probes]:
        text = {m.message_id: m.text.lower() for conv in case.conversations for m in conv.messages}
        for r in case.remember:
            cited = " ".join(text[m] for m in r.evidence_any)
            assert any(k.lower() in cited for k in r.must_contain_any), (case.user_id, r.id)
        for u in case.update:
            cited = " ".join(text[m] for m in u.new_evidence)
            assert any(k.lower() in cited for k in u.must_contain_any), (case.user_id, u.id)


SOURCE = """
// a comment
@ update budget=3
#
hello
*a I drink coffee.
> Noted.
#
~ maybe not
*b Switched to tea.
^ a > b | tea | coffee
+ b | tea
"""


def test_the_source_format() -> None:
    [user] = parse_source(SOURCE, "x.txt")
    assert user["category"] == "update" and user["budget"] == 3 and user["user_id"].startswith("h")
    assert [[m["message_id"] for m in c["messages"]] for c in user["conversations"]] == [
        ["m1", "m2", "m3"],
        ["m4", "m5"],
    ]
    assert user["conversations"][0]["messages"][2]["role"] == "assistant"
    assert user["expect"]["update"] == [
        {
            "id": "u1",
            "old_evidence": ["m2"],
            "new_evidence": ["m5"],
            "must_contain_any": ["tea"],
            "must_not_contain": ["coffee"],
        }
    ]
    assert user["expect"]["remember"] == [{"id": "r1", "evidence_any": ["m5"], "must_contain_any": ["tea"]}]
    # uncited user messages are forgotten; "~" ones are neither; assistant turns never are
    assert user["expect"]["forget"] == [{"message_ids": ["m1"]}]
    parse_user(user)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("# \nhi", "before the first @"),
        ("@ explicit\nhi", "before the first #"),
        ("@ explicit\n#\n*a hi\n+ b | x", "unknown or no labels"),
        ("@ explicit\n#\n*a hi\n*a again", "used twice"),
        ("@ explicit size=3\n#\nhi", "unknown option"),
    ],
)
def test_a_malformed_source_names_the_line(text: str, message: str) -> None:
    with pytest.raises(SourceError, match=message):
        parse_source(text, "x.txt")


def test_the_loader_checks_the_category() -> None:
    base = {
        "user_id": "u",
        "conversations": [{"conversation_id": "c", "messages": [{"message_id": "m1", "text": "t"}]}],
    }
    assert parse_user({**base, "category": "one_off"}).category == "one_off"
    assert parse_user(base).category is None
    with pytest.raises(DatasetError, match="category must be one of explicit, repeated_weak"):
        parse_user({**base, "category": "explicit-ish"})


def test_metrics_per_category_use_the_same_definitions() -> None:
    def case(uid: str, category: str | None, remember: bool) -> UserCase:
        expect = {"remember": [{"id": "p", "evidence_any": ["m1"], "must_contain_any": ["tea"]}]} if remember else {}
        expect["forget"] = [{"message_ids": ["m2"]}]
        msgs = [{"message_id": "m1", "text": "tea"}, {"message_id": "m2", "text": "hi"}]
        obj = {"user_id": uid, "conversations": [{"conversation_id": "c", "messages": msgs}], "expect": expect}
        return parse_user({**obj, "category": category} if category else obj)

    cases = [
        case("a", "explicit", True),
        case("b", "one_off", False),
        case("c", "explicit", True),
        case("d", None, False),
    ]
    observed = Observed(
        memories={"a": [ObservedMemory("Drinks tea.", ["m1"])], "b": [ObservedMemory("Says hi.", ["m2"])]},
        messages={u: {"m1", "m2"} for u in "abcd"},
    )
    groups = by_category(cases, observed)
    assert list(groups) == ["explicit", "one_off", "uncategorised"]
    assert (groups["explicit"]["users"], groups["explicit"]["recall"], groups["explicit"]["precision"]) == (2, 0.5, 1.0)
    assert (groups["one_off"]["memories"], groups["one_off"]["false_memory_rate"]) == (1, 1.0)


def test_eval_reports_each_split_and_category_and_gates_only_what_it_is_told(
    capsys: pytest.CaptureFixture[str],
) -> None:
    code = runner.main(["--offline", "--split", "shipped", "--split", "dev", "--check", "--gate", "shipped"])
    out = capsys.readouterr().out
    summary = json.loads(out.strip().splitlines()[-1])
    assert code == 0  # the shipped set meets its targets; dev is reported, never fails the run (yet)
    assert summary["policy"] == "rules" and summary["gated"] == ["shipped"] and summary["targets_met"]["shipped"]
    assert list(summary["sets"]) == ["shipped", "dev"]
    assert list(summary["sets"]["dev"]["categories"]) == list(CATEGORIES)
    assert "categories" not in summary["sets"]["shipped"]  # the shipped set has no categories
    assert sum(c["users"] for c in summary["sets"]["dev"]["categories"].values()) == summary["sets"]["dev"]["users"]
    assert "== dev: 83 users" in out and "reported, not enforced" in out and "issue 14" in out
    for category in CATEGORIES:
        assert re.search(rf"^  {category} +\d+", out, re.MULTILINE), category


def test_eval_still_takes_an_external_dataset_and_keeps_the_flat_json_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    lines = split_path("shipped").read_text().splitlines()[:3]
    external = tmp_path / "mine.jsonl"
    external.write_text("\n".join(lines) + "\n")
    assert runner.main(["--offline", "--dataset", str(external), "--check"]) == 0
    summary = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert summary["users"] == 3 and summary["policy"] == "rules" and "sets" not in summary


def test_sets_that_share_a_user_or_an_unknown_gate_are_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    copy = tmp_path / "copy.jsonl"
    copy.write_text(split_path("shipped").read_text())
    with pytest.raises(DatasetError, match="also in shipped"):
        runner.load_sets(["shipped"], [copy])
    assert runner.main(["--offline", "--split", "dev", "--gate", "test"]) == 2
    assert "--gate test names no set" in capsys.readouterr().err
    assert set(SPLITS) == {"shipped", *PROBES, *NEW_SPLITS}
    runner.load_sets(list(SPLITS), [])  # no user id in two sets


def test_a_remembered_preference_that_repeats_the_secret_beside_it_does_not_match() -> None:
    msgs = [{"message_id": "m1", "text": "I love jazz. My PIN is 6204, remember it."}]
    item = {"id": "p", "evidence_any": ["m1"], "must_contain_any": ["jazz"], "must_not_contain": ["6204"]}
    case = parse_user(
        {"user_id": "u", "conversations": [{"conversation_id": "c", "messages": msgs}], "expect": {"remember": [item]}}
    )
    good = Observed(memories={"u": [ObservedMemory("User loves jazz.", ["m1"])]}, messages={"u": {"m1"}})
    leaky = Observed(memories={"u": [ObservedMemory("User loves jazz; PIN 6204.", ["m1"])]}, messages={"u": {"m1"}})
    assert by_category([case], good)["uncategorised"]["recall"] == 1.0
    assert by_category([case], leaky)["uncategorised"]["recall"] == 0.0
