"""The MCP server (`memwright mcp`) on the real PostgreSQL, driven by the mcp SDK's own client over
both transports: stateless Streamable HTTP (the server in this process, on uvicorn, behind its
bearer gate) and stdio (`memwright mcp` as a subprocess, its user from MEMWRIGHT_TOKEN).
Every tool's happy path, both resources, no token, a bad token, a service token, a missing scope,
another user's memory id (exactly like one that does not exist) and a secret refused with the reason."""

from __future__ import annotations

import asyncio
import json
import os
import socket
import subprocess
import sys
import uuid
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from pathlib import Path
from typing import Any

import asyncpg
import httpx2
import pytest
import uvicorn
from mcp import Client
from mcp.client.stdio import StdioServerParameters
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError
from mcp_types import CallToolResult
from memwright.auth import mint
from memwright.services.api.limits import RequestLimits
from memwright.services.api.mcp_server import MCP_PATH, BearerGate, http_app
from memwright.settings import McpSettings

from tests.conftest import JWT_SECRET
from tests.integration.helpers import sweep
from tests.integration.test_api_memories import agent_memory, curate

MEMWRIGHT = Path(sys.executable).with_name("memwright")
TOOLS = {"get_context", "get_memory", "remember", "forget", "list_hypotheses", "message_status"}
BOTH = ["http", "stdio"]
Connect = Callable[..., AbstractAsyncContextManager[Client]]


def token(user: str, *scopes: str, secret: str = JWT_SECRET, ttl: int = 600) -> str:
    settings = McpSettings(jwt_secret=secret, pg_dsn="unused")
    return mint(settings, user, list(scopes or ("memories:read", "memories:write")), ttl)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="module")
async def mcp_url(pool: asyncpg.Pool) -> AsyncIterator[str]:
    """The MCP server's Streamable HTTP endpoint, served in this process on the test database."""
    settings = McpSettings(jwt_secret=JWT_SECRET, pg_dsn="unused", rate_limit_per_s=10_000, rate_limit_burst=10_000)
    port = _free_port()
    server = uvicorn.Server(uvicorn.Config(http_app(settings, pool), host="127.0.0.1", port=port, log_level="warning"))
    serving = asyncio.create_task(server.serve())
    while not server.started:
        assert not serving.done(), "uvicorn did not start"
        await asyncio.sleep(0.05)
    yield f"http://127.0.0.1:{port}{MCP_PATH}"
    server.should_exit = True
    await serving


def stdio_env(pg_dsn: str, bearer: str | None) -> dict[str, str]:
    env = {"MEMWRIGHT_PG_DSN": pg_dsn, "MEMWRIGHT_JWT_SECRET": JWT_SECRET, "MEMWRIGHT_LOG_LEVEL": "warning"}
    return env | ({"MEMWRIGHT_TOKEN": bearer} if bearer is not None else {})


@pytest.fixture(params=BOTH)
def connect(request: pytest.FixtureRequest, db: asyncpg.Pool, pg_dsn: str, mcp_url: str) -> Connect:
    """connect(bearer) -> an MCP client session whose calls carry that token, over this test's transport."""

    @asynccontextmanager
    async def over_http(bearer: str | None) -> AsyncIterator[Client]:
        headers = {"Authorization": f"Bearer {bearer}"} if bearer is not None else {}
        async with httpx2.AsyncClient(headers=headers, timeout=30) as http:
            async with Client(streamable_http_client(mcp_url, http_client=http)) as client:
                yield client

    @asynccontextmanager
    async def over_stdio(bearer: str | None) -> AsyncIterator[Client]:
        server = StdioServerParameters(command=str(MEMWRIGHT), args=["mcp"], env=stdio_env(pg_dsn, bearer))
        async with Client(server) as client:
            yield client

    return over_http if request.param == "http" else over_stdio


def structured(result: CallToolResult) -> Any:
    assert not result.is_error, result.content
    return result.structured_content


def error_text(result: CallToolResult, tool: str) -> str:
    """The reason of a refused call, without the SDK's "Error executing tool <name>: " before it."""
    assert result.is_error, result.structured_content
    [content] = result.content
    prefix = f"Error executing tool {tool}: "
    assert content.text.startswith(prefix), content.text  # type: ignore[union-attr]
    return content.text.removeprefix(prefix)  # type: ignore[union-attr]


