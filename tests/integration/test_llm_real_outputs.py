"""What a real small model did to the llm policy (`make eval-llm-local`: Qwen2.5-Coder 0.5B
Instruct on llama-cpp-python's server with the model's own chat template), replayed by the
scripted server against the real PostgreSQL: each output goes through the loop without breaking
the run or committing anything bogus. See docs/quality.md, "The llm policy against a real local
model"."""

from __future__ import annotations

import json

import asyncpg
from memwright.agent.llm import MAX_COMPLETION_TOKENS

from tests.fakes.llm_server import FakeLlm, text, tool_results
from tests.integration.helpers import sweep
from tests.integration.test_llm_runs import llm_policy, run_once


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
