"""An OpenAI Agents SDK assistant with memwright memory: one conversation, a turn per argument.

    eval "$(deploy/local/stack.sh env)"; make demo   # or run ingest and api yourself
    export MEMWRIGHT_API_URL=http://localhost:8082 MEMWRIGHT_INGEST_URL=http://localhost:8081
    export MEMWRIGHT_TOKEN=$(.venv/bin/memwright token alice --scope memories:read signals:write)
    export OPENAI_BASE_URL=... OPENAI_API_KEY=...      # any OpenAI-compatible chat completions endpoint
    .venv/bin/python examples/openai_agents/main.py --user alice --conversation trip \
        "Always answer in metric units" "How far is it from Paris to Lyon?"

Before every model call the agent's instructions take the user's start-of-turn block
(MemwrightInstructions); every user turn the runner saves goes to ingest (MemwrightSession).
The model is reached through chat completions (OPENAI_BASE_URL, OPENAI_API_KEY, --model), so
any OpenAI-compatible server works; tracing is off, so nothing else leaves the machine.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
from dataclasses import dataclass

from agents import Agent, OpenAIChatCompletionsModel, Runner, set_tracing_disabled
from memwright.adapters.openai_agents import MemwrightInstructions, MemwrightSession
from memwright.client import MemwrightClient
from openai import AsyncOpenAI

INSTRUCTIONS = "You are a helpful assistant. Keep answers short."


@dataclass
class Turn:
    """The run's context: whose turn it is (MemwrightInstructions reads `user_id`)."""

    user_id: str


def _env(name: str) -> str:
    value = os.environ.get(name)
    if not value:
        sys.exit(f"{name} is not set; see the top of {__file__}")
    return value


async def converse(user: str, conversation: str, turns: list[str], model: str) -> list[str]:
    """Run the turns as one conversation; return the assistant's answers."""
    set_tracing_disabled(True)
    client = MemwrightClient(_env("MEMWRIGHT_API_URL"), _env("MEMWRIGHT_TOKEN"), _env("MEMWRIGHT_INGEST_URL"))
    async with client:
        agent = Agent[Turn](
            name="assistant",
            instructions=MemwrightInstructions(client, INSTRUCTIONS),
            model=OpenAIChatCompletionsModel(model, AsyncOpenAI()),
        )
        session = MemwrightSession(conversation, client, user_id=user)
        answers = []
        for text in turns:
            result = await Runner.run(agent, text, session=session, context=Turn(user))
            answers.append(str(result.final_output))
        return answers


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--user", required=True, help="the user's id (the token must be theirs, or a service's)")
    parser.add_argument("--conversation", default="example", help="the conversation (session) id")
    parser.add_argument("--model", default=os.environ.get("OPENAI_MODEL", "gpt-4o-mini"), help="the model name")
    parser.add_argument("turns", nargs="+", help="the user's turns, in order")
    args = parser.parse_args(argv)
    for answer in asyncio.run(converse(args.user, args.conversation, args.turns, args.model)):
        print(answer)


if __name__ == "__main__":
    main()
