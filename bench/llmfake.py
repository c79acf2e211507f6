"""The project's scripted OpenAI-compatible server (tests/fakes/llm_server.py) as a slow model
for the curator figure: every completion answers after `delay_s`. A run's first completion
creates one memory citing the first new message; once the tool result came back, it answers
"done". So each run costs two completions, like a short real run.
"""

from __future__ import annotations

import re
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

from tests.fakes.llm_server import FakeLlm, Reply, slow, text, tool_call, tool_results

NEW_MESSAGE = re.compile(r"^- \[([^\]]+)\] conversation \S+, \S+, user: (.+)$", re.MULTILINE)
STEPS = 100_000  # the script is consumed one step per completion; more than any bench needs


@dataclass
class SlowModel:
    fake: FakeLlm
    delay_s: float

    @property
    def base_url(self) -> str:
        return self.fake.base_url

    def requests(self) -> int:
        return len(self.fake.requests)

    def answer(self, request: dict[str, Any]) -> Reply:
        if tool_results(request):
            return slow(self.delay_s, text("done"))
        context = next((m["content"] for m in request["messages"] if m.get("role") == "user"), "")
        found = NEW_MESSAGE.search(context.split("## New messages", 1)[-1])
        if not found:
            return slow(self.delay_s, text("nothing to remember"))
        return slow(self.delay_s, tool_call("create_memory", text=found.group(2)[:200], evidence=[found.group(1)]))


@asynccontextmanager
async def fake_llm_server(delay_s: float) -> AsyncIterator[SlowModel]:
    async with FakeLlm() as fake:
        model = SlowModel(fake, delay_s)
        fake.push(*([model.answer] * STEPS))
        yield model
