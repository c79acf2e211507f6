"""A local OpenAI-compatible chat completions server, scripted per test.

The REAL openai client talks to it over HTTP (base_url = FakeLlm.base_url). Each request pops
the next step of the script:

    async with FakeLlm() as llm:
        llm.push(
            tool_call("create_memory", text="Always answer in metric units.", evidence=["m1"]),
            lambda request: text(f"saw {len(tool_results(request))} tool results"),  # react to the request
            error(500),                      # an HTTP error (retried by the client)
            slow(5.0, text("too late")),     # answers after a delay (the client times out)
            text("done"),
        )
        policy = LlmPolicy(settings(llm.base_url))

Every request body is recorded in `llm.requests`. A request with nothing left to pop gets a 400
("script exhausted"), which the client does not retry, so a test never hangs on a missing step.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any

from aiohttp import web


@dataclass(frozen=True)
class Call:
    """One tool call of a scripted model turn; `arguments` may be a raw (even malformed) string."""

    name: str
    arguments: dict[str, Any] | str


@dataclass(frozen=True)
class Reply:
    """One scripted model turn: text, tool calls, an HTTP error, or any of them after a delay."""

    content: str | None = None
    calls: tuple[Call, ...] = ()
    status: int = 200
    delay: float = 0.0
    usage: tuple[int, int] = (100, 20)  # prompt, completion tokens
    finish_reason: str = ""  # default: "tool_calls" with calls, else "stop"; "length" for a cut answer


Step = Reply | Callable[[dict[str, Any]], Reply]


def text(content: str) -> Reply:
    return Reply(content=content)


def tool_call(name: str, raw: str | None = None, **arguments: Any) -> Reply:
    return Reply(calls=(Call(name, raw if raw is not None else arguments),))


def tool_calls(*calls: tuple[str, dict[str, Any] | str]) -> Reply:
    return Reply(calls=tuple(Call(name, args) for name, args in calls))


def error(status: int = 500) -> Reply:
    return Reply(status=status)


def slow(seconds: float, reply: Reply) -> Reply:
    return Reply(reply.content, reply.calls, reply.status, seconds, reply.usage, reply.finish_reason)


def cut(content: str) -> Reply:
    """An answer the server cut at the request's max_tokens (finish_reason "length")."""
    return Reply(content=content, finish_reason="length")


def tool_results(request: dict[str, Any]) -> list[str]:
    """The tool results the client sent back to the model in `request`, in order."""
    return [m["content"] for m in request["messages"] if m.get("role") == "tool"]


@dataclass
class FakeLlm:
    script: deque[Step] = field(default_factory=deque)
    requests: list[dict[str, Any]] = field(default_factory=list)
    _runner: web.AppRunner | None = None
    _port: int = 0
    _ids: itertools.count[int] = field(default_factory=lambda: itertools.count(1))

    def push(self, *steps: Step) -> None:
        self.script.extend(steps)

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self._port}/v1"

    async def __aenter__(self) -> FakeLlm:
        app = web.Application()
        app.router.add_post("/v1/chat/completions", self._complete)
        self._runner = web.AppRunner(app)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        server = site._server
        assert server is not None and server.sockets  # type: ignore[attr-defined]
        self._port = server.sockets[0].getsockname()[1]  # type: ignore[attr-defined]
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if self._runner is not None:
            await self._runner.cleanup()

    async def _complete(self, request: web.Request) -> web.Response:
        body = await request.json()
        self.requests.append(body)
        if not self.script:
            return web.json_response(
                {"error": {"message": f"fake llm: script exhausted at request {len(self.requests)}"}}, status=400
            )
        step = self.script.popleft()
        reply = step(body) if callable(step) else step
        if reply.delay:
            await asyncio.sleep(reply.delay)
        if reply.status != 200:
            return web.json_response(
                {"error": {"message": f"fake llm: scripted HTTP {reply.status}", "type": "server_error"}},
                status=reply.status,
                headers={"retry-after-ms": "10"},  # the client's retries stay fast in tests
            )
        return web.json_response(self._completion(body, reply))

    def _completion(self, body: dict[str, Any], reply: Reply) -> dict[str, Any]:
        message: dict[str, Any] = {"role": "assistant", "content": reply.content}
        if reply.calls:
            message["tool_calls"] = [
                {
                    "id": f"call_{next(self._ids)}",
                    "type": "function",
                    "function": {
                        "name": c.name,
                        "arguments": c.arguments if isinstance(c.arguments, str) else json.dumps(c.arguments),
                    },
                }
                for c in reply.calls
            ]
        prompt, completion = reply.usage
        return {
            "id": f"chatcmpl-{next(self._ids)}",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": body.get("model", "fake"),
            "choices": [
                {
                    "index": 0,
                    "message": message,
                    "finish_reason": reply.finish_reason or ("tool_calls" if reply.calls else "stop"),
                    "logprobs": None,
                }
            ],
            "usage": {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion},
        }