def leaves(exc: BaseException) -> list[BaseException]:
    """The exceptions inside (nested) exception groups."""
    if isinstance(exc, BaseExceptionGroup):
        return [leaf for inner in exc.exceptions for leaf in leaves(inner)]
    return [exc]


# ---- every tool and resource -----------------------------------------------------------


async def test_the_tools_and_resources_are_listed(connect: Connect) -> None:
    async with connect(token("alice")) as client:
        tools = (await client.list_tools()).tools
        assert {t.name for t in tools} == TOOLS
        assert all(t.description for t in tools)
        assert [r.uri for r in (await client.list_resources()).resources] == ["memory://previews"]
        templates = (await client.list_resource_templates()).resource_templates
        assert [t.uri_template for t in templates] == ["memory://memories/{memory_id}"]


async def test_each_tool_and_resource_serves_the_tokens_user(connect: Connect, db: asyncpg.Pool) -> None:
    memory_id, message_id = await agent_memory(db, "alice")
    await sweep(db, "alice", "I'm a vegetarian, so which restaurants would work?", conv="trip")
    await curate(db)
    async with connect(token("alice")) as client:
        block = structured(await client.call_tool("get_context", {}))["result"]
        assert block.startswith('<user_memories user="alice" count="1">') and f"[{memory_id}] (agent," in block

        memory = structured(await client.call_tool("get_memory", {"memory_id": memory_id}))
        assert memory["text"] == "Always answer in metric units." and memory["author"] == "agent"
        assert [r["message_id"] for r in memory["receipts"]] == [message_id]
        assert [h["action"] for h in memory["history"]] == ["create"]

        status = structured(await client.call_tool("message_status", {"message_id": message_id}))
        assert (status["outcome"], status["memories"][0]["memory_id"]) == ("remembered", memory_id)

        [held] = structured(await client.call_tool("list_hypotheses", {}))["hypotheses"]
        assert "vegetarian" in held["statement"].lower()

        written = structured(
            await client.call_tool("remember", {"text": "I am allergic to peanuts.", "kind": "fact", "reason": "asked"})
        )
        assert (written["author"], written["kind"], written["version"]) == ("user", "fact", 1)
        row = await db.fetchrow("SELECT user_id, author FROM memories WHERE memory_id = $1", uuid.UUID(written["id"]))
        assert dict(row) == {"user_id": "alice", "author": "user"}
        audit = await db.fetchrow(
            "SELECT actor, principal, reason FROM memory_audit WHERE memory_id = $1", uuid.UUID(written["id"])
        )
        assert dict(audit) == {"actor": "user", "principal": "alice", "reason": "asked"}

        [previews] = (await client.read_resource("memory://previews")).contents
        listed = json.loads(previews.text)  # type: ignore[union-attr]
        assert [m["id"] for m in listed["memories"]] == [memory_id, written["id"]]
        [full] = (await client.read_resource(f"memory://memories/{memory_id}")).contents
        assert json.loads(full.text)["receipts"][0]["message_id"] == message_id  # type: ignore[union-attr]

        gone = structured(await client.call_tool("forget", {"memory_id": memory_id, "reason": "moved to the US"}))
        assert gone == {"id": memory_id, "deleted": True, "author": "agent", "version": 1}
        assert error_text(await client.call_tool("get_memory", {"memory_id": memory_id}), "get_memory") == (
            f"no memory {memory_id} for this user"
        )
    assert await db.fetchval("SELECT count(*) FROM memories WHERE user_id = 'alice'") == 1


# ---- who may call ----------------------------------------------------------------------


