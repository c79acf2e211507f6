"""The index contract, run on every backend behind `IndexBackend` (invariant 9): the embedded
Qdrant Edge store always, a Qdrant server when MEMWRIGHT_QDRANT_URL names one (skipped with
that reason otherwise; docs/indexing.md says how to start one in a container).

- the indexer's convergence: whatever order, delay, duplication or loss the changelog
  suffers, Qdrant ends holding exactly PostgreSQL's memories, and never goes back a version;
- `index check`: each kind of drift found per user;
- `index rebuild`: repairs drift behind the alias while searches keep answering, and switches
  while the indexer keeps writing without losing a change;
- erasure: erasing a user removes every point of theirs and only theirs.

Real PostgreSQL (the session database); the events go through `converge`, the function the
indexer applies each consumed batch with.
"""

from __future__ import annotations

import asyncio
import hashlib
import itertools
import os
import uuid
from collections.abc import AsyncIterator
from datetime import UTC
from typing import Any

import asyncpg
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from memwright.embeddings import CachedEmbedder, HashingEmbedder, hashing_embed
from memwright.index.apply import converge
from memwright.index.backend import IndexBackend, Point
from memwright.index.drift import find_drift
from memwright.index.edge import EdgeBackend
from memwright.index.rebuild import Progress, rebuild
from memwright.index.relay import pending_memory_ids
from memwright.index.server import ServerBackend
from memwright.index.vectors import VectorIndex, payload_for
from memwright.store.erasure import erase

from tests.conftest import SESSION, TABLES
from tests.integration.helpers import as_user
from tests.integration.helpers import seed_memories as seed

TRUNCATE = f"TRUNCATE {', '.join(TABLES)} RESTART IDENTITY"
USERS = [f"user-{i}" for i in range(8)]
TEXTS = st.text(
    alphabet=st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00"), min_size=1, max_size=40
)
_names = itertools.count()


