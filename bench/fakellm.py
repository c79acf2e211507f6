"""A counting OpenAI-compatible endpoint on 127.0.0.1: every request is counted, and chat
completions are answered after a fixed delay with a plain assistant message (no tool calls).

The bench points the ingest process at it (MEMWRIGHT_LLM_BASE_URL, OPENAI_BASE_URL) to count
that the ingest path makes no LLM call. The llm-policy curator figure uses the project's
scripted fake (tests/fakes/llm_server.py) when it exists, since that one speaks the tool
protocol the policy expects.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from types import TracebackType

from aiohttp import web


class CountingLlm:
    def __init__(self, delay_s: float = 0.0) -> None:
        self.delay_s = delay_s
        self.requests = 0
        self.port = 0
        self._runner: web.AppRunner | None = None

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    async def _count(self, request: web.Request) -> web.StreamResponse:
        self.requests += 1
        if request.path.endswith("/chat/completions"):
            await asyncio.sleep(self.delay_s)
            return web.json_response(
                {
                    "id": f"chatcmpl-{uuid.uuid4().hex[:12]}",
                    "object": "chat.completion",
                    "created": int(time.time()),
                    "model": "fake",
                    "choices": [
                        {"index": 0, "finish_reason": "stop", "message": {"role": "assistant", "content": "done"}}
                    ],
                    "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
                }
            )
        return web.json_response({"object": "list", "data": []})

    async def __aenter__(self) -> CountingLlm:
        app = web.Application()
        app.router.add_route("*", "/{tail:.*}", self._count)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        self.port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        return self

    async def __aexit__(
        self, et: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        if self._runner:
            await self._runner.cleanup()
