"""The LLM policy with the REAL openai client against a local scripted OpenAI-compatible server
(tests/fakes/llm_server.py): tool calling over the same tool layer, refusals as tool results,
malformed calls handled, bounded loops, retries, timeouts and metrics."""

from __future__ import annotations

import inspect
import json
import re

import pytest
from memwright.agent.llm import TOOLS, LlmPolicy, LlmUnavailable, call_tool
from memwright.agent.prompts import SYSTEM_PROMPT
from memwright.agent.tools import MemoryTools
from memwright.settings import CuratorSettings
from prometheus_client import REGISTRY

from tests.fakes.agent import conversation, make_tools, memory, msg
from tests.fakes.llm_server import FakeLlm, error, slow, text, tool_call, tool_calls, tool_results


def settings(base_url: str, skip_one_offs: bool = False) -> CuratorSettings:
    """The loop's tests send every window to the model; the skip has its own tests below."""
    return CuratorSettings(
        pg_dsn="unused",
        policy="llm",
        llm_base_url=base_url,
        llm_model="fake-model",
        llm_skip_one_offs=skip_one_offs,
    )


def policy(llm: FakeLlm, **kwargs: object) -> LlmPolicy:
    return LlmPolicy(settings(llm.base_url), timeout_s=5.0, max_retries=0, **kwargs)  # type: ignore[arg-type]


def sample(name: str, labels: dict[str, str]) -> float:
    return REGISTRY.get_sample_value(name, labels) or 0.0


def test_the_tool_schemas_mirror_the_memory_tools() -> None:
    for name, spec in TOOLS.items():
        method = getattr(MemoryTools, name)
        params = [p for p in inspect.signature(method).parameters.values() if p.name != "self"]
        assert set(spec.properties) == {p.name for p in params}, name
        required = {p.name for p in params if p.default is inspect.Parameter.empty}
        assert set(spec.required) == required, name
        if name != "list_memories":
            assert spec.schema()["function"]["parameters"]["additionalProperties"] is False


def test_the_system_prompt_states_the_high_bar() -> None:
    for phrase in (
        "note_hypothesis",
        "two DIFFERENT",
        "consolidate_memories",
        "delete_memory",
        "update_memory",
        "cite evidence",
        "never change or delete",
    ):
        assert phrase in SYSTEM_PROMPT, phrase


async def test_an_explicit_preference_becomes_a_memory_and_the_model_sees_context_and_tools() -> None:
    tools = make_tools(conversation("c1", "Always answer in metric units.", "How far is Lyon?"))
    async with FakeLlm() as llm:
        llm.push(
            tool_call("create_memory", text="Always answer in metric units.", evidence=["m1"]),
            text("Remembered the metric preference from m1."),
        )
        await policy(llm).run(tools, list(tools.shown.values()))
        first, second = llm.requests
    assert first["model"] == "fake-model"
    assert {t["function"]["name"] for t in first["tools"]} == set(TOOLS)
    assert first["messages"][0] == {"role": "system", "content": SYSTEM_PROMPT}
    assert "[m1] conversation c1" in first["messages"][1]["content"]
    assert tool_results(second) == [f"Created memory {tools.changes[0].memory_id}."]
    assert [m.text for m in tools.memories.values()] == ["Always answer in metric units."]
    assert tools.working.summary.endswith("Remembered the metric preference from m1.")


async def test_tool_calls_run_off_the_event_loop(monkeypatch: pytest.MonkeyPatch) -> None:
    """search_similar embeds with the local model: CPU-bound, so not on the curator's event loop."""
    import threading

    from memwright.agent import llm as llm_module

    threads: list[int] = []
    original = llm_module.call_tool

    def spy(*args: object) -> tuple[str, str]:
        threads.append(threading.get_ident())
        return original(*args)  # type: ignore[arg-type]

    monkeypatch.setattr(llm_module, "call_tool", spy)
    tools = make_tools(conversation("c1", "Always answer in metric units."))
    async with FakeLlm() as llm:
        llm.push(tool_call("search_similar", text="metric units"), text("Nothing to add."))
        await policy(llm).run(tools, list(tools.shown.values()))
    assert threads and threading.get_ident() not in threads


