"""The client repeats only what is safe to repeat: a 503 from a proxy may come after the api
already served the request, so a memory write is never sent twice on it (a 429 is: the api
refuses it before the handler runs)."""

from __future__ import annotations

import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer
from memwright.client import MemwrightClient, MemwrightError


async def test_a_write_answered_503_is_not_repeated_and_a_read_is() -> None:
    seen: list[str] = []

    async def unavailable(request: web.Request) -> web.Response:
        seen.append(request.method)
        return web.json_response({"error": "upstream reset before headers"}, status=503)

    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", unavailable)
    async with TestServer(app) as server:
        client = MemwrightClient(str(server.make_url("")), "token", retries=2, backoff_s=0.01)
        try:
            with pytest.raises(MemwrightError) as refused:
                await client.remember("alice", "Always answer in metric units")
            assert refused.value.status == 503 and "upstream reset" in refused.value.reason
            assert seen == ["POST"]
            with pytest.raises(MemwrightError):
                await client.hypotheses("alice")
            assert seen == ["POST", "GET", "GET", "GET"]  # a read: tried again, twice
        finally:
            await client.close()
