"""The Qdrant collection of memory vectors: embedded local mode by default, a server with QDRANT_URL."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from qdrant_client import AsyncQdrantClient, models

from memwright.index.embedders import CachedEmbedder, text_hash
from memwright.settings import QdrantSettings


def open_client(settings: QdrantSettings) -> AsyncQdrantClient:
    if settings.qdrant_url:
        return AsyncQdrantClient(url=settings.qdrant_url, api_key=settings.qdrant_api_key or None)
    return AsyncQdrantClient(path=settings.qdrant_path)


class VectorIndex:
    def __init__(self, client: AsyncQdrantClient, collection: str, embedder: CachedEmbedder) -> None:
        self.client = client
        self.collection = collection
        self.embedder = embedder

    async def ensure_collection(self) -> None:
        if not await self.client.collection_exists(self.collection):
            await self.client.create_collection(
                self.collection,
                vectors_config=models.VectorParams(size=self.embedder.dim, distance=models.Distance.COSINE),
            )
            await self.client.create_payload_index(self.collection, "user_id", models.PayloadSchemaType.KEYWORD)

    async def get(self, memory_id: str) -> dict[str, Any] | None:
        points = await self.client.retrieve(self.collection, [memory_id], with_payload=True)
        return dict(points[0].payload or {}) if points else None

    async def upsert(self, row: dict[str, Any]) -> str:
        """Write the current row unless the point already holds this version or a newer one."""
        memory_id = str(row["memory_id"])
        current = await self.get(memory_id)
        if current and current.get("version", 0) >= row["version"]:
            return "unchanged"  # never replace a point with an older (or the same) version
        digest = text_hash(row["text"])
        vector = (await self.embedder.embed([row["text"]]))[0]
        updated = row["updated_at"]
        payload = {
            "user_id": row["user_id"],
            "version": row["version"],
            "author": row["author"],
            "kind": row["kind"],
            "updated_at": updated.isoformat() if isinstance(updated, datetime) else str(updated),
            "text_hash": digest,
        }
        await self.client.upsert(self.collection, [models.PointStruct(id=memory_id, vector=vector, payload=payload)])
        return "upsert"

    async def delete(self, memory_id: str) -> str:
        await self.client.delete(self.collection, points_selector=models.PointIdsList(points=[memory_id]))
        return "delete"

    async def search(self, user_id: str, text: str, limit: int = 5) -> list[tuple[str, float]]:
        vector = (await self.embedder.embed([text]))[0]
        result = await self.client.query_points(
            self.collection,
            query=vector,
            limit=limit,
            query_filter=models.Filter(must=[models.FieldCondition(key="user_id", match=models.MatchValue(value=user_id))]),
        )
        return [(str(p.id), p.score) for p in result.points]
