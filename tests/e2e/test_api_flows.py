"""The memory API through the five real services: a working agent's start-of-turn call and
"why do you remember this?", user-written memories reaching the vector index, and an
erasure that removes every vector and lets a later signal start fresh."""

from __future__ import annotations

import asyncio
from typing import Any

import aiohttp
import asyncpg
from memwright.auth import mint
from memwright.index.edge import EdgeBackend
from memwright.settings import AuthSettings

from tests.conftest import JWT_SECRET
from tests.e2e.conftest import Pipeline
from tests.e2e.helpers import eventually, new_user, signal


def user_auth(user: str, *scopes: str) -> dict[str, str]:
    token = mint(AuthSettings(jwt_secret=JWT_SECRET), user, list(scopes or ("memories:read", "memories:write")))
    return {"Authorization": f"Bearer {token}"}


async def send(http: aiohttp.ClientSession, pipeline: Pipeline, *signals: dict[str, Any]) -> None:
    async with http.post(
        pipeline.ingest + "/v1/signals", json={"signals": list(signals)}, headers=pipeline.auth()
    ) as r:
        assert r.status == 202, await r.text()


async def get(http: aiohttp.ClientSession, url: str, headers: dict[str, str], expect: int = 200) -> Any:
    async with http.get(url, headers=headers) as r:
        assert r.status == expect, (url, r.status, await r.text())
        return await r.json()


async def context_with(http: aiohttp.ClientSession, pipeline: Pipeline, user: str, count: int) -> dict | None:
    ctx = await get(http, f"{pipeline.api}/v1/users/{user}/context", user_auth(user, "memories:read"))
    return ctx if ctx["memory_count"] >= count else None


async def points_of(pipeline: Pipeline, user: str) -> set[str]:
    """The user's points in the embedded Qdrant store (one process at a time: the indexer pauses meanwhile)."""
    pipeline.procs.stop("indexer")
    backend = EdgeBackend.open(pipeline.env["MEMWRIGHT_QDRANT_PATH"])
    try:
        if await backend.alias_target("memories") is None:
            return set()
        points, _ = await backend.scroll("memories", None, 100_000)
        return {p.id for p in points if p.payload["user_id"] == user}
    finally:
        await backend.close()
        pipeline.procs.start("indexer")
        await pipeline.procs.wait_ready("indexer")


async def index_holds(pipeline: Pipeline, pool: asyncpg.Pool, user: str, expected: set[str]) -> None:
    async def probe() -> bool:
        if await pool.fetchval("SELECT count(*) FROM index_outbox WHERE user_id = $1", user):
            return False
        await asyncio.sleep(1.0)  # let the indexer consume what the relay produced
        return await points_of(pipeline, user) == expected

    await eventually(probe, timeout=60, what=f"the index to hold exactly {sorted(expected)}")


async def test_a_working_agent_gets_its_context_block_and_asks_why(
    pipeline: Pipeline, http: aiohttp.ClientSession
) -> None:
    user = new_user()
    sig = signal(user, "Always answer in metric units, please.", "trip")
    await send(http, pipeline, sig)
    ctx = await eventually(lambda: context_with(http, pipeline, user, 1), what="the memory in the context block")

    # start of turn: one call, the block goes into the prompt as it is
    block = ctx["block"]
    assert block.startswith(f'<user_memories user="{user}" count="1">') and block.endswith("</user_memories>")
    assert "metric units" in block and ctx["token_estimate"] > 0
    memory_id = block.split("- [", 1)[1].split("]", 1)[0]

    # "why do you remember this?": the memory with its receipts
    why = await get(http, f"{pipeline.api}/v1/users/{user}/memories/{memory_id}", user_auth(user, "memories:read"))
    assert [(r["message_id"], r["conversation_id"], r["text"]) for r in why["receipts"]] == [
        (sig["message_id"], "trip", sig["text"])
    ]
    history = await get(
        http, f"{pipeline.api}/v1/users/{user}/memories/{memory_id}/history", user_auth(user, "memories:read")
    )
    assert [(h["action"], h["actor"], h["evidence"]) for h in history["history"]] == [
        ("create", "agent", [sig["message_id"]])
    ]
    # another user's token reaches none of it
    await get(http, f"{pipeline.api}/v1/users/{user}/context", user_auth("someone-else", "memories:read"), 403)


async def test_user_writes_are_indexed_and_erasure_removes_every_vector_and_starts_fresh(
    pipeline: Pipeline, http: aiohttp.ClientSession, e2e_pool: asyncpg.Pool
) -> None:
    user = new_user()
    auth = user_auth(user)
    await send(
        http,
        pipeline,
        signal(user, "Never use emoji in replies.", "c1"),
        signal(user, "I'm a vegetarian, what should I cook?", "c1"),
    )
    await eventually(lambda: context_with(http, pipeline, user, 1), what="the agent's memory")
    async with http.post(
        f"{pipeline.api}/v1/users/{user}/memories", json={"text": "My cat is Miso"}, headers=auth
    ) as r:
        assert r.status == 201
        mine = await r.json()
    previews = (await get(http, f"{pipeline.api}/v1/users/{user}/memories", auth))["memories"]
    assert {p["author"] for p in previews} == {"agent", "user"}
    assert (await get(http, f"{pipeline.api}/v1/users/{user}/hypotheses", auth))["hypotheses"]
    await index_holds(pipeline, e2e_pool, user, {p["id"] for p in previews})

    async with http.delete(f"{pipeline.api}/v1/users/{user}", headers=auth) as r:
        assert r.status == 200
        erased = await r.json()
    assert erased["counts"]["memories"] == 2 and erased["counts"]["messages"] == 2
    assert (await get(http, f"{pipeline.api}/v1/users/{user}/memories", auth))["memories"] == []
    assert (await get(http, f"{pipeline.api}/v1/users/{user}/hypotheses", auth))["hypotheses"] == []
    await index_holds(pipeline, e2e_pool, user, set())
    tombstones = await get(http, f"{pipeline.api}/v1/users/{user}/memories/{mine['id']}/history", auth)
    assert [h["action"] for h in tombstones["history"]] == ["create", "erase"]
    assert all(h["after"] is None and h["erased_at"] for h in tombstones["history"])

    # a later signal starts fresh: one new memory, no old hypothesis behind it
    await send(http, pipeline, signal(user, "From now on, reply in French.", "c2"))
    ctx = await eventually(lambda: context_with(http, pipeline, user, 1), what="the fresh memory")
    assert ctx["memory_count"] == 1 and "French" in ctx["block"] and "emoji" not in ctx["block"]
    assert (await get(http, f"{pipeline.api}/v1/users/{user}/hypotheses", auth))["hypotheses"] == []