async def test_a_full_budget_reaches_the_model_as_a_tool_result_and_the_model_consolidates() -> None:
    a = memory("Never use emojis in replies.", evidence=["old-1"])
    b = memory("Never use emojis or exclamation marks in replies.", evidence=["old-2"])
    tools = make_tools(conversation("c2", "From now on, keep answers under 200 words."), [a, b], budget=2)

    def consolidate_the_named_pair(request: dict) -> object:
        [refusal] = tool_results(request)
        assert refusal.startswith("Refused: You are out of room: 2 of 2")
        for option in ("consolidate_memories", "delete_memory", "update_memory"):
            assert option in refusal
        pair = re.search(r"- (\S+) \+ (\S+) \(similarity", refusal)
        assert pair is not None, refusal
        return tool_call(
            "consolidate_memories",
            memory_ids=[pair.group(1), pair.group(2)],
            text="Never use emojis or exclamation marks in replies.",
            evidence=["m1"],
            reason="the two say the same thing",
        )

    async with FakeLlm() as llm:
        llm.push(
            tool_call("create_memory", text="Keep answers under 200 words.", evidence=["m1"]),
            consolidate_the_named_pair,
            tool_call("create_memory", text="Keep answers under 200 words.", evidence=["m1"]),
            text("Merged the two emoji memories to make room, then remembered the length limit."),
        )
        await policy(llm).run(tools, list(tools.shown.values()))
        assert len(llm.requests) == 4
        assert tool_results(llm.requests[2])[-1].startswith("Consolidated")
        assert tool_results(llm.requests[3])[-1].startswith("Created memory")
    assert tools.agent_memory_count() == 2
    texts = sorted(m.text for m in tools.memories.values())
    assert texts == ["Keep answers under 200 words.", "Never use emojis or exclamation marks in replies."]
    merged = next(m for m in tools.memories.values() if "emoji" in m.text)
    assert merged.evidence == ["m1", "old-1", "old-2"]  # consolidation keeps the union of the receipts
    assert [c.action for c in tools.changes] == ["delete", "delete", "consolidate", "create"]


async def test_invalid_evidence_is_refused_and_the_model_is_told_why() -> None:
    tools = make_tools(conversation("c1", "Please never suggest recipes with peanuts."))
    async with FakeLlm() as llm:
        llm.push(
            tool_call("create_memory", text="User is allergic to peanuts.", evidence=["m999"]),
            tool_call("create_memory", text="Never suggest recipes with peanuts.", evidence=["bob-m1"]),
            text("done"),
        )
        await policy(llm).run(tools, list(tools.shown.values()))
        unknown = tool_results(llm.requests[1])[-1]
        foreign = tool_results(llm.requests[2])[-1]
    assert unknown.startswith("Refused: Evidence m999 is not among this user's messages")
    assert foreign.startswith("Refused: Evidence bob-m1 is not among this user's messages")
    assert tools.changes == [] and tools.memories == {}


async def test_malformed_tool_calls_become_results_that_say_what_was_wrong() -> None:
    tools = make_tools(conversation("c1", "Always answer in metric units."))
    async with FakeLlm() as llm:
        llm.push(
            tool_calls(
                ("create_memory", '{"text": "Always answer in metric units.", "evidence": [m1]'),  # not JSON
                ("create_memory", {"text": "Always answer in metric units.", "evidence": "m1"}),  # wrong type
                ("create_memory", {"text": "Always answer in metric units."}),  # missing evidence
                ("remember_forever", {"text": "x"}),  # no such tool
                ("create_memory", {"text": "x", "evidence": ["m1"], "priority": "high"}),  # unknown argument
            ),
            tool_call("create_memory", text="Always answer in metric units.", evidence=["m1"]),
            text("done"),
        )
        await policy(llm).run(tools, list(tools.shown.values()))
        results = tool_results(llm.requests[1])
    assert len(results) == 5
    assert results[0].startswith("Invalid call: the arguments for create_memory are not valid JSON")
    assert "evidence must be an array of strings" in results[1]
    assert "missing argument(s) evidence" in results[2]
    assert results[3].startswith("Invalid call: there is no tool 'remember_forever'")
    assert "unknown argument(s) priority" in results[4]
    assert [m.text for m in tools.memories.values()] == ["Always answer in metric units."]
    assert sample("memwright_curator_tool_calls_total", {"tool": "unknown", "result": "invalid"}) >= 1


