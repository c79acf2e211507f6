"""`memwright index check` finds each kind of drift per user; `memwright index rebuild` repairs
it behind an alias while searches keep answering, and keeps changes made during the build."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import asyncpg
import pytest
from memwright.embeddings import CachedEmbedder, HashingEmbedder
from memwright.index.apply import converge
from memwright.index.drift import find_drift
from memwright.index.rebuild import Progress, rebuild
from memwright.index.vectors import VectorIndex, alias_target, payload_for
from qdrant_client import AsyncQdrantClient, models

from tests.conftest import ROOT

ALIAS = "memories"
TOPICS = ["coffee", "hiking trips", "jazz records", "metric units", "French replies"]


async def seed(pool: asyncpg.Pool, users: dict[str, int]) -> dict[str, list[str]]:
    """Insert user-written memories (no budget applies to them); return their ids per user."""
    ids: dict[str, list[str]] = {}
    rows = []
    for user, n in users.items():
        for i in range(n):
            mid = uuid.uuid4()
            ids.setdefault(user, []).append(str(mid))
            rows.append((mid, user, "user", f"{user} likes {TOPICS[i % len(TOPICS)]}, note {i}"))
    await pool.executemany("INSERT INTO memories (memory_id, user_id, author, text) VALUES ($1, $2, $3, $4)", rows)
    return ids


async def as_user(pool: asyncpg.Pool, sql: str, *args: object) -> None:
    """Change user-written memories (the database lets only the user's own transactions do that)."""
    async with pool.acquire() as conn, conn.transaction():
        await conn.execute("SET LOCAL memwright.actor = 'user'")
        await conn.execute(sql, *args)


@pytest.fixture
async def client(tmp_path: Path) -> AsyncIterator[AsyncQdrantClient]:
    c = AsyncQdrantClient(path=str(tmp_path / "qdrant"))
    yield c
    await c.close()


def embedder() -> CachedEmbedder:
    return CachedEmbedder(HashingEmbedder())


async def test_check_finds_missing_stale_and_orphaned_points_per_user(
    db: asyncpg.Pool, client: AsyncQdrantClient
) -> None:
    ids = await seed(db, {"ana": 5, "ben": 5, "cho": 5, "dan": 5})
    await rebuild(db, client, ALIAS, embedder())
    index = VectorIndex(client, ALIAS, embedder())
    assert (await find_drift(db, index)).total == 0

    # missing: ana's point is lost
    await client.delete(ALIAS, points_selector=models.PointIdsList(points=[ids["ana"][0]]))
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


async def test_rebuild_repairs_drift_while_a_concurrent_search_keeps_returning_results(
    db: asyncpg.Pool, client: AsyncQdrantClient
) -> None:
    ids = await seed(db, {"ana": 400, "ben": 400})
    await rebuild(db, client, ALIAS, embedder())
    first = await alias_target(client, ALIAS)
    index = VectorIndex(client, ALIAS, embedder())
    await client.delete(ALIAS, points_selector=models.PointIdsList(points=ids["ana"][:10]))  # missing
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
        done = await rebuild(db, client, ALIAS, embedder(), batch=50, progress=steps.append)
    finally:
        rebuilding = False
        await searcher
    assert len(answers) >= 5, "the search loop should have run during the rebuild"
    assert all(n == 3 for n in answers), f"a search during the rebuild saw an empty or partial index: {answers}"
    assert [s.done for s in steps] == [*range(50, 796, 50), 795]
    assert (done.previous, done.memories, done.dropped) == (first, 795, True)
    assert await alias_target(client, ALIAS) == done.collection != first
    assert not await client.collection_exists(first)  # the old collection is dropped
    assert (await find_drift(db, index)).total == 0


async def test_changes_committed_during_a_rebuild_are_not_lost(db: asyncpg.Pool, client: AsyncQdrantClient) -> None:
    ids = await seed(db, {"ana": 300, "ben": 300})
    await rebuild(db, client, ALIAS, embedder())
    live = VectorIndex(client, ALIAS, embedder())
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
    done = await rebuild(db, client, ALIAS, embedder(), batch=25, progress=lambda p: first_batch_copied.set())
    changed = await meanwhile
    assert done.repaired == 3
    assert (await find_drift(db, live)).total == 0
    points = await live.payloads(changed)
    assert points[changed[0]]["version"] == 2 and changed[1] not in points and changed[2] in points


async def test_a_point_ahead_of_postgres_is_drift_that_only_repair_or_rebuild_overwrites(
    db: asyncpg.Pool, client: AsyncQdrantClient
) -> None:
    ids = await seed(db, {"ana": 3})
    await rebuild(db, client, ALIAS, embedder())
    index = VectorIndex(client, ALIAS, embedder())
    ahead = ids["ana"][0]
    row = await db.fetchrow("SELECT * FROM memories WHERE memory_id = $1", uuid.UUID(ahead))
    await index.write([{**dict(row), "version": 9}])  # say, PostgreSQL was restored from a backup
    assert (await find_drift(db, index)).stale == {ahead: "ana"}
    assert await converge(db, index, [ahead]) == {ahead: "newer"}  # events never go back a version
    assert await converge(db, index, [ahead], trust_versions=False) == {ahead: "upsert"}
    assert await index.get(ahead) == payload_for(row)


# ---- the commands, as an operator runs them -----------------------------------------------


def memwright(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "memwright", *args],
        env={**os.environ, **env},
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )


