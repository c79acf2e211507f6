"""The Qdrant collection of memory vectors: embedded local mode by default, a server with QDRANT_URL.

Everything reads and writes through an ALIAS (`MEMWRIGHT_QDRANT_COLLECTION`, default
`memories`) that points at a physical collection `<alias>__<timestamp>`. A rebuild fills a
fresh physical collection and then moves the alias in one step, so a search sees either the
old complete collection or the new complete one, never an empty or half-built one.
qdrant-client's local mode supports aliases (it resolves them on every call and saves the
switch with one atomic file replace); a server switches them atomically per request.
"""

from __future__ import annotations

import secrets
import time
import warnings
from collections.abc import Iterable, Mapping
from datetime import UTC, datetime
from typing import Any

from qdrant_client import AsyncQdrantClient, models

from memwright import metrics
from memwright.embeddings import Embedder, text_hash
from memwright.settings import QdrantSettings

SEPARATOR = "__"  # physical collection = <alias>__<UTC timestamp>_<random>
SCROLL_PAGE = 1000


class QdrantUnavailable(RuntimeError):
    """The store cannot be opened; the message says why and what to do."""


def open_client(settings: QdrantSettings) -> AsyncQdrantClient:
    if settings.qdrant_url:
        return AsyncQdrantClient(url=settings.qdrant_url, api_key=settings.qdrant_api_key or None)
    try:
        return AsyncQdrantClient(path=settings.qdrant_path)
    except RuntimeError as exc:
        if "already accessed" not in str(exc):
            raise
        raise QdrantUnavailable(
            f"the embedded Qdrant store at {settings.qdrant_path} is open in another process (a running "
            "indexer holds it: embedded mode allows one process per path). Stop the indexer and try again, "
            "or run a Qdrant server and set MEMWRIGHT_QDRANT_URL"
        ) from None


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


def new_collection_name(alias: str) -> str:
    stamp = time.strftime("%Y%m%dT%H%M%S", time.gmtime())
    return f"{alias}{SEPARATOR}{stamp}_{secrets.token_hex(3)}"


async def alias_target(client: AsyncQdrantClient, alias: str) -> str | None:
    """The physical collection behind `alias`; the name itself for an old-style plain collection."""
    for a in (await client.get_aliases()).aliases:
        if a.alias_name == alias:
            return a.collection_name
    if await client.collection_exists(alias):
        return alias
    return None


async def switch_alias(client: AsyncQdrantClient, alias: str, target: str) -> str | None:
    """Point `alias` at `target` in one step; return the collection it pointed at before."""
    previous = await alias_target(client, alias)
    if previous == alias:
        # an old-style plain collection holds the name: it must go before the alias can exist
        # (a moment without the name; only the first rebuild after an upgrade does this)
        await client.delete_collection(alias)
    ops: list[models.CreateAliasOperation | models.DeleteAliasOperation] = []
    if previous is not None and previous != alias:
        ops.append(models.DeleteAliasOperation(delete_alias=models.DeleteAlias(alias_name=alias)))
    ops.append(models.CreateAliasOperation(create_alias=models.CreateAlias(collection_name=target, alias_name=alias)))
    await client.update_collection_aliases(change_aliases_operations=ops)  # one request: atomic
    return None if previous == alias else previous


