"""examples/langgraph against the real services: ingest producing to the real Kafka, the api on the
real PostgreSQL, the model replaced by the scripted OpenAI-compatible server. The memory node sends
each turn's user message to ingest (once, even over a checkpointed history) and the block reaches
the model's system message; the turn goes on when memwright is down, and stops on a refusal."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import asyncpg
import pytest
from langchain_core.messages import AIMessage, HumanMessage
from memwright.adapters.langgraph import turn_messages
from memwright.client import MemwrightClient, MemwrightError

from tests.fakes.llm_server import FakeLlm, text
from tests.integration.conftest import TurnServices
from tests.integration.test_api_memories import agent_memory, curate

EXAMPLE = Path(__file__).parents[2] / "examples" / "langgraph" / "main.py"


def load_example() -> ModuleType:
    spec = importlib.util.spec_from_file_location("example_langgraph", EXAMPLE)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def system_prompt(request: dict[str, object]) -> str:
    messages = request["messages"]
    assert isinstance(messages, list)
    assert messages[0]["role"] == "system" and all(m["role"] != "system" for m in messages[1:])
    return str(messages[0]["content"])


@pytest.fixture
def example_env(turn_services: TurnServices, monkeypatch: pytest.MonkeyPatch) -> TurnServices:
    monkeypatch.setenv("MEMWRIGHT_API_URL", turn_services.api_url)
    monkeypatch.setenv("MEMWRIGHT_INGEST_URL", turn_services.ingest_url)
    monkeypatch.setenv("MEMWRIGHT_TOKEN", turn_services.token("alice"))
    monkeypatch.setenv("OPENAI_API_KEY", "offline")
    return turn_services


async def test_the_example_sends_each_turn_to_ingest_and_puts_the_block_in_the_system_message(
    example_env: TurnServices, db: asyncpg.Pool, monkeypatch: pytest.MonkeyPatch
) -> None:
    memory_id, _ = await agent_memory(db, "alice")
    turns = ["How far is it from Paris to Lyon?", "I'm a vegetarian, by the way"]
    async with FakeLlm() as llm:
        monkeypatch.setenv("OPENAI_BASE_URL", llm.base_url)
        llm.push(text("About 390 km."), text("Noted."))
        answers = await load_example().converse("alice", "trip", turns, "fake-model")

    assert answers == ["About 390 km.", "Noted."]
    first, second = llm.requests
    for request in (first, second):
        block = system_prompt(request)
        assert block.startswith("You are a helpful assistant.") and memory_id in block and "metric" in block
    # the second request carries the whole conversation (the checkpointer) after the system message
    assert [m["content"] for m in second["messages"][1:]] == [turns[0], "About 390 km.", turns[1]]

    signals = await example_env.sweep(len(turns))  # exactly one signal per turn, none for history
    assert [(s.user_id, s.conversation_id, s.text) for s in signals] == [("alice", "trip", t) for t in turns]
    async with MemwrightClient(example_env.api_url, example_env.token("alice")) as client:
        for s in signals:
            assert (await client.message_status("alice", s.message_id)).stage == "swept"
        await curate(db)
        assert (await client.message_status("alice", signals[1].message_id)).stage == "curated"


def test_a_turn_is_the_human_messages_after_the_last_ai_message() -> None:
    history = [HumanMessage("a"), AIMessage("b"), HumanMessage("c"), HumanMessage("d")]
    assert [m.text for m in turn_messages(history)] == ["c", "d"]
    assert turn_messages([HumanMessage("a"), AIMessage("b")]) == []


async def test_when_memwright_is_down_the_turn_goes_on_without_memory(
    turn_services: TurnServices, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MEMWRIGHT_API_URL", "http://127.0.0.1:9")  # nothing listens on the discard port
    monkeypatch.setenv("MEMWRIGHT_INGEST_URL", "http://127.0.0.1:9")
    monkeypatch.setenv("MEMWRIGHT_TOKEN", turn_services.token("alice"))
    monkeypatch.setenv("OPENAI_API_KEY", "offline")
    async with FakeLlm() as llm:
        monkeypatch.setenv("OPENAI_BASE_URL", llm.base_url)
        llm.push(text("Hello."))
        assert await load_example().converse("alice", "c1", ["hi"], "fake-model") == ["Hello."]
    assert system_prompt(llm.requests[0]) == "You are a helpful assistant. Keep answers short."


async def test_a_refusal_stops_the_turn_with_the_servers_reason(
    example_env: TurnServices, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MEMWRIGHT_TOKEN", example_env.token("mallory"))
    async with FakeLlm() as llm:
        monkeypatch.setenv("OPENAI_BASE_URL", llm.base_url)
        with pytest.raises(MemwrightError) as refused:
            await load_example().converse("alice", "c1", ["hi"], "fake-model")
    assert refused.value.status == 403 and llm.requests == []