async def test_index_commands_report_drift_exit_1_and_rebuild_to_exit_0(
    db: asyncpg.Pool, pg_dsn: str, tmp_path: Path
) -> None:
    env = {"MEMWRIGHT_PG_DSN": pg_dsn, "MEMWRIGHT_QDRANT_PATH": str(tmp_path / "qdrant"), "MEMWRIGHT_LOG_JSON": "0"}
    ids = await seed(db, {"ana": 30, "ben": 30})

    nothing = await asyncio.to_thread(memwright, "index", "check", env=env)
    assert nothing.returncode == 1 and "no collection 'memories'" in nothing.stdout, nothing.stdout + nothing.stderr

    built = await asyncio.to_thread(memwright, "index", "rebuild", env=env)
    assert built.returncode == 0, built.stdout + built.stderr
    assert "60/60 memories (100%)" in built.stdout
    assert "rebuilt 60 memories in" in built.stdout and "memories/s, embedder hashing" in built.stdout

    clean = await asyncio.to_thread(memwright, "index", "check", env=env)
    assert clean.returncode == 0, clean.stdout + clean.stderr
    assert "in sync: 0 missing, 0 stale, 0 orphaned" in clean.stdout

    await as_user(db, "DELETE FROM memories WHERE memory_id = $1", uuid.UUID(ids["ben"][0]))
    await as_user(db, "UPDATE memories SET version = 2 WHERE memory_id = $1", uuid.UUID(ids["ana"][0]))
    drifted = await asyncio.to_thread(memwright, "index", "check", "--settle", "0", env=env)
    assert drifted.returncode == 1, drifted.stdout + drifted.stderr
    assert "DRIFT: 0 missing, 1 stale, 1 orphaned in 2 user(s)" in drifted.stdout
    lines = drifted.stdout.splitlines()
    assert any(line.split() == ["ana", "0", "1", "0"] for line in lines), drifted.stdout
    assert any(line.split() == ["ben", "0", "0", "1"] for line in lines), drifted.stdout

    as_json = await asyncio.to_thread(memwright, "index", "check", "--settle", "0", "--json", env=env)
    report = json.loads(as_json.stdout)
    assert report["ids"]["orphaned"] == [ids["ben"][0]] and report["users"]["ana"] == {"stale": 1}

    metrics_file = tmp_path / "drift.prom"
    repaired = await asyncio.to_thread(
        memwright, "index", "check", "--settle", "0", "--repair", "--metrics-file", str(metrics_file), env=env
    )
    assert repaired.returncode == 0 and "repaired 2 point(s)" in repaired.stdout, repaired.stdout
    assert 'memwright_indexer_drift_points{kind="stale"} 0.0' in metrics_file.read_text()


async def test_commands_say_plainly_that_a_running_indexer_holds_the_embedded_store(
    pg_dsn: str, tmp_path: Path
) -> None:
    path = tmp_path / "qdrant"
    held = AsyncQdrantClient(path=str(path))  # as a running indexer would
    try:
        env = {"MEMWRIGHT_PG_DSN": pg_dsn, "MEMWRIGHT_QDRANT_PATH": str(path)}
        done = await asyncio.to_thread(memwright, "index", "rebuild", env=env)
    finally:
        await held.close()
    assert done.returncode == 2
    assert "is open in another process" in done.stderr and "Stop the indexer" in done.stderr, done.stderr
