"""The embedded Qdrant Edge store (memwright.index.edge): one process at a time, an alias that
survives a restart, nothing lost when the process is killed, and plain errors otherwise."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import uuid
from pathlib import Path

import pytest
from memwright.index.backend import CollectionMissing, Point, QdrantUnavailable
from memwright.index.edge import EdgeBackend


def points(n: int, user: str = "ana") -> list[Point]:
    return [Point(str(uuid.UUID(int=i + 1)), {"user_id": user, "version": 1}, [1.0, float(i), 0.5]) for i in range(n)]


async def test_a_store_is_opened_by_one_process_at_a_time_and_the_error_names_the_holder(tmp_path: Path) -> None:
    held = EdgeBackend.open(tmp_path)
    try:
        with pytest.raises(QdrantUnavailable, match=r"open in another process \(pid \d+.*Stop the indexer"):
            EdgeBackend.open(tmp_path)
    finally:
        await held.close()
    again = EdgeBackend.open(tmp_path)  # released on close
    await again.close()


async def test_the_alias_and_the_points_survive_a_reopen(tmp_path: Path) -> None:
    store = EdgeBackend.open(tmp_path)
    await store.create_collection("memories__a", 3)
    await store.create_collection("memories__b", 3)
    assert await store.create_alias("memories", "memories__a")
    assert not await store.create_alias("memories", "memories__b")  # taken: the first one stays
    await store.upsert("memories__b", points(7))
    assert await store.switch_alias("memories", "memories__b") == "memories__a"
    assert await store.drop_collection("memories__a") and not await store.collection_exists("memories__a")
    await store.close()

    store = EdgeBackend.open(tmp_path)
    try:
        assert await store.alias_target("memories") == "memories__b"
        assert await store.count("memories") == 7 and await store.vector_size("memories") == 3
        assert [h[0] for h in await store.search("memories", [1.0, 0.0, 0.0], "ana", 1)] == [points(1)[0].id]
    finally:
        await store.close()


async def test_points_written_by_a_process_killed_before_it_closed_the_store_are_kept(tmp_path: Path) -> None:
    writer = textwrap.dedent(
        f"""
        import asyncio, os, signal, uuid
        from memwright.index.backend import Point
        from memwright.index.edge import EdgeBackend

        async def main():
            store = EdgeBackend.open({str(tmp_path)!r})
            await store.create_collection("memories__a", 3)
            await store.create_alias("memories", "memories__a")
            await store.upsert("memories", [
                Point(str(uuid.UUID(int=i + 1)), {{"user_id": "ana", "version": 1}}, [1.0, float(i), 0.5])
                for i in range(50)
            ])
            await store.delete("memories", [str(uuid.UUID(int=1))])
            os.kill(os.getpid(), signal.SIGKILL)  # no flush, no close

        asyncio.run(main())
        """
    )
    done = subprocess.run([sys.executable, "-c", writer], capture_output=True, text=True, timeout=60)
    assert done.returncode == -9, done.stderr
    store = EdgeBackend.open(tmp_path)  # the dead process's lock went with it
    try:
        assert await store.count("memories") == 49
        assert await store.retrieve("memories", [str(uuid.UUID(int=1))]) == []
    finally:
        await store.close()


async def test_missing_collections_and_unsafe_names_are_plain_errors(tmp_path: Path) -> None:
    store = EdgeBackend.open(tmp_path)
    try:
        with pytest.raises(CollectionMissing, match="no collection 'memories'"):
            await store.count("memories")
        with pytest.raises(ValueError, match="not a collection name"):
            await store.create_collection("../elsewhere", 3)
        with pytest.raises(CollectionMissing):
            await store.switch_alias("memories", "memories__none")
    finally:
        await store.close()


def test_a_store_left_by_qdrant_clients_local_mode_is_refused_with_what_to_do(tmp_path: Path) -> None:
    (tmp_path / "meta.json").write_text('{"collections": {}, "aliases": {}}')
    with pytest.raises(QdrantUnavailable, match=r"local mode.*remove that folder.*memwright index rebuild"):
        EdgeBackend.open(tmp_path)