async def test_another_users_memory_id_reads_exactly_like_one_that_does_not_exist(
    connect: Connect, db: asyncpg.Pool
) -> None:
    bobs, _ = await agent_memory(db, "bob")
    nobodys = str(uuid.uuid4())
    async with connect(token("alice")) as client:
        for tool in ("get_memory", "forget"):
            for memory_id in (bobs, nobodys):
                said = error_text(await client.call_tool(tool, {"memory_id": memory_id}), tool)
                assert said == f"no memory {memory_id} for this user", (tool, said)
        for memory_id in (bobs, nobodys):
            with pytest.raises(MCPError) as refused:
                await client.read_resource(f"memory://memories/{memory_id}")
            assert refused.value.error.message == f"no memory {memory_id} for this user"
        block = structured(await client.call_tool("get_context", {}))["result"]
        assert bobs not in block and 'count="0"' in block
    assert await db.fetchval("SELECT count(*) FROM memories WHERE user_id = 'bob'") == 1  # forget did not reach it


async def test_a_memory_holding_a_secret_is_refused_with_the_reason_and_nothing_written(
    connect: Connect, db: asyncpg.Pool
) -> None:
    async with connect(token("alice")) as client:
        said = error_text(await client.call_tool("remember", {"text": "My password is hunter2-Secret!"}), "remember")
        assert said.startswith("this memory is refused:") and "password" in said.lower()
        said = error_text(await client.call_tool("remember", {"text": "   "}), "remember")
        assert said == "text must not be empty"
        said = error_text(await client.call_tool("remember", {"text": "I like tea", "kind": "Not A Kind"}), "remember")
        assert said.startswith("kind must be")
    assert await db.fetchval("SELECT count(*) FROM memories") == 0


async def test_a_read_only_token_reads_and_may_not_write(connect: Connect, db: asyncpg.Pool) -> None:
    memory_id, _ = await agent_memory(db, "alice")
    async with connect(token("alice", "memories:read")) as client:
        assert structured(await client.call_tool("get_memory", {"memory_id": memory_id}))["id"] == memory_id
        for tool, args in (("remember", {"text": "I like tea"}), ("forget", {"memory_id": memory_id})):
            said = error_text(await client.call_tool(tool, args), tool)
            assert said.startswith("this token lacks scope memories:write"), said
    assert await db.fetchval("SELECT count(*) FROM memories WHERE user_id = 'alice'") == 1


@pytest.mark.parametrize(
    ("bearer", "status", "reason"),
    [
        (None, 401, "missing bearer token"),
        ("not-a-jwt", 401, "invalid token"),
        # tokens are minted when the test runs, not at collection (a long session would see them expire)
        (
            lambda: token("alice", secret="another-secret-" + "y" * 32),
            401,
            "invalid token: Signature verification failed",
        ),
        (lambda: token("service:chat", "admin"), 403, "not a service token"),
    ],
    ids=["no-token", "garbage", "wrong-signature", "service-token"],
)
async def test_http_refuses_a_call_without_a_users_valid_token_and_says_why(
    mcp_url: str, db: asyncpg.Pool, bearer: str | Callable[[], str] | None, status: int, reason: str
) -> None:
    bearer = bearer() if callable(bearer) else bearer
    headers = {"Authorization": f"Bearer {bearer}"} if bearer else {}
    async with httpx2.AsyncClient(headers=headers, timeout=30) as http:
        answer = await http.post(
            mcp_url,
            json={"jsonrpc": "2.0", "id": 1, "method": "tools/list"},
            headers={"Accept": "application/json, text/event-stream"},
        )
        assert answer.status_code == status and reason in answer.json()["error"], answer.text
        if status == 401:
            assert answer.headers["WWW-Authenticate"] == 'Bearer realm="memwright"'
        with pytest.raises(BaseException) as failed:  # the SDK's client cannot even connect
            async with Client(streamable_http_client(mcp_url, http_client=http)):
                pass
        assert any(isinstance(leaf, MCPError) for leaf in leaves(failed.value)), failed.value


async def test_http_spends_the_users_rate_limit_bucket_and_answers_429_with_retry_after() -> None:
    async def served(scope: Any, receive: Any, send: Any) -> None:  # what the gate lets through reaches this
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"through"})

    settings = McpSettings(jwt_secret=JWT_SECRET, pg_dsn="unused", rate_limit_per_s=0.001, rate_limit_burst=2)
    gate = BearerGate(served, settings, RequestLimits(settings))
    async with httpx2.AsyncClient(transport=httpx2.ASGITransport(app=gate), base_url="http://127.0.0.1") as http:
        alice, bob = ({"Authorization": f"Bearer {token(user)}"} for user in ("alice", "bob"))
        assert [(await http.post(MCP_PATH, headers=alice)).status_code for _ in range(2)] == [200, 200]
        refused = await http.post(MCP_PATH, headers=alice)
        assert refused.status_code == 429 and int(refused.headers["Retry-After"]) >= 1
        assert refused.json()["error"].startswith("rate limit of 0.001 requests/s for this user")
        assert (await http.post(MCP_PATH, headers=bob)).status_code == 200  # a bucket per user


