"""examples/openai_agents against the real services: ingest producing to the real Kafka, the api on
the real PostgreSQL, the model replaced by the scripted OpenAI-compatible server (the SDK's real
chat completions client talks to it over HTTP). The user's block reaches the model's system
message, an unchanged block costs a 304, each user turn reaches ingest and is then found by the
message status route; when memwright is down the turn goes on without memory, and a refusal
(another user's token) stops it."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import asyncpg
import pytest
from memwright import metrics
from memwright.adapters.openai_agents import MemwrightSession, user_text
from memwright.client import MemwrightClient, MemwrightError

from tests.fakes.llm_server import FakeLlm, text
from tests.integration.conftest import TurnServices
from tests.integration.test_api_memories import agent_memory, curate

EXAMPLE = Path(__file__).parents[2] / "examples" / "openai_agents" / "main.py"


def load_example() -> ModuleType:
    spec = importlib.util.spec_from_file_location("example_openai_agents", EXAMPLE)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


def system_prompt(request: dict[str, object]) -> str:
    messages = request["messages"]
    assert isinstance(messages, list)
    [system] = [m["content"] for m in messages if m["role"] == "system"]
    return str(system)


@pytest.fixture
def example_env(turn_services: TurnServices, monkeypatch: pytest.MonkeyPatch) -> TurnServices:
    monkeypatch.setenv("MEMWRIGHT_API_URL", turn_services.api_url)
    monkeypatch.setenv("MEMWRIGHT_INGEST_URL", turn_services.ingest_url)
    monkeypatch.setenv("MEMWRIGHT_TOKEN", turn_services.token("alice"))
    monkeypatch.setenv("OPENAI_API_KEY", "offline")
    return turn_services


async def test_the_example_puts_the_block_in_the_instructions_and_sends_each_user_turn_to_ingest(
    example_env: TurnServices, db: asyncpg.Pool, monkeypatch: pytest.MonkeyPatch
) -> None:
    memory_id, _ = await agent_memory(db, "alice")  # alice already has a memory
    turns = ["How far is it from Paris to Lyon?", "I'm a vegetarian, by the way"]
    not_modified = metrics.API_CONTEXT_READS.labels("not_modified")
    before = not_modified._value.get()
    async with FakeLlm() as llm:
        monkeypatch.setenv("OPENAI_BASE_URL", llm.base_url)
        llm.push(text("About 390 km."), text("Noted."))
        answers = await load_example().converse("alice", "trip", turns, "fake-model")

    assert answers == ["About 390 km.", "Noted."]
    first, second = (system_prompt(r) for r in llm.requests)
    assert first.startswith("You are a helpful assistant.")
    assert '<user_memories user="alice" count="1">' in first and memory_id in first and "metric" in first
    assert second == first and not_modified._value.get() == before + 1  # the second turn's block: a 304

    signals = await example_env.sweep(len(turns))
    assert [(s.user_id, s.conversation_id, s.text) for s in signals] == [("alice", "trip", t) for t in turns]
    async with MemwrightClient(example_env.api_url, example_env.token("alice")) as client:
        for s in signals:
            status = await client.message_status("alice", s.message_id)
            assert (status.stage, status.outcome) == ("swept", "pending")
        await curate(db)
        assert (await client.message_status("alice", signals[0].message_id)).stage == "curated"


async def test_a_turn_saved_twice_is_one_signal_and_only_user_items_are_sent(example_env: TurnServices) -> None:
    async with MemwrightClient(example_env.api_url, example_env.token(), example_env.ingest_url) as client:
        session = MemwrightSession("s1", client, "alice")
        await session.add_items([{"role": "user", "content": "Never use emoji"}])
        await session.add_items([{"role": "assistant", "content": "Understood."}])
        assert await session.pop_item() == {"role": "assistant", "content": "Understood."}
        other = MemwrightSession("s1", client, "alice")  # another process saving the same turn again
        await other.add_items([{"role": "user", "content": "Never use emoji"}])
    signals = await example_env.sweep(2)  # ingest got it twice: Kafka is at-least-once
    assert len({s.message_id for s in signals}) == 1  # one message id: stored once
    assert await example_env.db.fetchval("SELECT count(*) FROM messages WHERE user_id = 'alice'") == 1
    assert user_text({"role": "user", "content": [{"type": "input_text", "text": "hi"}]}) == "hi"
    assert user_text({"type": "function_call_output", "output": "x"}) is None


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
    monkeypatch.setenv("MEMWRIGHT_TOKEN", example_env.token("mallory"))  # mallory's token, alice's turn
    async with FakeLlm() as llm:
        monkeypatch.setenv("OPENAI_BASE_URL", llm.base_url)
        with pytest.raises(MemwrightError) as refused:
            await load_example().converse("alice", "c1", ["hi"], "fake-model")
    assert refused.value.status == 403 and llm.requests == []
