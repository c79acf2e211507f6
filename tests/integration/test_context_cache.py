"""The start-of-turn read on the real PostgreSQL: a 304 comes from one indexed single-row SELECT
(the memory-set version PostgreSQL keeps) without reading or rendering a preview; a repeated read
is served from the process's cache; and every way a memory changes (agent commits, user writes,
erasure, plain SQL) moves the ETag in every api process, so no process ever serves a stale block
or one user's block to another.

Statements are counted with asyncpg's query logger on the api's own pool; the pool's reset
query on release (asyncpg housekeeping, not the handler's) is left out of the count.
"""

from __future__ import annotations

import asyncio
import dataclasses
import uuid
from collections.abc import AsyncIterator, Callable
from typing import Any

import asyncpg
import pytest
from aiohttp.test_utils import TestClient, TestServer
from memwright.agent.rules import RulesPolicy
from memwright.agent.run import run_agent, start_run
from memwright.agent.tools import MemoryTools, Message
from memwright.auth import mint
from memwright.services.api import context
from memwright.services.api.app import build_app
from memwright.services.api.context_cache import CONTEXT_READS
from memwright.settings import ApiSettings
from memwright.store import leases, memories
from memwright.store.db import _init_connection as init_connection

from tests.conftest import JWT_SECRET
from tests.integration.helpers import sweep

SETTINGS = ApiSettings(jwt_secret=JWT_SECRET, pg_dsn="unused", rate_limit_per_s=10_000, rate_limit_burst=10_000)
INSERT = "INSERT INTO memories (memory_id, user_id, author, text) VALUES ($1, 'alice', 'user', $2)"
POOL_RESET = "SELECT pg_advisory_unlock_all()"  # how asyncpg's reset on release begins


class Counts:
    """What the api did: the SQL it sent, the previews it built, the blocks it rendered and the
    token estimates it computed."""

    def __init__(self) -> None:
        self.statements: list[str] = []
        self.previews = 0
        self.renders = 0
        self.estimates = 0

    def clear(self) -> None:
        self.statements.clear()
        self.previews = self.renders = self.estimates = 0


class Process:
    """One api process: its own app (so its own cache) on its own pool, both counted."""

    def __init__(self, client: TestClient, counts: Counts) -> None:
        self.client = client
        self.counts = counts

    async def get(self, user: str, etag: str | None = None, fmt: str = "json") -> tuple[int, str, Any]:
        token = mint(SETTINGS, user, ["memories:read"])
        headers = {"Authorization": f"Bearer {token}", **({"If-None-Match": etag} if etag else {})}
        async with self.client.get(f"/v1/users/{user}/context?format={fmt}", headers=headers) as r:
            body = await (r.json() if r.status == 200 and fmt == "json" else r.text())
            return r.status, r.headers.get("ETag", ""), body

    async def call(self, method: str, path: str, principal: str, scopes: list[str], body: Any = None) -> Any:
        headers = {"Authorization": f"Bearer {mint(SETTINGS, principal, scopes)}"}
        async with self.client.request(method, path, json=body, headers=headers) as r:
            assert r.status in (200, 201), (method, path, r.status, await r.text())
            return await r.json()


@pytest.fixture
def counts(monkeypatch: pytest.MonkeyPatch) -> Counts:
    found = Counts()

    def counting(fn: Callable[..., Any], field: str) -> Callable[..., Any]:
        def wrapper(*args: Any) -> Any:
            setattr(found, field, getattr(found, field) + 1)
            return fn(*args)

        return wrapper

    monkeypatch.setattr(memories, "preview", counting(memories.preview, "previews"))
    monkeypatch.setattr(context, "render_block", counting(context.render_block, "renders"))
    monkeypatch.setattr(context, "estimate_tokens", counting(context.estimate_tokens, "estimates"))
    return found


@pytest.fixture
async def processes(db: asyncpg.Pool, pg_dsn: str, counts: Counts) -> AsyncIterator[Callable[[], Any]]:
    """A factory of api processes sharing the database (each with its own pool and cache)."""
    opened: list[tuple[TestClient, asyncpg.Pool]] = []
    await db.execute("TRUNCATE user_erasures")

    async def start() -> Process:
        async def init(conn: asyncpg.Connection) -> None:
            await init_connection(conn)
            conn.add_query_logger(lambda q: counts.statements.append(q.query))

        pool = await asyncpg.create_pool(pg_dsn, min_size=1, max_size=4, init=init)
        client = TestClient(TestServer(build_app(SETTINGS, pool)))
        await client.start_server()
        opened.append((client, pool))
        return Process(client, counts)

    yield start
    for client, pool in opened:
        await client.close()
        await pool.close()
    await db.execute("TRUNCATE user_erasures")  # an erasure drops later messages accepted before it