class VectorIndex:
    """One collection name (an alias or a physical collection) and the embedder that fills it."""

    def __init__(self, client: AsyncQdrantClient, collection: str, embedder: Embedder) -> None:
        self.client = client
        self.collection = collection
        self.embedder = embedder

    # ---- the collection -----------------------------------------------------------------
    async def create(self) -> None:
        """Create `self.collection` as a new physical collection sized for the embedder."""
        await self.client.create_collection(
            self.collection,
            vectors_config=models.VectorParams(size=self.embedder.dim, distance=models.Distance.COSINE),
        )
        with warnings.catch_warnings():  # local mode warns that it filters without indexes
            warnings.simplefilter("ignore", UserWarning)
            await self.client.create_payload_index(self.collection, "user_id", models.PayloadSchemaType.KEYWORD)

    async def ensure_collection(self) -> None:
        """Make the alias resolve to a collection whose vector size matches the embedder."""
        if await alias_target(self.client, self.collection) is None:
            physical = VectorIndex(self.client, new_collection_name(self.collection), self.embedder)
            await physical.create()
            try:
                await self.client.update_collection_aliases(
                    change_aliases_operations=[
                        models.CreateAliasOperation(
                            create_alias=models.CreateAlias(
                                collection_name=physical.collection, alias_name=self.collection
                            )
                        )
                    ]
                )
            except Exception:
                pass  # another replica created the alias first: use theirs
            if await alias_target(self.client, self.collection) != physical.collection:
                await self.client.delete_collection(physical.collection)
        size = await self.vector_size()
        if size != self.embedder.dim:
            raise ValueError(
                f"Qdrant collection {self.collection!r} holds {size}-dimensional vectors but embedder "
                f"{self.embedder.name!r} makes {self.embedder.dim}; run `memwright index rebuild` "
                "to build it with this embedder"
            )

    async def vector_size(self) -> int:
        info = await self.client.get_collection(self.collection)
        vectors = info.config.params.vectors
        assert isinstance(vectors, models.VectorParams), "memwright collections have one unnamed vector"
        return vectors.size

    # ---- points -------------------------------------------------------------------------
    async def payloads(self, memory_ids: Iterable[str]) -> dict[str, dict[str, Any]]:
        """Current payload of each of these points that exists."""
        ids = list(memory_ids)
        if not ids:
            return {}
        points = await self.client.retrieve(self.collection, ids, with_payload=True, with_vectors=False)
        return {str(p.id): dict(p.payload or {}) for p in points}

    async def get(self, memory_id: str) -> dict[str, Any] | None:
        return (await self.payloads([memory_id])).get(memory_id)

    async def all_payloads(self) -> dict[str, dict[str, Any]]:
        """Every point's payload (no vectors), page by page."""
        out: dict[str, dict[str, Any]] = {}
        offset: Any = None
        while True:
            points, offset = await self.client.scroll(
                self.collection, limit=SCROLL_PAGE, offset=offset, with_payload=True, with_vectors=False
            )
            out.update((str(p.id), dict(p.payload or {})) for p in points)
            if offset is None:
                return out

    async def write(self, rows: list[Mapping[str, Any]]) -> int:
        """Upsert these memories rows as points (vector from the text, payload from the row).

        No version check here: callers decide what to write (see apply.converge)."""
        if not rows:
            return 0
        vectors = await self.embedder.embed([r["text"] for r in rows])
        points = [
            models.PointStruct(id=str(r["memory_id"]), vector=v, payload=payload_for(r))
            for r, v in zip(rows, vectors, strict=True)
        ]
        await self.client.upsert(self.collection, points)
        metrics.INDEXER_UPSERTS.inc(len(points))
        return len(points)

    async def delete(self, memory_ids: list[str]) -> int:
        if not memory_ids:
            return 0
        await self.client.delete(self.collection, points_selector=models.PointIdsList(points=list(memory_ids)))
        metrics.INDEXER_DELETES.inc(len(memory_ids))
        return len(memory_ids)

    async def count(self) -> int:
        return (await self.client.count(self.collection, exact=True)).count

    # ---- reads for the curator ----------------------------------------------------------
    async def search_similar(self, user_id: str, text: str, limit: int = 5) -> list[tuple[str, float]]:
        """The user's memories most similar to `text`, as (memory id, cosine score), best first."""
        vector = (await self.embedder.embed([text]))[0]
        result = await self.client.query_points(
            self.collection,
            query=vector,
            limit=limit,
            query_filter=models.Filter(
                must=[models.FieldCondition(key="user_id", match=models.MatchValue(value=user_id))]
            ),
        )
        return [(str(p.id), p.score) for p in result.points]
