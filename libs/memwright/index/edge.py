"""The embedded index: Qdrant Edge (qdrant-edge-py), Qdrant's engine in-process and on disk.

An Edge shard is one collection and has no aliases, so the store keeps them itself:

    <MEMWRIGHT_QDRANT_PATH>/
      store.lock              flock held by the one process that has the store open (its pid inside)
      aliases.json            {"memories": "memories__20261203T101500_a1b2c3"}, replaced atomically
      collections/<name>/     one Edge shard per physical collection (its WAL, segments, config)

Rules, and what is not supported:
- **One process at a time** opens a store (the lock; Edge's own WAL lock says the same per
  shard). The indexer holds it while it runs; `memwright index check|rebuild` on the same
  path exit 2 and say to stop the indexer (or to use a Qdrant server). No other service
  opens it: the api does not read vectors and the curator compares a user's memories in
  process (docs/indexing.md, "search_similar").
- **Calls run on the event loop, one at a time.** Edge answers in microseconds to
  milliseconds and holds the GIL, so a thread would buy nothing; running each call whole
  means an alias switch or a dropped collection never meets a write half-way in this process.
- An alias moves by writing aliases.json beside itself and renaming it over the old one
  (atomic on POSIX); the process's own view changes in the same step.
- Every search is filtered to one user, so the shard builds no HNSW graph (m=0): the
  user_id keyword index (a tenant index) finds the user's points and they are scored exactly.
- Durability: updates go to the shard's write-ahead log at once (a SIGKILLed indexer loses
  nothing it wrote); segments are flushed at most every FLUSH_SECONDS and on close.
"""

from __future__ import annotations

import fcntl
import json
import os
import re
import shutil
import time
from pathlib import Path
from typing import IO, Any

from qdrant_edge import (
    CountRequest,
    Distance,
    EdgeConfig,
    EdgeShard,
    EdgeVectorParams,
    FieldCondition,
    Filter,
    HnswIndexConfig,
    KeywordIndexParams,
    MatchValue,
    Query,
    QueryRequest,
    ScrollRequest,
    UpdateOperation,
)
from qdrant_edge import Point as EdgePoint

from memwright.index.backend import CollectionMissing, Point, QdrantUnavailable

FLUSH_SECONDS = 5.0
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,199}$")  # a collection name is a folder name


def _config(dim: int) -> EdgeConfig:
    return EdgeConfig(
        vectors=EdgeVectorParams(size=dim, distance=Distance.Cosine),
        hnsw_config=HnswIndexConfig(m=0, ef_construct=100, full_scan_threshold=10_000),  # no graph: see above
    )


def _user(user_id: str) -> Filter:
    return Filter(must=[FieldCondition(key="user_id", match=MatchValue(user_id))])


def _vector(v: Any) -> list[float] | None:
    return None if v is None else list(v.get("", v)) if isinstance(v, dict) else list(v)


