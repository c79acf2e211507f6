"""memwright for LangGraph (`langgraph`, tested with 1.2.22): one node at the start of the turn.

    builder = StateGraph(MemoryState, context_schema=Turn)     # Turn: a dataclass with user_id
    builder.add_node("memory", memwright_node(client))
    builder.add_node("model", call_model)                        # uses with_memory(INSTRUCTIONS, state)
    builder.add_edge(START, "memory"); builder.add_edge("memory", "model"); builder.add_edge("model", END)
    graph = builder.compile(checkpointer=InMemorySaver())
    config = {"configurable": {"thread_id": "c1"}}
    await graph.ainvoke({"messages": [HumanMessage(text)]}, config, context=Turn("alice"))

The node does the turn's two calls: it sends the user's new messages (the human messages after the
last AI message) to ingest, and puts the user's start-of-turn block in the state (`memory_context`);
`with_memory` builds the model's messages with the block in the system message. The node, not a
BaseStore: memwright's memories are written by the user's memory agent from the turns it is sent
(a store's `put` would bypass it), and read as one block per turn, not searched per key.

The user is the run's context `user_id` (LangGraph's Runtime context, attribute or key), else
`configurable.user_id`; the conversation is `configurable.thread_id`. Message ids derive from the
user, the thread and LangGraph's message id, so a turn replayed from a checkpoint is one signal.
When memwright is down the turn goes on without the block and the turn is not sent (a warning is
logged); a refusal (a bad token, another user's id) raises MemwrightError.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from typing import Any

import structlog

from memwright.adapters import is_outage, message_id, missing_framework
from memwright.client import MemwrightClient, MemwrightError

try:
    from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, SystemMessage
    from langchain_core.runnables import RunnableConfig
    from langgraph.graph import MessagesState
    from langgraph.runtime import Runtime
except ImportError as exc:  # pragma: no cover - exercised only without LangGraph installed
    raise missing_framework("LangGraph", "langgraph==1.2.22", "langgraph") from exc

log = structlog.get_logger("memwright.adapters.langgraph")


class MemoryState(MessagesState):
    """MessagesState with the user's start-of-turn block ("" when memwright could not be reached)."""

    memory_context: str


def _user_of(runtime: Runtime[Any], config: RunnableConfig) -> str:
    context = runtime.context
    found = context.get("user_id") if isinstance(context, dict) else getattr(context, "user_id", None)
    found = found or config.get("configurable", {}).get("user_id")
    if not isinstance(found, str) or not found:
        raise ValueError("memwright_node has no user: invoke with context=<something with user_id>")
    return found


def turn_messages(messages: Sequence[BaseMessage]) -> list[HumanMessage]:
    """The user's messages of this turn: the human messages after the last AI message."""
    turn: list[HumanMessage] = []
    for m in messages:
        if isinstance(m, AIMessage):
            turn = []
        elif isinstance(m, HumanMessage):
            turn.append(m)
    return turn


def memwright_node(
    client: MemwrightClient, project_id: str | None = None
) -> Callable[[MemoryState, Runtime[Any], RunnableConfig], Awaitable[dict[str, Any]]]:
    """The node: the user's new messages to ingest, the user's block into `memory_context`."""

    async def send_turn(user: str, thread: str, messages: Sequence[BaseMessage]) -> None:
        for position, m in enumerate(turn_messages(messages)):
            text = m.text
            if text.strip():
                mid = message_id(user, thread, m.id or position, text)
                await client.send(user, mid, thread, text, project_id=project_id)

    async def memwright(state: MemoryState, runtime: Runtime[Any], config: RunnableConfig) -> dict[str, Any]:
        user = _user_of(runtime, config)
        thread = str(config.get("configurable", {}).get("thread_id") or "default")
        try:
            await send_turn(user, thread, state["messages"])
        except MemwrightError as exc:
            if not is_outage(exc):
                raise
            log.warning("memwright unreachable: this turn is not remembered", error=str(exc))
        try:
            return {"memory_context": (await client.context(user)).block}
        except MemwrightError as exc:
            if not is_outage(exc):
                raise
            log.warning("memwright unreachable: this turn goes on without the user's memories", error=str(exc))
            return {"memory_context": ""}

    return memwright


def with_memory(instructions: str, state: MemoryState) -> list[BaseMessage]:
    """The model's messages: one system message (instructions, then the block), then the conversation."""
    block = state.get("memory_context") or ""
    system = f"{instructions}\n\n{block}" if block else instructions
    return [SystemMessage(system), *state["messages"]]