def statements(counts: Counts) -> list[str]:
    return [s for s in counts.statements if not s.startswith(POOL_RESET)]


async def user_memories(api: Process, user: str, n: int) -> list[str]:
    ids = []
    for i in range(n):
        text = f"Memory {i} of {user}: " + "prefers metric units and short answers, " * (1 + i % 4)
        created = await api.call("POST", f"/v1/users/{user}/memories", user, ["memories:write"], {"text": text[:400]})
        ids.append(created["id"])
    return ids


class Scripted:
    """An agent policy that makes one change through the tool layer, citing the new messages."""

    name = "scripted"

    def __init__(self, act: Callable[[MemoryTools, list[str]], str]) -> None:
        self.act = act

    async def run(self, tools: MemoryTools, new_messages: list[Message]) -> list[str]:
        return [self.act(tools, [m.message_id for m in new_messages])]


async def agent_run(db: asyncpg.Pool, user: str, text: str, policy: Any = None) -> None:
    """Sweep one message for the user and commit one run of `policy` (the rules policy by default)."""
    await sweep(db, user, text, conv=uuid.uuid4().hex[:6])
    async with db.acquire() as conn:
        lease = await leases.claim_next(conn, "test", 60)
        assert lease is not None and lease.user_id == user
        try:
            await run_agent(conn, lease, policy or RulesPolicy(), await start_run(conn, lease, "scripted"))
        finally:
            await leases.release(conn, lease)


# ---- the cheap paths -------------------------------------------------------------------


async def test_a_304_is_one_single_row_select_and_builds_no_preview(processes: Any, counts: Counts) -> None:
    api = await processes()
    await user_memories(api, "alice", 40)
    status, etag, first = await api.get("alice")
    assert status == 200 and first["memory_count"] == 40

    counts.clear()
    status, again, body = await api.get("alice", etag)
    assert (status, again, body) == (304, etag, "")
    assert statements(counts) == [memories.SET_VERSIONS]
    assert (counts.previews, counts.renders, counts.estimates) == (0, 0, 0)

    other = await processes()  # another api process, nothing cached: the version check alone answers
    counts.clear()
    assert (await other.get("alice", etag))[:2] == (304, etag)
    assert statements(counts) == [memories.SET_VERSIONS]
    assert (counts.previews, counts.renders, counts.estimates) == (0, 0, 0)


async def test_a_repeated_read_is_served_from_the_cache_with_its_token_estimate(processes: Any, counts: Counts) -> None:
    api = await processes()
    await user_memories(api, "alice", 40)
    counts.clear()
    status, etag, first = await api.get("alice")
    assert status == 200 and counts.previews == 40 and counts.renders == 1
    assert len(statements(counts)) == 1, "a first read is one statement: the version and the previews together"

    counts.clear()
    status, again, second = await api.get("alice")
    assert (status, again, second) == (200, etag, first)
    assert statements(counts) == [memories.SET_VERSIONS]
    assert (counts.previews, counts.renders, counts.estimates) == (0, 0, 0)
    text = await api.get("alice", fmt="text")
    assert text[0] == 200 and text[2] == first["block"] and counts.renders == 0


async def test_concurrent_checks_are_one_statement_and_each_gets_its_own_users_version(
    processes: Any, counts: Counts, db: asyncpg.Pool
) -> None:
    api = await processes()
    for user in ("alice", "bob"):
        await api.call("POST", f"/v1/users/{user}/memories", user, ["memories:write"], {"text": f"{user} likes tea"})
    checks = api.client.server.app[CONTEXT_READS].checks
    counts.clear()
    got = await asyncio.gather(*(checks.version(u) for u in ("alice", "bob", "alice", "nobody")))
    assert len(statements(counts)) == 1, "checks that arrive together share one statement"
    assert got == [
        await memories.memory_set_version(db, "alice"),
        await memories.memory_set_version(db, "bob"),
        got[0],
        0,
    ]
    assert got[0] != got[1] and got[0] > 0

    _, alice_etag, _ = await api.get("alice")
    _, bob_etag, _ = await api.get("bob")
    await api.call("POST", "/v1/users/bob/memories", "bob", ["memories:write"], {"text": "bob likes coffee"})
    answers = await asyncio.gather(*(api.get(u, e) for u, e in [("alice", alice_etag), ("bob", bob_etag)] * 3))
    assert [a[0] for a in answers] == [304, 200] * 3  # bob's change is seen in every batch, alice's 304 holds
    assert all("coffee" in a[2]["block"] for a in answers[1::2])