class EdgeBackend:
    """The embedded store at one path; `EdgeBackend.open(path)` takes it for this process."""

    def __init__(self, path: Path, lock: IO[str]) -> None:
        self.path = path
        self.where = f"embedded Qdrant Edge store {path}"
        self._lock = lock
        self._aliases: dict[str, str] = self._read_aliases()
        self._shards: dict[str, EdgeShard] = {}
        self._flushed: dict[str, float] = {}

    @classmethod
    def open(cls, path: str | Path) -> EdgeBackend:
        root = Path(path)
        if (root / "meta.json").exists() and not (root / "aliases.json").exists():
            raise QdrantUnavailable(
                f"{root} holds a store of qdrant-client's local mode, which memwright no longer uses; remove "
                "that folder (the index is rebuilt from PostgreSQL) and run `memwright index rebuild`"
            )
        (root / "collections").mkdir(parents=True, exist_ok=True)
        lock = open(root / "store.lock", "a+")
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            lock.seek(0)
            holder = lock.read().strip() or "?"
            lock.close()
            raise QdrantUnavailable(
                f"the embedded Qdrant store at {root} is open in another process (pid {holder}; a running indexer "
                "holds it: one process at a time opens an embedded store). Stop the indexer and try again, or run "
                "a Qdrant server and set MEMWRIGHT_QDRANT_URL"
            ) from None
        lock.truncate(0)
        lock.write(str(os.getpid()))
        lock.flush()
        return cls(root, lock)

    # ---- the alias file -----------------------------------------------------------------
    def _read_aliases(self) -> dict[str, str]:
        file = self.path / "aliases.json"
        return dict(json.loads(file.read_text())) if file.exists() else {}

    def _write_aliases(self, aliases: dict[str, str]) -> None:
        """Replace aliases.json in one step (write beside it, fsync, rename), then adopt it."""
        tmp = self.path / "aliases.json.tmp"
        with open(tmp, "w") as f:
            json.dump(aliases, f, indent=1, sort_keys=True)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, self.path / "aliases.json")
        dir_fd = os.open(self.path, os.O_RDONLY)
        try:
            os.fsync(dir_fd)
        finally:
            os.close(dir_fd)
        self._aliases = aliases

    # ---- shards -------------------------------------------------------------------------
    def _dir(self, physical: str) -> Path:
        if not _NAME.match(physical):
            raise ValueError(f"{physical!r} is not a collection name (letters, digits, '_', '.', '-')")
        return self.path / "collections" / physical

    def _shard(self, name: str) -> EdgeShard:
        physical = self._aliases.get(name, name)
        shard = self._shards.get(physical)
        if shard is None:
            folder = self._dir(physical)
            if not folder.is_dir():
                raise CollectionMissing(f"no collection {name!r} in the {self.where}")
            shard = self._shards[physical] = EdgeShard.load(str(folder))
            self._flushed[physical] = time.monotonic()
        return shard

    def _wrote(self, name: str) -> None:
        physical = self._aliases.get(name, name)
        if time.monotonic() - self._flushed.get(physical, 0.0) > FLUSH_SECONDS:
            self._shards[physical].flush()
            self._flushed[physical] = time.monotonic()

    # ---- collections and the alias ------------------------------------------------------
    async def create_collection(self, name: str, dim: int) -> None:
        folder = self._dir(name)
        if folder.exists():
            raise ValueError(f"collection {name!r} exists already in the {self.where}")
        shard = EdgeShard.create(str(folder), _config(dim))
        shard.update(UpdateOperation.create_field_index("user_id", KeywordIndexParams(is_tenant=True)))
        self._shards[name] = shard
        self._flushed[name] = time.monotonic()

    async def drop_collection(self, name: str) -> bool:
        folder = self._dir(name)
        if name in self._shards:
            self._shards.pop(name).close()
        if any(target == name for target in self._aliases.values()):
            self._write_aliases({a: t for a, t in self._aliases.items() if t != name})
        if not folder.exists():
            return False
        shutil.rmtree(folder)
        return True

    async def collection_exists(self, name: str) -> bool:
        return self._dir(name).is_dir()

    async def alias_target(self, alias: str) -> str | None:
        if alias in self._aliases:
            return self._aliases[alias]
        return alias if await self.collection_exists(alias) else None

    async def create_alias(self, alias: str, target: str) -> bool:
        if alias in self._aliases:
            return False
        self._write_aliases({**self._aliases, alias: target})
        return True

    async def switch_alias(self, alias: str, target: str) -> str | None:
        if not await self.collection_exists(target):
            raise CollectionMissing(f"no collection {target!r} in the {self.where}")
        previous = self._aliases.get(alias)
        self._write_aliases({**self._aliases, alias: target})
        return previous

    async def vector_size(self, name: str) -> int:
        self._shard(name)  # exists
        config = json.loads((self._dir(self._aliases.get(name, name)) / "edge_config.json").read_text())
        return int(config["vectors"][""]["size"])

    # ---- points -------------------------------------------------------------------------
    async def upsert(self, name: str, points: list[Point]) -> None:
        if points:
            shard = self._shard(name)
            shard.update(UpdateOperation.upsert_points([EdgePoint(p.id, p.vector or [], p.payload) for p in points]))
            self._wrote(name)

    async def delete(self, name: str, ids: list[str]) -> None:
        if ids:
            self._shard(name).update(UpdateOperation.delete_points(list(ids)))
            self._wrote(name)

    async def retrieve(self, name: str, ids: list[str], with_vectors: bool = False) -> list[Point]:
        records = self._shard(name).retrieve(list(ids), with_payload=True, with_vector=with_vectors)
        return [Point(str(r.id), dict(r.payload or {}), _vector(r.vector)) for r in records]

    async def scroll(
        self, name: str, offset: str | None, limit: int, with_vectors: bool = False
    ) -> tuple[list[Point], str | None]:
        records, following = self._shard(name).scroll(
            ScrollRequest(offset=offset, limit=limit, with_payload=True, with_vector=with_vectors)
        )
        points = [Point(str(r.id), dict(r.payload or {}), _vector(r.vector)) for r in records]
        return points, None if following is None else str(following)

    async def count(self, name: str) -> int:
        return int(self._shard(name).count(CountRequest(exact=True)))

    async def search(self, name: str, vector: list[float], user_id: str, limit: int) -> list[tuple[str, float]]:
        hits = self._shard(name).query(
            QueryRequest(limit=limit, query=Query.Nearest(list(vector)), filter=_user(user_id), with_payload=False)
        )
        return [(str(h.id), float(h.score)) for h in hits]

    async def optimize(self, name: str) -> None:
        """Merge segments and drop deleted points (blocking: `index rebuild` runs it before its switch)."""
        self._shard(name).optimize()

    async def close(self) -> None:
        for shard in self._shards.values():
            shard.flush()
            shard.close()
        self._shards.clear()
        fcntl.flock(self._lock, fcntl.LOCK_UN)
        self._lock.close()
