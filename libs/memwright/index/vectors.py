"""The collection of memory vectors, on whichever backend (index/backend.py) the settings name.

Everything reads and writes through an ALIAS (`MEMWRIGHT_QDRANT_COLLECTION`, default
`memories`) that points at a physical collection `<alias>__<timestamp>`. A rebuild fills a
fresh physical collection and then moves the alias in one step, so a search sees either the
old complete collection or the new complete one, never an empty or half-built one. A Qdrant
server switches aliases atomically per request; the embedded Qdrant Edge store keeps them in
a file it replaces atomically (index/edge.py).
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable, Mapping
from datetime import UTC, datetime
from typing import Any

from memwright import metrics
from memwright.embeddings import Embedder, text_hash
from memwright.index.backend import IndexBackend, Point, new_collection_name

SCROLL_PAGE = 1000


def payload_for(row: Mapping[str, Any]) -> dict[str, Any]:
    """The payload a point must carry for this memories row; the indexer, check and rebuild share it.

    `row` has the memories columns and either `text` or its precomputed `text_hash`.
    The text itself stays in PostgreSQL.
    """
    updated = row["updated_at"]
    if isinstance(updated, datetime):  # one spelling whatever the session's TimeZone is
        updated = updated.astimezone(UTC).isoformat()
    return {
        "user_id": row["user_id"],
        "version": int(row["version"]),
        "author": row["author"],
        "kind": row["kind"],
        "updated_at": str(updated),
        "text_hash": row["text_hash"] if "text_hash" in row else text_hash(row["text"]),
    }


class VectorIndex:
    """One collection name (an alias or a physical collection) on a backend, and the embedder that fills it."""

    def __init__(self, backend: IndexBackend, collection: str, embedder: Embedder) -> None:
        self.backend = backend
        self.collection = collection
        self.embedder = embedder

    # ---- the collection -----------------------------------------------------------------
    async def create(self) -> None:
        """Create `self.collection` as a new physical collection sized for the embedder."""
        await self.backend.create_collection(self.collection, self.embedder.dim)

    async def ensure_collection(self) -> None:
        """Make the alias resolve to a collection whose vector size matches the embedder."""
        if await self.backend.alias_target(self.collection) is None:
            physical = new_collection_name(self.collection)
            await self.backend.create_collection(physical, self.embedder.dim)
            if not await self.backend.create_alias(self.collection, physical):
                await self.backend.drop_collection(physical)  # another replica created the alias first: use theirs
        size = await self.backend.vector_size(self.collection)
        if size != self.embedder.dim:
            raise ValueError(
                f"Qdrant collection {self.collection!r} holds {size}-dimensional vectors but embedder "
                f"{self.embedder.name!r} makes {self.embedder.dim}; run `memwright index rebuild` "
                "to build it with this embedder"
            )

    # ---- points -------------------------------------------------------------------------
    async def payloads(self, memory_ids: Iterable[str]) -> dict[str, dict[str, Any]]:
        """Current payload of each of these points that exists."""
        ids = list(memory_ids)
        if not ids:
            return {}
        return {p.id: p.payload for p in await self.backend.retrieve(self.collection, ids)}

    async def get(self, memory_id: str) -> dict[str, Any] | None:
        return (await self.payloads([memory_id])).get(memory_id)

    async def all_points(self, with_vectors: bool = False) -> list[Point]:
        """Every point, page by page (the loop runs other tasks between pages)."""
        out: list[Point] = []
        offset: str | None = None
        while True:
            page, offset = await self.backend.scroll(self.collection, offset, SCROLL_PAGE, with_vectors)
            out += page
            if offset is None:
                return out
            await asyncio.sleep(0)

    async def all_payloads(self) -> dict[str, dict[str, Any]]:
        """Every point's payload (no vectors)."""
        return {p.id: p.payload for p in await self.all_points()}

    async def write(self, rows: list[Mapping[str, Any]]) -> int:
        """Upsert these memories rows as points (vector from the text, payload from the row).

        No version check here: callers decide what to write (see apply.converge)."""
        if not rows:
            return 0
        vectors = await self.embedder.embed([r["text"] for r in rows])
        points = [
            Point(str(r["memory_id"]), payload_for(r), [float(x) for x in v])
            for r, v in zip(rows, vectors, strict=True)
        ]
        await self.backend.upsert(self.collection, points)
        metrics.INDEXER_UPSERTS.inc(len(points))
        return len(points)

    async def delete(self, memory_ids: list[str]) -> int:
        if not memory_ids:
            return 0
        await self.backend.delete(self.collection, list(memory_ids))
        metrics.INDEXER_DELETES.inc(len(memory_ids))
        return len(memory_ids)

    async def count(self) -> int:
        return await self.backend.count(self.collection)

    # ---- reads ----------------------------------------------------------------------------
    async def search_similar(self, user_id: str, text: str, limit: int = 5) -> list[tuple[str, float]]:
        """The user's memories most similar to `text`, as (memory id, cosine score), best first."""
        vector = (await self.embedder.embed([text]))[0]
        return await self.backend.search(self.collection, [float(x) for x in vector], user_id, limit)
