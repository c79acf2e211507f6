"""What a real small model did to the llm policy (`make eval-llm-local`: Qwen2.5-Coder 0.5B
Instruct on llama-cpp-python's server with the model's own chat template), replayed by the
scripted server against the real PostgreSQL: each output goes through the loop without breaking
the run or committing anything bogus. See docs/quality.md, "The llm policy against a real local
model"."""

from __future__ import annotations

import json
from datetime import UTC, datetime

import asyncpg
from memwright.agent.llm import MAX_COMPLETION_TOKENS, LlmPolicy
from memwright.events import Signal
from memwright.settings import CuratorSettings
from memwright.store.sweeps import write_window

from tests.fakes.llm_server import FakeLlm, cut, text, tool_results
from tests.integration.helpers import sweep
from tests.integration.test_llm_runs import run_once


def llm_policy(llm: FakeLlm, max_steps: int | None = None) -> LlmPolicy:
    """Every window goes to the model (the local classifier's skip is tested elsewhere)."""
    settings = CuratorSettings(
        pg_dsn="unused", policy="llm", llm_base_url=llm.base_url, llm_model="fake", llm_skip_one_offs=False
    )
    return LlmPolicy(settings, timeout_s=5.0, max_retries=0, max_steps=max_steps)


def qwen_call(name: str, arguments: dict[str, object] | str) -> str:
    """A tool call as Qwen's chat template asks for it, left in the text by a server that does not
    parse it (llama-cpp-python with the GGUF's template)."""
    args = arguments if isinstance(arguments, str) else json.dumps(arguments)
    return f'<tool_call>\n{{"name": "{name}", "arguments": {args}}}\n</tool_call>'


async def committed(db: asyncpg.Pool) -> tuple[list[str], int, str]:
    """(memory texts, runs committed, the agent's summary) after the runs."""
    texts = [r["text"] for r in await db.fetch("SELECT text FROM memories ORDER BY created_at")]
    runs = await db.fetchval("SELECT count(*) FROM curation_runs WHERE status = 'committed'")
    summary = await db.fetchval("SELECT summary FROM agent_state") or ""
    return texts, runs, summary


async def test_a_tool_call_written_as_text_is_run_and_its_result_goes_back(db: asyncpg.Pool) -> None:
    [mid] = await sweep(db, "alice", "Always answer in metric units.")
    async with FakeLlm() as llm:
        llm.push(
            text(qwen_call("create_memory", {"text": "The user wants answers in metric units.", "evidence": [mid]})),
            lambda request: text(f"Saved. ({tool_results(request)[0][:15]})"),
        )
        assert await run_once(db, llm_policy(llm)) == "committed"
        second = llm.requests[1]["messages"]
    texts, runs, _ = await committed(db)
    assert texts == ["The user wants answers in metric units."] and runs == 1
    assert await db.fetchval("SELECT message_id FROM memory_evidence") == mid
    # the model's turn goes back as it wrote it, then the result of its call
    assert second[-2] == {
        "role": "assistant",
        "content": qwen_call("create_memory", {"text": "The user wants answers in metric units.", "evidence": [mid]}),
    }
    assert second[-1]["role"] == "tool" and second[-1]["content"].startswith("Created memory")


async def test_every_completion_is_capped(db: asyncpg.Pool) -> None:
    await sweep(db, "alice", "Always answer in metric units.")
    async with FakeLlm() as llm:
        llm.push(text("Nothing to remember."))
        assert await run_once(db, llm_policy(llm)) == "committed"
    assert [r["max_tokens"] for r in llm.requests] == [MAX_COMPLETION_TOKENS]


async def test_a_reply_that_is_only_a_bare_json_call_is_run_not_kept_as_the_summary(db: asyncpg.Pool) -> None:
    # Qwen2.5-Coder 0.5B dropped the <tool_call> tags: its whole reply was the JSON object
    [mid] = await sweep(db, "alice", "I'm vegetarian, so no meat in any recipe please.")
    bare = json.dumps({"name": "create_memory", "arguments": {"text": "The user is vegetarian.", "evidence": [mid]}})
    async with FakeLlm() as llm:
        llm.push(text(bare), text("Remembered that the user is vegetarian."))
        assert await run_once(db, llm_policy(llm)) == "committed"
    texts, runs, summary = await committed(db)
    assert texts == ["The user is vegetarian."] and runs == 1
    assert summary == "Remembered that the user is vegetarian."  # not the JSON