async def test_the_tool_loop_is_bounded() -> None:
    tools = make_tools(conversation("c1", "hello"))
    async with FakeLlm() as llm:
        llm.push(*[tool_call("list_memories") for _ in range(10)])
        results = await policy(llm, max_steps=3).run(tools, list(tools.shown.values()))
        assert len(llm.requests) == 3
    assert results[-1] == "stopped after 3 model calls"


async def test_tokens_completions_and_tool_calls_are_counted() -> None:
    before = {
        "prompt": sample("memwright_curator_llm_tokens_total", {"kind": "prompt"}),
        "completion": sample("memwright_curator_llm_tokens_total", {"kind": "completion"}),
        "ok": sample("memwright_curator_llm_calls_total", {"outcome": "ok"}),
        "list": sample("memwright_curator_tool_calls_total", {"tool": "list_memories", "result": "ok"}),
    }
    tools = make_tools(conversation("c1", "hello"))
    async with FakeLlm() as llm:
        llm.push(tool_call("list_memories"), text("nothing to remember"))
        await policy(llm).run(tools, list(tools.shown.values()))
    assert sample("memwright_curator_llm_tokens_total", {"kind": "prompt"}) - before["prompt"] == 200
    assert sample("memwright_curator_llm_tokens_total", {"kind": "completion"}) - before["completion"] == 40
    assert sample("memwright_curator_llm_calls_total", {"outcome": "ok"}) - before["ok"] == 2
    assert sample("memwright_curator_tool_calls_total", {"tool": "list_memories", "result": "ok"}) - before["list"] == 1


async def test_a_transient_500_is_retried_by_the_client() -> None:
    tools = make_tools(conversation("c1", "Never use emojis."))
    async with FakeLlm() as llm:
        llm.push(error(500), tool_call("create_memory", text="Never use emojis.", evidence=["m1"]), text("done"))
        await LlmPolicy(settings(llm.base_url), timeout_s=5.0, max_retries=2).run(tools, list(tools.shown.values()))
        assert len(llm.requests) == 3
    assert [m.text for m in tools.memories.values()] == ["Never use emojis."]


async def test_persistent_500s_raise_after_the_retries() -> None:
    tools = make_tools(conversation("c1", "Never use emojis."))
    errors = sample("memwright_curator_llm_calls_total", {"outcome": "error"})
    async with FakeLlm() as llm:
        llm.push(error(500), error(502), error(503))
        with pytest.raises(LlmUnavailable, match="failed after retries"):
            await LlmPolicy(settings(llm.base_url), timeout_s=5.0, max_retries=2).run(tools, list(tools.shown.values()))
        assert len(llm.requests) == 3
    assert sample("memwright_curator_llm_calls_total", {"outcome": "error"}) - errors == 1


async def test_a_slow_endpoint_times_out_and_raises() -> None:
    tools = make_tools(conversation("c1", "Never use emojis."))
    timeouts = sample("memwright_curator_llm_calls_total", {"outcome": "timeout"})
    async with FakeLlm() as llm:
        llm.push(slow(3.0, text("too late")), slow(3.0, text("too late")))
        with pytest.raises(LlmUnavailable, match="timed out"):
            await LlmPolicy(settings(llm.base_url), timeout_s=0.3, max_retries=1).run(tools, list(tools.shown.values()))
        assert len(llm.requests) == 2
    assert sample("memwright_curator_llm_calls_total", {"outcome": "timeout"}) - timeouts == 1