@pytest.fixture(scope="module", params=["edge", "server"])
async def backend(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> AsyncIterator[IndexBackend]:
    if request.param == "server":
        url = os.environ.get("MEMWRIGHT_QDRANT_URL")
        if not url:
            pytest.skip("MEMWRIGHT_QDRANT_URL is not set: the contract runs on a Qdrant server only when it names one")
        b: IndexBackend = ServerBackend.connect(url, os.environ.get("MEMWRIGHT_QDRANT_API_KEY", ""))
    else:
        b = EdgeBackend.open(tmp_path_factory.mktemp("edge"))
    yield b
    await b.close()


@pytest.fixture
async def alias(backend: IndexBackend) -> AsyncIterator[str]:
    """A fresh alias name per test (a server may be shared); its live collection is dropped after."""
    name = f"c{SESSION}_{next(_names)}"
    yield name
    target = await backend.alias_target(name)
    if target:
        await backend.drop_collection(target)


def embedder() -> CachedEmbedder:
    return CachedEmbedder(HashingEmbedder())


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
    actual = {p.id: p for p in await index.all_points(with_vectors=True)}
    assert actual.keys() == expected.keys(), "point ids differ from memory ids"
    for mid, (payload, text) in expected.items():
        assert actual[mid].payload == payload, mid
        # the vector is the embedding of the CURRENT text, not of an earlier version
        assert np.allclose(actual[mid].vector or [], hashing_embed(text), atol=1e-5), mid


class History:
    """Memory changes committed to PostgreSQL, each leaving a changelog event (its memory id)."""

    def __init__(self, pool: asyncpg.Pool) -> None:
        self.pool = pool
        self.live: list[str] = []
        self.events: list[str] = []

    async def create(self, user: str, author: str, text: str) -> None:
        mid = str(uuid.uuid4())
        await as_user(
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
        await as_user(
            self.pool,
            "UPDATE memories SET text = $2, version = version + 1, updated_at = clock_timestamp() WHERE memory_id = $1",
            uuid.UUID(mid),
            text,
        )
        self.events.append(mid)

    async def delete(self, mid: str) -> None:
        await as_user(self.pool, "DELETE FROM memories WHERE memory_id = $1", uuid.UUID(mid))
        self.live.remove(mid)
        self.events.append(mid)

    async def consolidate(self, a: str, b: str, text: str) -> None:
        """Two memories become one new memory (two deletes and a create, as the agent does it)."""
        user = await self.pool.fetchval("SELECT user_id FROM memories WHERE memory_id = $1", uuid.UUID(a))
        await self.delete(a)
        await self.delete(b)
        await self.create(user, "agent", text)


# ---- the indexer's convergence ------------------------------------------------------------


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
async def test_any_delivery_of_the_changelog_converges_qdrant_on_postgres(
    data: st.DataObject, pool: asyncpg.Pool, backend: IndexBackend
) -> None:
    await pool.execute(TRUNCATE)
    index = VectorIndex(backend, f"prop{SESSION}_{next(_names)}", embedder())
    await index.ensure_collection()
    history = History(pool)
    pending: list[str] = []  # produced, not yet delivered
    dropped: list[str] = []  # lost on the way; the relay produces them again at the end
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
        await backend.drop_collection(await backend.alias_target(index.collection) or index.collection)


async def test_a_point_is_never_replaced_by_an_older_version(
    db: asyncpg.Pool, backend: IndexBackend, alias: str
) -> None:
    index = VectorIndex(backend, alias, embedder())
    await index.ensure_collection()
    history = History(db)
    await history.create("ana", "agent", "Prefers tea")
    mid = history.live[0]
    await history.update(mid, "Prefers green tea")
    await converge(db, index, [mid])
    assert (await index.get(mid) or {})["version"] == 2
    # a slow writer that read version 1 must not win: simulate PostgreSQL going back to version 1
    await as_user(db, "UPDATE memories SET version = 1, text = 'Prefers tea' WHERE memory_id = $1", uuid.UUID(mid))
    assert await converge(db, index, [mid]) == {mid: "newer"}
    assert (await index.get(mid) or {})["version"] == 2
    # deletes win whatever version the point holds
    await history.delete(mid)
    assert await converge(db, index, [mid]) == {mid: "delete"}
    assert await index.get(mid) is None
    assert await converge(db, index, [mid, mid]) == {mid: "absent"}


# ---- index check --------------------------------------------------------------------------


async def test_check_finds_missing_stale_and_orphaned_points_per_user(
    db: asyncpg.Pool, backend: IndexBackend, alias: str
) -> None:
    ids = await seed(db, {"ana": 5, "ben": 5, "cho": 5, "dan": 5})
    await rebuild(db, backend, alias, embedder())
    index = VectorIndex(backend, alias, embedder())
    assert (await find_drift(db, index)).total == 0

    # missing: ana's point is lost
    await backend.delete(alias, [ids["ana"][0]])
    # stale: ben's point holds an older version and text
    stale = ids["ben"][1]
    await as_user(
        db,
        "UPDATE memories SET text = 'ben now likes tea', version = 2, updated_at = now() WHERE memory_id = $1",
        uuid.UUID(stale),
    )
    # orphaned: cho's memory is gone from PostgreSQL (its event was lost), and a stray point for dan
    await as_user(db, "DELETE FROM memories WHERE memory_id = $1", uuid.UUID(ids["cho"][2]))
    stray = str(uuid.uuid4())
    row = {"memory_id": stray, "user_id": "dan", "author": "agent", "kind": "preference", "text": "x", "version": 1}
    await index.write([{**row, "updated_at": "2020-01-01T00:00:00+00:00"}])

    drift = await find_drift(db, index)
    assert drift.missing == {ids["ana"][0]: "ana"}
    assert drift.stale == {stale: "ben"}
    assert drift.orphaned == {ids["cho"][2]: "cho", stray: "dan"}
    assert {u: dict(c) for u, c in drift.by_user().items()} == {
        "ana": {"missing": 1},
        "ben": {"stale": 1},
        "cho": {"orphaned": 1},
        "dan": {"orphaned": 1},
    }
    assert (drift.memories, drift.points, drift.total) == (19, 20, 4)

    # a difference whose change is still in the outbox is lag, not drift
    await db.execute("INSERT INTO index_outbox (memory_id, user_id) VALUES ($1, 'ben')", uuid.UUID(stale))
    drift = await find_drift(db, index)
    assert (drift.total, drift.pending, drift.stale) == (3, 1, {})


async def test_a_point_ahead_of_postgres_is_drift_that_only_repair_or_rebuild_overwrites(
    db: asyncpg.Pool, backend: IndexBackend, alias: str
) -> None:
    ids = await seed(db, {"ana": 3})
    await rebuild(db, backend, alias, embedder())
    index = VectorIndex(backend, alias, embedder())
    ahead = ids["ana"][0]
    row = await db.fetchrow("SELECT * FROM memories WHERE memory_id = $1", uuid.UUID(ahead))
    await index.write([{**dict(row), "version": 9}])  # say, PostgreSQL was restored from a backup
    assert (await find_drift(db, index)).stale == {ahead: "ana"}
    assert await converge(db, index, [ahead]) == {ahead: "newer"}  # events never go back a version
    assert await converge(db, index, [ahead], trust_versions=False) == {ahead: "upsert"}
    assert await index.get(ahead) == payload_for(row)


# ---- index rebuild ------------------------------------------------------------------------


async def test_rebuild_repairs_drift_while_a_concurrent_search_keeps_returning_results(
    db: asyncpg.Pool, backend: IndexBackend, alias: str
) -> None:
    ids = await seed(db, {"ana": 400, "ben": 400})
    await rebuild(db, backend, alias, embedder())
    first = await backend.alias_target(alias)
    index = VectorIndex(backend, alias, embedder())
    await backend.delete(alias, ids["ana"][:10])  # missing
    await as_user(db, "DELETE FROM memories WHERE memory_id = ANY($1::uuid[])", ids["ben"][:5])  # orphaned
    await as_user(db, "UPDATE memories SET version = 3 WHERE memory_id = ANY($1::uuid[])", ids["ben"][5:8])  # stale
    before = await find_drift(db, index)
    assert (len(before.missing), len(before.orphaned), len(before.stale)) == (10, 5, 3)

    answers: list[int] = []
    rebuilding = True

    async def search_all_the_time() -> None:
        while rebuilding:
            answers.append(len(await index.search_similar("ana", "likes coffee", limit=3)))
            await asyncio.sleep(0)

    searcher = asyncio.create_task(search_all_the_time())
    steps: list[Progress] = []
    try:
        done = await rebuild(db, backend, alias, embedder(), batch=50, progress=steps.append)
    finally:
        rebuilding = False
        await searcher
    assert len(answers) >= 5, "the search loop should have run during the rebuild"
    assert all(n == 3 for n in answers), f"a search during the rebuild saw an empty or partial index: {answers}"
    assert [s.done for s in steps] == [*range(50, 796, 50), 795]
    assert (done.previous, done.memories, done.dropped) == (first, 795, True)
    assert await backend.alias_target(alias) == done.collection != first
    assert first and not await backend.collection_exists(first)  # the old collection is dropped
    assert (await find_drift(db, index)).total == 0


async def test_changes_committed_during_a_rebuild_are_not_lost(
    db: asyncpg.Pool, backend: IndexBackend, alias: str
) -> None:
    ids = await seed(db, {"ana": 300, "ben": 300})
    await rebuild(db, backend, alias, embedder())
    live = VectorIndex(backend, alias, embedder())
    first_batch_copied = asyncio.Event()

    async def the_indexer_meanwhile() -> list[str]:
        """Change memories the rebuild has already copied and apply them, like the indexer, to the alias."""
        await first_batch_copied.wait()
        copied = sorted(ids["ana"] + ids["ben"])[:2]
        await as_user(
            db,
            "UPDATE memories SET text = 'ana switched to tea', version = 2 WHERE memory_id = $1",
            uuid.UUID(copied[0]),
        )
        await as_user(db, "DELETE FROM memories WHERE memory_id = $1", uuid.UUID(copied[1]))
        new = uuid.UUID("00000000-0000-4000-8000-000000000001")  # sorts before every copied id: never copied
        await db.execute(
            "INSERT INTO memories (memory_id, user_id, author, text) VALUES ($1, 'ben', 'user', 'new')", new
        )
        changed = [*copied, str(new)]
        await converge(db, live, changed)  # still the OLD collection: the alias has not moved yet
        return changed

    meanwhile = asyncio.create_task(the_indexer_meanwhile())
    done = await rebuild(db, backend, alias, embedder(), batch=25, progress=lambda p: first_batch_copied.set())
    changed = await meanwhile
    assert done.repaired == 3
    assert (await find_drift(db, live)).total == 0
    points = await live.payloads(changed)
    assert points[changed[0]]["version"] == 2 and changed[1] not in points and changed[2] in points


async def test_rebuild_switches_while_the_indexer_keeps_writing(
    db: asyncpg.Pool, backend: IndexBackend, alias: str
) -> None:
    """An indexer converging changes through the alias while the rebuild copies, switches,
    repairs and drops: every change lands in the collection the alias ends on, none is lost."""
    ids = await seed(db, {"ana": 200, "ben": 200})
    await rebuild(db, backend, alias, embedder())
    first = await backend.alias_target(alias)
    live = VectorIndex(backend, alias, embedder())
    copied = asyncio.Event()  # set at each batch the rebuild copied
    rebuilding = True
    wrote_to: list[str | None] = []  # the collection behind the alias at each write

    async def indexer() -> None:
        after = 0
        for n in itertools.count():
            if rebuilding:
                await copied.wait()  # a write at each batch the rebuild copies
                copied.clear()
            else:
                after += 1
                if after > 5:
                    return  # and five after it finished
            mid = ids["ana" if n % 2 else "ben"][n % 200]
            await as_user(
                db,
                "UPDATE memories SET text = $2, version = version + 1, updated_at = clock_timestamp() "
                "WHERE memory_id = $1",
                uuid.UUID(mid),
                f"changed {n}",
            )
            wrote_to.append(await backend.alias_target(alias))
            await converge(db, live, [mid])

    writer = asyncio.create_task(indexer())
    try:
        done = await rebuild(db, backend, alias, embedder(), batch=20, progress=lambda p: copied.set())
    finally:
        rebuilding = False
        copied.set()
        await writer
    assert done.previous == first != done.collection == await backend.alias_target(alias)
    assert first in wrote_to and done.collection in wrote_to, "writes before and after the switch"
    assert (await find_drift(db, live)).total == 0
    await assert_qdrant_equals_postgres(db, live)


# ---- erasure ------------------------------------------------------------------------------


async def test_erasing_a_user_removes_every_point_of_theirs_and_only_theirs(
    db: asyncpg.Pool, backend: IndexBackend, alias: str
) -> None:
    ids = await seed(db, {"ana": 6, "ben": 4})
    await rebuild(db, backend, alias, embedder())
    index = VectorIndex(backend, alias, embedder())
    assert len(await index.search_similar("ana", "likes coffee", limit=10)) == 6
    async with db.acquire() as conn:
        record = await erase(conn, "ana", "ana")
    queued = await pending_memory_ids(db)
    assert record["counts"]["vector_deletes_queued"] == 6 and queued == set(ids["ana"])

    outcome = await converge(db, index, sorted(queued))  # what the indexer does with the relayed events
    assert set(outcome.values()) == {"delete"}
    assert await index.search_similar("ana", "likes coffee", limit=10) == []
    assert {p.payload["user_id"] for p in await index.all_points()} == {"ben"}
    assert len(await index.search_similar("ben", "likes coffee", limit=10)) == 4
    await db.execute("DELETE FROM index_outbox")  # relayed
    assert (await find_drift(db, index)).total == 0


async def test_points_keep_their_vectors_and_payloads_through_the_backend(backend: IndexBackend, alias: str) -> None:
    """The backend's own round trip: what is upserted is retrieved, scrolled, counted and found."""
    await backend.create_collection(alias, 4)
    points = [
        Point(str(uuid.UUID(int=i + 1)), {"user_id": f"u{i % 2}", "version": i}, [1.0, float(i), 0.0, 0.0])
        for i in range(5)
    ]
    await backend.upsert(alias, points)
    assert await backend.count(alias) == 5 and await backend.vector_size(alias) == 4
    got = {p.id: p for p in await backend.retrieve(alias, [points[1].id, str(uuid.uuid4())], with_vectors=True)}
    assert list(got) == [points[1].id] and got[points[1].id].payload == points[1].payload
    assert np.allclose(got[points[1].id].vector or [], np.array(points[1].vector) / np.linalg.norm(points[1].vector))
    page, following = await backend.scroll(alias, None, 3)
    rest, end = await backend.scroll(alias, following, 3)
    assert end is None and sorted(p.id for p in page + rest) == sorted(p.id for p in points)
    hits = await backend.search(alias, [1.0, 0.0, 0.0, 0.0], "u0", 10)
    assert [h[0] for h in hits] == [points[0].id, points[2].id, points[4].id]  # u0's, nearest first
    await backend.delete(alias, [points[0].id])
    assert await backend.count(alias) == 4
