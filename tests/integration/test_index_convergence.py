"""Invariant 9: whatever order, delay, duplication or loss the changelog suffers, once every
event has been delivered at least once Qdrant holds exactly PostgreSQL's memories.

Real PostgreSQL (the session database) and an embedded Qdrant in a temporary folder; the
events go through `converge`, the function the indexer applies each consumed batch with.
"""

from __future__ import annotations

import hashlib
import itertools
import uuid
from collections.abc import AsyncIterator
from datetime import UTC
from pathlib import Path
from typing import Any

import asyncpg
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from memwright.embeddings import CachedEmbedder, HashingEmbedder, hashing_embed
from memwright.index.apply import converge
from memwright.index.vectors import VectorIndex, alias_target
from qdrant_client import AsyncQdrantClient

from tests.conftest import TABLES

TRUNCATE = f"TRUNCATE {', '.join(TABLES)} RESTART IDENTITY"
USERS = [f"user-{i}" for i in range(8)]
TEXTS = st.text(
    alphabet=st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00"), min_size=1, max_size=40
)
_names = itertools.count()


@pytest.fixture(scope="module")
async def qdrant(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[AsyncQdrantClient]:
    path: Path = tmp_path_factory.mktemp("qdrant-convergence")
    client = AsyncQdrantClient(path=str(path))
    yield client
    await client.close()


async def _change(pool: asyncpg.Pool, sql: str, *args: Any) -> None:
    async with pool.acquire() as conn, conn.transaction():
        await conn.execute("SET LOCAL memwright.actor = 'user'")  # may change user-written memories too
        await conn.execute(sql, *args)


async def expected_state(pool: asyncpg.Pool) -> dict[str, tuple[dict[str, Any], str]]:
    """PostgreSQL's memories as the payload and text each point must have (computed here, independently)."""
    rows = await pool.fetch("SELECT memory_id, user_id, author, kind, text, version, updated_at FROM memories")
    return {
        str(r["memory_id"]): (
            {
                "user_id": r["user_id"],
                "version": r["version"],
                "author": r["author"],
                "kind": r["kind"],
                "updated_at": r["updated_at"].astimezone(UTC).isoformat(),
                "text_hash": hashlib.sha256(r["text"].encode()).hexdigest(),
            },
            r["text"],
        )
        for r in rows
    }


async def assert_qdrant_equals_postgres(pool: asyncpg.Pool, index: VectorIndex) -> None:
    expected = await expected_state(pool)
    points, offset = [], None
    while True:
        page, offset = await index.client.scroll(index.collection, limit=500, offset=offset, with_vectors=True)
        points += page
        if offset is None:
            break
    actual = {str(p.id): p for p in points}
    assert actual.keys() == expected.keys(), "point ids differ from memory ids"
    for mid, (payload, text) in expected.items():
        assert actual[mid].payload == payload, mid
        # the vector is the embedding of the CURRENT text, not of an earlier version
        assert np.allclose(actual[mid].vector, hashing_embed(text), atol=1e-5), mid


class History:
    """Memory changes committed to PostgreSQL, each leaving a changelog event (its memory id)."""

    def __init__(self, pool: asyncpg.Pool) -> None:
        self.pool = pool
        self.live: list[str] = []
        self.events: list[str] = []

    async def create(self, user: str, author: str, text: str) -> None:
        mid = str(uuid.uuid4())
        await _change(
            self.pool,
            "INSERT INTO memories (memory_id, user_id, author, kind, text) VALUES ($1, $2, $3, 'preference', $4)",
            uuid.UUID(mid),
            user,
            author,
            text,
        )
        self.live.append(mid)
        self.events.append(mid)

    async def update(self, mid: str, text: str) -> None:
        await _change(
            self.pool,
            "UPDATE memories SET text = $2, version = version + 1, updated_at = clock_timestamp() WHERE memory_id = $1",
            uuid.UUID(mid),
            text,
        )
        self.events.append(mid)

    async def delete(self, mid: str) -> None:
        await _change(self.pool, "DELETE FROM memories WHERE memory_id = $1", uuid.UUID(mid))
        self.live.remove(mid)
        self.events.append(mid)

    async def consolidate(self, a: str, b: str, text: str) -> None:
        """Two memories become one new memory (two deletes and a create, as the agent does it)."""
        user = await self.pool.fetchval("SELECT user_id FROM memories WHERE memory_id = $1", uuid.UUID(a))
        await self.delete(a)
        await self.delete(b)
        await self.create(user, "agent", text)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
async def test_any_delivery_of_the_changelog_converges_qdrant_on_postgres(
    data: st.DataObject, pool: asyncpg.Pool, qdrant: AsyncQdrantClient
) -> None:
    await pool.execute(TRUNCATE)
    index = VectorIndex(qdrant, f"prop{next(_names)}", CachedEmbedder(HashingEmbedder()))
    await index.ensure_collection()
    history = History(pool)
    pending: list[str] = []  # produced, not yet delivered
    dropped: list[str] = []  # lost on the way; the relay produces them again at the end
    delivered = 0
    try:
        for _ in range(data.draw(st.integers(3, 30), label="steps")):
            step = data.draw(
                st.sampled_from(["create", "update", "consolidate", "delete", "deliver", "deliver", "drop"]),
                label="step",
            )
            before = len(history.events)
            live = history.live
            if (
                step == "create"
                or (step in ("update", "delete") and not live)
                or (step == "consolidate" and len(live) < 2)
            ):
                author = data.draw(st.sampled_from(["agent", "user"]), label="author")
                await history.create(data.draw(st.sampled_from(USERS), label="user"), author, data.draw(TEXTS))
            elif step == "update":
                await history.update(data.draw(st.sampled_from(live), label="update"), data.draw(TEXTS))
            elif step == "delete":
                await history.delete(data.draw(st.sampled_from(live), label="delete"))
            elif step == "consolidate":
                a, b = data.draw(st.lists(st.sampled_from(live), min_size=2, max_size=2, unique=True), label="pair")
                await history.consolidate(a, b, data.draw(TEXTS))
            elif step == "deliver" and pending:
                # a shuffled, possibly duplicated batch of the events produced so far (the rest are delayed)
                batch = data.draw(st.lists(st.sampled_from(pending), min_size=1, max_size=6), label="batch")
                await converge(pool, index, batch)
                delivered += len(batch)
                for mid in dict.fromkeys(batch):  # in batch order: the draws must not depend on uuids
                    if data.draw(st.booleans(), label="consumed"):  # else: delivered again later
                        pending.remove(mid)
            elif step == "drop" and pending:
                lost = data.draw(st.sampled_from(pending), label="lost")
                pending.remove(lost)
                dropped.append(lost)
            pending += history.events[before:]
        # the relay's replay: everything dropped or still in flight, in any order, in batches of any size
        rest = data.draw(st.permutations(pending + dropped), label="replay")
        while rest:
            size = data.draw(st.integers(1, 8), label="replay batch")
            await converge(pool, index, rest[:size])
            rest = rest[size:]
        await assert_qdrant_equals_postgres(pool, index)
        # and applying everything once more changes nothing
        assert set((await converge(pool, index, history.events)).values()) <= {"unchanged", "absent"}
    finally:
        await qdrant.delete_collection(await alias_target(qdrant, index.collection) or index.collection)


async def test_a_point_is_never_replaced_by_an_older_version(pool: asyncpg.Pool, qdrant: AsyncQdrantClient) -> None:
    await pool.execute(TRUNCATE)
    index = VectorIndex(qdrant, f"older{next(_names)}", CachedEmbedder(HashingEmbedder()))
    await index.ensure_collection()
    history = History(pool)
    await history.create("ana", "agent", "Prefers tea")
    mid = history.live[0]
    await history.update(mid, "Prefers green tea")
    await converge(pool, index, [mid])
    assert (await index.get(mid) or {})["version"] == 2
    # a slow writer that read version 1 must not win: simulate PostgreSQL going back to version 1
    await _change(pool, "UPDATE memories SET version = 1, text = 'Prefers tea' WHERE memory_id = $1", uuid.UUID(mid))
    assert await converge(pool, index, [mid]) == {mid: "newer"}
    assert (await index.get(mid) or {})["version"] == 2
    # deletes win whatever version the point holds
    await history.delete(mid)
    assert await converge(pool, index, [mid]) == {mid: "delete"}
    assert await index.get(mid) is None
    assert await converge(pool, index, [mid, mid]) == {mid: "absent"}