# ---- every write path moves the ETag, in every process ---------------------------------


async def test_every_write_path_moves_the_etag_in_every_api_process(
    processes: Any, counts: Counts, db: asyncpg.Pool
) -> None:
    reader, writer = await processes(), await processes()  # two api processes on one database
    seen: list[str] = []

    async def changed(expect_in_block: str | None = None, expect_gone: str | None = None) -> dict[str, Any]:
        """The reader's next read is a fresh 200 with a new ETag, and the one after comes from its cache."""
        status, etag, ctx = await reader.get("alice", seen[-1] if seen else None)
        assert status == 200 and etag not in seen, "the ETag did not move"
        if expect_in_block:
            assert expect_in_block in ctx["block"]
        if expect_gone:
            assert expect_gone not in ctx["block"]
        seen.append(etag)
        counts.clear()
        assert (await reader.get("alice", etag))[:2] == (304, etag)
        assert (await reader.get("alice"))[2] == ctx
        assert (counts.previews, counts.renders) == (0, 0), "an unchanged set is answered from the cache"
        return ctx

    await changed()  # no memory yet
    # the agent commits a new memory (create)
    await agent_run(db, "alice", "Always answer in metric units")
    ctx = await changed("metric units")
    agent_id = await db.fetchval("SELECT memory_id::text FROM memories WHERE user_id = 'alice' AND author = 'agent'")

    # the agent updates it, then deletes it (through the tool layer and the run's commit)
    await agent_run(
        db,
        "alice",
        "I meant imperial",
        Scripted(lambda t, ev: t.update_memory(agent_id, "Use imperial units", ev, "u")),
    )
    await changed("Use imperial units", "metric units")
    await agent_run(db, "alice", "forget it", Scripted(lambda t, ev: t.delete_memory(agent_id, "asked", ev)))
    await changed(expect_gone="imperial")

    # the user writes, edits (text, then kind alone) and deletes, through the other process
    mine = await writer.call(
        "POST", "/v1/users/alice/memories", "alice", ["memories:write"], {"text": "My cat is Miso"}
    )
    await changed("My cat is Miso")
    path = f"/v1/users/alice/memories/{mine['id']}"
    await writer.call("PATCH", path, "alice", ["memories:write"], {"text": "My cat is Mochi"})
    await changed("My cat is Mochi", "Miso")
    await writer.call("PATCH", path, "alice", ["memories:write"], {"kind": "fact"})
    await changed("(user, fact) My cat is Mochi")
    await writer.call("DELETE", path, "alice", ["memories:write"])
    ctx = await changed(expect_gone="Mochi")
    assert ctx["memory_count"] == 0

    # the user deletes a memory the agent wrote
    await agent_run(db, "alice", "Never use emoji in your answers")
    await changed("emoji")
    agent_id = await db.fetchval("SELECT memory_id::text FROM memories WHERE user_id = 'alice' AND author = 'agent'")
    await writer.call("DELETE", f"/v1/users/alice/memories/{agent_id}", "alice", ["memories:write"])
    await changed(expect_gone="emoji")

    # plain SQL, outside every code path of the project
    await writer.call("POST", "/v1/users/alice/memories", "alice", ["memories:write"], {"text": "I live in Lyon"})
    await changed("Lyon")
    async with db.acquire() as conn, conn.transaction():
        await conn.execute("SET LOCAL memwright.actor = 'user'")
        await conn.execute("UPDATE memories SET text = 'I live in Nantes' WHERE user_id = 'alice'")
    await changed("Nantes", "Lyon")

    # erasure (a privacy service with admin)
    await writer.call("DELETE", "/v1/users/alice", "service:privacy", ["admin"])
    ctx = await changed(expect_gone="Nantes")
    assert ctx["memory_count"] == 0

    # TRUNCATE fires no row trigger: the statement trigger moves every set
    await writer.call("POST", "/v1/users/alice/memories", "alice", ["memories:write"], {"text": "I am left-handed"})
    await changed("left-handed")
    await db.execute("TRUNCATE memories")
    await changed(expect_gone="left-handed")