async def test_a_weak_signal_is_noted_and_the_hypothesis_reaches_the_next_run() -> None:
    tools = make_tools(conversation("c1", "I'm a nurse, so nights are rough."))
    async with FakeLlm() as llm:
        llm.push(tool_call("note_hypothesis", statement="User is a nurse", evidence=["m1"]), text("noted"))
        await policy(llm).run(tools, list(tools.shown.values()))
        [h] = tools.working.hypotheses
        # next run, another conversation: the context lists the hypothesis and its citable message
        later = make_tools(
            [*tools.shown.values(), msg("m2", "I'm a nurse, any sleep tips?", "c2")], working=tools.working
        )
        llm.push(
            tool_call("note_hypothesis", statement="User is a nurse", evidence=["m2"]),
            tool_call("create_memory", text="User is a nurse.", evidence=["m1", "m2"]),
            tool_call("drop_hypothesis", hypothesis_id=h.id, reason="promoted"),
            text("promoted"),
        )
        await policy(llm).run(later, [later.shown["m2"]])
        context = llm.requests[2]["messages"][1]["content"]
    assert h.id in context and "[m1] conversation c1" in context
    assert [m.evidence for m in later.memories.values()] == [["m1", "m2"]]
    assert later.working.hypotheses == []


def test_call_tool_clamps_search_limits() -> None:
    tools = make_tools([], [memory(f"Memory number {i}") for i in range(30)])
    result, outcome = call_tool(tools, "search_similar", json.dumps({"text": "Memory", "limit": 500}))
    assert outcome == "ok" and result.count("\n") == 19


# ---- the local classifier's skip (on by default) ------------------------------------------


def test_the_skip_is_on_by_default() -> None:
    assert CuratorSettings(pg_dsn="unused").llm_skip_one_offs is True


async def test_a_window_of_one_offs_with_no_hypothesis_makes_no_model_call_and_is_counted() -> None:
    tools = make_tools(conversation("c1", "How far is Lyon from Geneva?", "Thanks, that works."))
    before = sample("memwright_curator_llm_windows_skipped_total", {})
    async with FakeLlm() as llm:
        results = await LlmPolicy(settings(llm.base_url, skip_one_offs=True), timeout_s=5.0, max_retries=0).run(
            tools, list(tools.shown.values())
        )
        assert llm.requests == []
    assert results == [] and tools.changes == []
    assert sample("memwright_curator_llm_windows_skipped_total", {}) - before == 1


@pytest.mark.parametrize(
    "text",
    [
        "Always answer in metric units.",  # a pattern's explicit preference
        "Horror films are a hard no for me, I can't stand them.",  # the classifier's standing one
        "Forget that I live in Lisbon.",  # a request to forget
    ],
)
async def test_a_window_with_something_to_act_on_goes_to_the_model(text: str) -> None:
    tools = make_tools(conversation("c1", "How far is Lyon from Geneva?", text))
    async with FakeLlm() as llm:
        llm.push(text_answer())
        await LlmPolicy(settings(llm.base_url, skip_one_offs=True), timeout_s=5.0, max_retries=0).run(
            tools, list(tools.shown.values())
        )
        assert len(llm.requests) == 1, text


async def test_a_one_off_close_to_a_held_hypothesis_goes_to_the_model() -> None:
    tools = make_tools(conversation("c2", "what's a good stretch for a sore lower back?"))
    tools.working.note("User has a sore lower back from sitting at a desk all day", "c1", "m0", "2026-01-01")
    async with FakeLlm() as llm:
        llm.push(text_answer())
        await LlmPolicy(settings(llm.base_url, skip_one_offs=True), timeout_s=5.0, max_retries=0).run(
            tools, list(tools.shown.values())
        )
        assert len(llm.requests) == 1


def text_answer() -> object:
    return text("nothing to remember")


def test_a_window_of_long_messages_is_shown_within_the_budget_head_and_tail() -> None:
    from memwright.agent.prompts import MESSAGES_CHARS, render_context

    long = "I keep kosher. " + "x" * 7900 + " Never suggest pork."
    messages = conversation("c1", *[long] * 12)
    rendered = render_context(make_tools(messages), messages)
    assert len(rendered) < MESSAGES_CHARS + 4_000
    assert rendered.count("characters not shown") == 12
    assert rendered.count("I keep kosher.") == 12 and rendered.count("Never suggest pork.") == 12
    short = conversation("c1", "Always answer in metric units.")
    assert "not shown" not in render_context(make_tools(short), short)
