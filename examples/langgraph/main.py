"""A LangGraph assistant with memwright memory: memory node -> model node, one turn per argument.

    export MEMWRIGHT_API_URL=http://localhost:8082 MEMWRIGHT_INGEST_URL=http://localhost:8081
    export MEMWRIGHT_TOKEN=$(.venv/bin/memwright token alice --scope memories:read signals:write)
    export OPENAI_BASE_URL=... OPENAI_API_KEY=...      # any OpenAI-compatible chat completions endpoint
    .venv/bin/python examples/langgraph/main.py --user alice --conversation trip \
        "Always answer in metric units" "How far is it from Paris to Lyon?"

At the start of every turn the memory node (memwright.adapters.langgraph) sends the user's new
message to ingest and puts the user's start-of-turn block in the state; the model node puts it in
the system message. The model is called with the openai SDK (chat completions), so any
OpenAI-compatible server works and nothing else is needed; the conversation is kept by LangGraph's
checkpointer under the thread id.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
from dataclasses import dataclass
from typing import Any

from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, SystemMessage
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import END, START, StateGraph
from memwright.adapters.langgraph import MemoryState, memwright_node, with_memory
from memwright.client import MemwrightClient
from openai import AsyncOpenAI

INSTRUCTIONS = "You are a helpful assistant. Keep answers short."
ROLES = {SystemMessage: "system", HumanMessage: "user", AIMessage: "assistant"}


@dataclass
class Turn:
    """The run's context (LangGraph Runtime context): whose turn it is."""

    user_id: str


def _env(name: str) -> str:
    value = os.environ.get(name)
    if not value:
        sys.exit(f"{name} is not set; see the top of {__file__}")
    return value


def build_graph(client: MemwrightClient, model: str) -> Any:
    llm = AsyncOpenAI()

    async def call_model(state: MemoryState) -> dict[str, Any]:
        messages: list[BaseMessage] = with_memory(INSTRUCTIONS, state)
        reply = await llm.chat.completions.create(
            model=model,
            messages=[{"role": ROLES[type(m)], "content": m.text} for m in messages],  # type: ignore[misc]
        )
        return {"messages": [AIMessage(reply.choices[0].message.content or "")]}

    builder = StateGraph(MemoryState, context_schema=Turn)
    builder.add_node("memory", memwright_node(client))
    builder.add_node("model", call_model)
    builder.add_edge(START, "memory")
    builder.add_edge("memory", "model")
    builder.add_edge("model", END)
    return builder.compile(checkpointer=InMemorySaver())


async def converse(user: str, conversation: str, turns: list[str], model: str) -> list[str]:
    """Run the turns as one conversation (one thread); return the assistant's answers."""
    client = MemwrightClient(_env("MEMWRIGHT_API_URL"), _env("MEMWRIGHT_TOKEN"), _env("MEMWRIGHT_INGEST_URL"))
    async with client:
        graph = build_graph(client, model)
        answers = []
        for text in turns:
            state = await graph.ainvoke(
                {"messages": [HumanMessage(text)]},
                {"configurable": {"thread_id": conversation}},
                context=Turn(user),
            )
            answers.append(state["messages"][-1].text)
        return answers


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--user", required=True, help="the user's id (the token must be theirs, or a service's)")
    parser.add_argument("--conversation", default="example", help="the conversation (LangGraph thread) id")
    parser.add_argument("--model", default=os.environ.get("OPENAI_MODEL", "gpt-4o-mini"), help="the model name")
    parser.add_argument("turns", nargs="+", help="the user's turns, in order")
    args = parser.parse_args(argv)
    for answer in asyncio.run(converse(args.user, args.conversation, args.turns, args.model)):
        print(answer)


if __name__ == "__main__":
    main()