async def test_a_rolled_back_change_leaves_the_version_and_a_committed_one_moves_it_once_per_commit(
    db: asyncpg.Pool,
) -> None:
    await db.execute(
        "INSERT INTO memories (memory_id, user_id, author, text) VALUES ($1, 'alice', 'user', 'a')", uuid.uuid4()
    )
    version = await memories.memory_set_version(db, "alice")
    assert version > 0 and await memories.memory_set_version(db, "nobody") == 0
    async with db.acquire() as conn:
        tx = conn.transaction()
        await tx.start()
        await conn.execute("SET LOCAL memwright.actor = 'user'")
        await conn.execute("UPDATE memories SET text = 'b' WHERE user_id = 'alice'")
        await tx.rollback()
    assert await memories.memory_set_version(db, "alice") == version
    async with db.acquire() as conn, conn.transaction():  # a writer that has not committed yet
        await conn.execute("SET LOCAL memwright.actor = 'user'")
        await conn.execute("UPDATE memories SET text = 'c' WHERE user_id = 'alice'")
        assert await memories.memory_set_version(db, "alice") == version  # others see the old set and version
    moved = await memories.memory_set_version(db, "alice")
    assert moved > version
    # the version and the previews it stands for come from one snapshot
    at, items = await memories.previews_at_version(db, "alice")
    assert at == moved and [i["preview"] for i in items] == ["c"]


async def test_a_version_is_never_given_out_twice_even_if_its_row_goes(db: asyncpg.Pool) -> None:
    await db.execute(INSERT, uuid.uuid4(), "a")
    first = await memories.memory_set_version(db, "alice")
    await db.execute("DELETE FROM memory_set_versions WHERE user_id = 'alice'")
    await db.execute(
        "INSERT INTO memories (memory_id, user_id, author, text) VALUES ($1, 'alice', 'user', 'b')", uuid.uuid4()
    )
    assert await memories.memory_set_version(db, "alice") > first


# ---- tenants ---------------------------------------------------------------------------


async def test_two_users_never_share_a_cached_block_or_an_etag(processes: Any, counts: Counts) -> None:
    api = await processes()
    await api.call("POST", "/v1/users/alice/memories", "alice", ["memories:write"], {"text": "Alice likes tea"})
    await api.call("POST", "/v1/users/bob/memories", "bob", ["memories:write"], {"text": "Bob likes coffee"})
    _, alice_etag, alice = await api.get("alice")
    _, bob_etag, bob = await api.get("bob")
    _, carol_etag, carol = await api.get("carol")  # no memories at all
    _, dave_etag, dave = await api.get("dave")
    assert "tea" in alice["block"] and "coffee" not in alice["block"]
    assert "coffee" in bob["block"] and "tea" not in bob["block"]
    assert 'user="carol"' in carol["block"] and 'user="dave"' in dave["block"]
    assert len({alice_etag, bob_etag, carol_etag, dave_etag}) == 4

    counts.clear()
    for user, own, ctx in (("alice", alice_etag, alice), ("bob", bob_etag, bob), ("carol", carol_etag, carol)):
        assert await api.get(user) == (200, own, ctx)  # each from the cache: its own block
        for other in {alice_etag, bob_etag, carol_etag, dave_etag} - {own}:
            assert (await api.get(user, other))[:2] == (200, own), "another user's ETag never gets a 304"
    assert (counts.previews, counts.renders) == (0, 0)


async def test_the_cache_holds_at_most_the_configured_number_of_users(
    db: asyncpg.Pool, pg_dsn: str, counts: Counts
) -> None:
    settings = dataclasses.replace(SETTINGS, context_cache_users=1)
    pool = await asyncpg.create_pool(pg_dsn, min_size=1, max_size=2, init=init_connection)
    try:
        async with TestClient(TestServer(build_app(settings, pool))) as client:
            api = Process(client, counts)
            for user in ("alice", "bob"):
                await api.call("POST", f"/v1/users/{user}/memories", user, ["memories:write"], {"text": "tea"})
            await api.get("alice")
            await api.get("bob")  # alice's block is dropped: the cache holds one user
            counts.clear()
            await api.get("bob")
            assert counts.renders == 0
            await api.get("alice")
            assert counts.renders == 1
            assert len(client.server.app[CONTEXT_READS].cache) == 1
    finally:
        await pool.close()
