"""Working memory: compaction never drops or alters a hypothesis (invariant 8) and keeps the size
budget; hypotheses survive being saved and loaded; stale ones are found for fading."""

from __future__ import annotations

from dataclasses import asdict
from datetime import timedelta

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from memwright.agent import tools as tools_module
from memwright.agent.working import HYPOTHESIS_MESSAGES_MAX, WorkingMemory, hypothesis_id

from tests.fakes.agent import T0, make_tools, msg

STATEMENTS = [f"User statement number {i}" + " and more detail" * i for i in range(8)]
CONVERSATIONS = ["c1", "c2", "c3"]

note_op = st.tuples(st.just("note"), st.sampled_from(STATEMENTS), st.sampled_from(CONVERSATIONS), st.integers(0, 400))
record_op = st.tuples(st.just("record"), st.text(max_size=400))
summary_op = st.tuples(st.just("summary"), st.text(max_size=600))
drop_op = st.tuples(st.just("drop"), st.sampled_from(STATEMENTS))
compact_op = st.tuples(st.just("compact"), st.integers(0, 6000), st.integers(0, 60), st.integers(1, 3000))
persist_op = st.tuples(st.just("persist"))
operations = st.lists(st.one_of(note_op, record_op, summary_op, drop_op, compact_op, persist_op), max_size=80)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(operations)
def test_compaction_never_drops_or_alters_a_hypothesis_and_keeps_the_size_budget(ops: list[tuple]) -> None:
    wm = WorkingMemory()
    live: dict[str, dict] = {}  # the model: what each live hypothesis must look like
    for op in ops:
        kind = op[0]
        if kind == "note":
            _, statement, conv, n = op
            h = wm.note(statement, conv, f"m{n}", (T0 + timedelta(minutes=n)).isoformat())
            live[h.id] = asdict(h)
        elif kind == "record":
            wm.record({"run": op[1], "results": [op[1]] * 3})
        elif kind == "summary":
            wm.summary += op[1]
        elif kind == "drop":
            wm.drop(hypothesis_id(op[1]))
            live.pop(hypothesis_id(op[1]), None)
        elif kind == "persist":  # saved with the run, loaded by the next one
            wm = WorkingMemory.from_row(wm.summary, wm.hypotheses_json(), wm.transcript)
        else:
            _, max_chars, keep, summary_max = op
            before = wm.hypotheses_json()
            wm.compact(keep=keep, summary_max=summary_max, max_chars=max_chars)
            assert wm.hypotheses_json() == before  # nothing dropped, nothing altered, same order
            assert wm.size() <= max_chars or (wm.summary == "" and wm.transcript == [])
            assert len(wm.transcript) <= keep and len(wm.summary) <= summary_max
        assert {h.id: asdict(h) for h in wm.hypotheses} == live


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.lists(
        st.tuples(st.text(min_size=1, max_size=200), st.integers(0, 30), st.sampled_from(CONVERSATIONS)),
        max_size=120,
    ),
    st.lists(st.text(max_size=300), max_size=40),
)
def test_with_hypotheses_bounded_by_the_tool_layer_the_size_budget_always_holds(
    notes: list[tuple[str, int, str]], runs: list[str]
) -> None:
    budget = 6000
    original = tools_module.HYPOTHESES_MAX_CHARS
    tools_module.HYPOTHESES_MAX_CHARS = budget * 3 // 4  # the same rule as the defaults, scaled down
    try:
        messages = [msg(f"message-{i:03d}-" + "x" * 40, "text", conv) for i in range(31) for conv in ["c1"]]
        tools = make_tools(messages)
        for statement, i, _ in notes:
            if statement.strip():
                tools.note_hypothesis(statement, [messages[i].message_id])
        for run in runs:
            tools.working.record({"results": [run]})
            tools.working.summary += run
        before = tools.working.hypotheses_json()
        tools.working.compact(max_chars=budget)
        assert tools.working.hypotheses_json() == before
        assert tools.working.size() <= budget
    finally:
        tools_module.HYPOTHESES_MAX_CHARS = original


def test_a_note_that_does_not_fit_is_refused_and_says_what_to_do(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(tools_module, "HYPOTHESES_MAX", 2)
    tools = make_tools([msg("m1", "x"), msg("m2", "y"), msg("m3", "z")])
    assert tools.note_hypothesis("User likes jazz", ["m1"]).startswith("Hypothesis")
    assert tools.note_hypothesis("User likes chess", ["m2"]).startswith("Hypothesis")
    refused = tools.note_hypothesis("User likes tea", ["m3"])
    assert refused.startswith("Refused: Working memory has no room")
    assert "drop_hypothesis" in refused and "create_memory" in refused
    assert tools.note_hypothesis("User likes jazz", ["m3"]).startswith("Hypothesis")  # strengthening still fits


def test_a_hypothesis_counts_observations_conversations_and_first_and_last_seen() -> None:
    wm = WorkingMemory()
    wm.note("User is a nurse", "c1", "m1", "2026-01-02T00:00:00+00:00")
    wm.note("User is a nurse", "c1", "m2", "2026-01-01T00:00:00+00:00")
    h = wm.note("user is  a NURSE", "c2", "m3", "2026-01-03T00:00:00+00:00")  # same statement, other spacing
    wm.note("User is a nurse", "c2", "m3", "2026-01-09T00:00:00+00:00")  # the same message again: no repetition
    assert (h.count, h.conversations, h.message_ids) == (3, ["c1", "c2"], ["m1", "m2", "m3"])
    assert (h.first_seen, h.last_seen) == ("2026-01-01T00:00:00+00:00", "2026-01-03T00:00:00+00:00")


def test_message_and_conversation_ids_per_hypothesis_are_bounded_but_the_count_keeps_counting() -> None:
    wm = WorkingMemory()
    for i in range(HYPOTHESIS_MESSAGES_MAX + 5):
        h = wm.note("User likes tea", f"c{i}", f"m{i}", T0.isoformat())
    assert h.count == HYPOTHESIS_MESSAGES_MAX + 5
    assert len(h.message_ids) == len(h.conversations) == HYPOTHESIS_MESSAGES_MAX


def test_stale_hypotheses_are_those_not_seen_within_the_horizon() -> None:
    wm = WorkingMemory()
    old = wm.note("User likes jazz", "c1", "m1", T0.isoformat())
    fresh = wm.note("User likes tea", "c1", "m2", (T0 + timedelta(days=20)).isoformat())
    assert wm.stale(T0 + timedelta(days=31), timedelta(days=30)) == [old]
    assert fresh not in wm.stale(T0 + timedelta(days=49), timedelta(days=30))