async def test_real_malformed_calls_come_back_as_invalid_results_and_commit_nothing(db: asyncpg.Pool) -> None:
    [mid] = await sweep(db, "alice", "What's a closure in JavaScript?")
    # what the model wrote, verbatim but for the message id: the schema echoed as arguments, the
    # evidence outside the arguments; then an unknown tool and a <tool_call> cut short
    echoed = (
        '{"name": "list_memories", "arguments": {"type": "object", "properties": '
        '{"user_id": {"type": "string", "description": "the user id"}}}}'
    )
    outside = (
        '{"name": "create_memory", "arguments": {"text": "A function that remembers variables from where it '
        f'was defined..."}}, "evidence": ["{mid}"]}}'
    )
    async with FakeLlm() as llm:
        llm.push(
            text(echoed),
            text(outside),
            text(qwen_call("remember", {"text": "closures", "evidence": [mid]})),
            text('<tool_call>\n{"name": "create_memory", "arguments": {"text": "A closure is'),
            text("Nothing worth remembering."),
        )
        assert await run_once(db, llm_policy(llm)) == "committed"
        results = [tool_results(r)[-1] for r in llm.requests[1:]]
    assert "unknown argument(s) type, properties" in results[0]
    assert "missing argument(s) evidence" in results[1]
    assert "there is no tool 'remember'" in results[2]
    assert "not valid JSON" in results[3]
    texts, runs, summary = await committed(db)
    assert texts == [] and runs == 1 and summary == "Nothing worth remembering."
    assert await db.fetchval("SELECT count(*) FROM memory_audit") == 0


async def test_prose_that_mentions_a_call_is_an_answer_not_a_call(db: asyncpg.Pool) -> None:
    """The boundary of the bare-JSON reading: only a reply made of calls is read as calls."""
    [mid] = await sweep(db, "alice", "Thanks, that worked.")
    call = json.dumps({"name": "create_memory", "arguments": {"text": "x", "evidence": [mid]}})
    async with FakeLlm() as llm:
        llm.push(text(f"I could call {call} but will not."))
        assert await run_once(db, llm_policy(llm)) == "committed"
        assert len(llm.requests) == 1
    texts, runs, _ = await committed(db)
    assert texts == [] and runs == 1


async def test_an_answer_cut_at_max_tokens_is_not_kept_as_the_summary(db: asyncpg.Pool) -> None:
    await sweep(db, "alice", "Can you explain recursion?")
    async with FakeLlm() as llm:
        llm.push(cut("Recursion is when a function calls itself. " * 80))
        assert await run_once(db, llm_policy(llm)) == "committed"
    texts, runs, summary = await committed(db)
    assert texts == [] and runs == 1
    assert "Recursion is" not in summary and "not kept" in summary


async def test_what_it_called_in_the_pipeline_is_refused_and_the_run_stops_at_its_bound(db: asyncpg.Pool) -> None:
    # every run of `make eval-llm-local` went like this: the assistant's message cited as evidence,
    # a message id given to drop_hypothesis, a rendered context line cited as an id; then the bound
    now = datetime.now(UTC)
    said = [Signal("alice", "u1", "c1", "make that shorter", accepted_at=now)]
    said.append(Signal("alice", "a1", "c1", "Sure, here it is.", role="assistant", accepted_at=now))
    async with db.acquire() as conn:
        await write_window(conn, "alice", said)
    line = "conversation c1, 2026-12-03T17:18:04+00:00, user: make that shorter"
    calls = [
        {"name": "create_memory", "arguments": {"text": "Sure, here it is.", "evidence": ["a1"]}},
        {"name": "drop_hypothesis", "arguments": {"hypothesis_id": "u1", "reason": "done"}},
        {"name": "create_memory", "arguments": {"text": "Make it shorter.", "evidence": [line]}},
    ]
    async with FakeLlm() as llm:
        llm.push(*(text(json.dumps(c)) for c in calls))
        assert await run_once(db, llm_policy(llm, max_steps=3)) == "committed"
        results = [tool_results(r)[-1] for r in llm.requests[1:]]
    assert results[0].startswith("Refused: Evidence a1 is not a message written by the user")
    assert results[1] == "Refused: No hypothesis u1."
    texts, runs, summary = await committed(db)
    assert texts == [] and runs == 1 and summary == "stopped after 3 model calls"
    assert await db.fetchval("SELECT count(*) FROM memory_audit") == 0


async def test_the_same_change_asked_for_twice_in_a_run_is_made_once(db: asyncpg.Pool) -> None:
    # in the pipeline it created "I had sushi last night and it was amazing" twice in a row
    [mid] = await sweep(db, "alice", "I had sushi last night and it was amazing")
    call = {
        "name": "create_memory",
        "arguments": {"text": "I had sushi last night and it was amazing", "evidence": [mid]},
    }
    again = {
        "name": "create_memory",
        "arguments": {"evidence": [mid], "text": "I had sushi last night and it was amazing"},
    }
    async with FakeLlm() as llm:
        llm.push(text(json.dumps(call)), text(json.dumps(again)), text("Done."))
        assert await run_once(db, llm_policy(llm)) == "committed"
        second = tool_results(llm.requests[2])[-1]
    assert second.startswith("Invalid call: already done in this run (Created memory")
    texts, runs, _ = await committed(db)
    assert texts == ["I had sushi last night and it was amazing"] and runs == 1