@pytest.mark.parametrize(
    ("bearer", "said"),
    [
        (None, "MEMWRIGHT_TOKEN is not set"),
        ("not-a-jwt", "MEMWRIGHT_TOKEN is refused: invalid token"),
        ("", "MEMWRIGHT_TOKEN is not set"),
        (
            lambda: token("service:chat", "admin"),
            "MEMWRIGHT_TOKEN is refused: the MCP server serves one user's own memories",
        ),
    ],
    ids=["no-token", "garbage", "empty", "service-token"],
)
def test_stdio_will_not_start_without_a_users_valid_token_and_says_why(
    pg_dsn: str, bearer: str | Callable[[], str] | None, said: str
) -> None:
    bearer = bearer() if callable(bearer) else bearer
    env = {k: v for k, v in os.environ.items() if not k.startswith("MEMWRIGHT_")} | stdio_env(pg_dsn, bearer)
    done = subprocess.run(
        [str(MEMWRIGHT), "mcp"], env=env, input="", capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 2 and said in done.stderr, done.stderr
    assert done.stdout == ""  # nothing on the protocol stream


async def test_stdio_client_fails_to_connect_with_a_bad_token(pg_dsn: str, db: asyncpg.Pool) -> None:
    server = StdioServerParameters(command=str(MEMWRIGHT), args=["mcp"], env=stdio_env(pg_dsn, "not-a-jwt"))
    with pytest.raises(Exception):  # noqa: B017 - the server exits before it speaks: whatever the SDK raises
        async with Client(server):
            pass


# ---- the process ----------------------------------------------------------------------


async def test_memwright_mcp_http_serves_the_tools_health_readiness_and_metrics_and_stops_on_sigterm(
    pg_dsn: str, db: asyncpg.Pool
) -> None:
    http_port, ops_port = _free_port(), _free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("MEMWRIGHT_")} | stdio_env(pg_dsn, None)
    env |= {"MEMWRIGHT_HTTP_PORT": str(http_port), "MEMWRIGHT_OPS_PORT": str(ops_port)}
    process = await asyncio.create_subprocess_exec(str(MEMWRIGHT), "mcp", "--http", env=env)
    ops = f"http://127.0.0.1:{ops_port}"
    try:
        async with httpx2.AsyncClient(timeout=5) as http:
            for _ in range(300):  # the process imports and starts: wait for readiness, not for a time
                try:
                    ready = await http.get(f"{ops}/readyz")
                    break
                except httpx2.TransportError:
                    assert process.returncode is None, "memwright mcp --http exited"
                    await asyncio.sleep(0.1)
            else:
                pytest.fail("memwright mcp --http did not answer /readyz")
            assert ready.json() == {"ready": True, "checks": {"postgres": True}}
            assert (await http.get(f"{ops}/healthz")).json() == {"status": "ok"}
            async with httpx2.AsyncClient(headers={"Authorization": f"Bearer {token('alice')}"}, timeout=30) as authed:
                url = f"http://127.0.0.1:{http_port}{MCP_PATH}"
                async with Client(streamable_http_client(url, http_client=authed)) as client:
                    block = structured(await client.call_tool("get_context", {}))["result"]
            assert block.startswith('<user_memories user="alice" count="0">')
            page = (await http.get(f"{ops}/metrics")).text
            assert 'memwright_mcp_calls_total{operation="get_context",outcome="ok"} 1.0' in page
            assert 'memwright_mcp_http_requests_total{code="200"}' in page
    finally:
        process.terminate()
        assert await asyncio.wait_for(process.wait(), 60) == 0  # SIGTERM: a clean stop
