"""The index on a Qdrant server, through qdrant-client (MEMWRIGHT_QDRANT_URL).

Server-side aliases: a switch is one `update_collection_aliases` request, atomic on the
server, so any number of processes (indexer replicas, `memwright index check|rebuild`)
work on the same collection at once.
"""

from __future__ import annotations

from typing import Any

from qdrant_client import AsyncQdrantClient, models

from memwright.index.backend import Point


def _vector(v: Any) -> list[float] | None:
    return None if v is None else list(v)


class ServerBackend:
    def __init__(self, client: AsyncQdrantClient, where: str) -> None:
        self.client = client
        self.where = where

    @classmethod
    def connect(cls, url: str, api_key: str = "") -> ServerBackend:
        return cls(AsyncQdrantClient(url=url, api_key=api_key or None), f"Qdrant server {url}")

    # ---- collections and the alias ------------------------------------------------------
    async def create_collection(self, name: str, dim: int) -> None:
        await self.client.create_collection(
            name, vectors_config=models.VectorParams(size=dim, distance=models.Distance.COSINE)
        )
        await self.client.create_payload_index(
            name, "user_id", models.KeywordIndexParams(type=models.KeywordIndexType.KEYWORD, is_tenant=True)
        )

    async def drop_collection(self, name: str) -> bool:
        return bool(await self.client.delete_collection(name))

    async def collection_exists(self, name: str) -> bool:
        return bool(await self.client.collection_exists(name))

    async def alias_target(self, alias: str) -> str | None:
        for a in (await self.client.get_aliases()).aliases:
            if a.alias_name == alias:
                return a.collection_name
        return alias if await self.client.collection_exists(alias) else None

    async def create_alias(self, alias: str, target: str) -> bool:
        try:
            await self.client.update_collection_aliases(
                change_aliases_operations=[
                    models.CreateAliasOperation(
                        create_alias=models.CreateAlias(collection_name=target, alias_name=alias)
                    )
                ]
            )
        except Exception:  # the alias exists: another replica created it first
            return False
        return await self.alias_target(alias) == target

    async def switch_alias(self, alias: str, target: str) -> str | None:
        previous = await self.alias_target(alias)
        if previous == alias:
            # an old-style plain collection holds the name: it must go before the alias can exist
            # (a moment without the name; only the first rebuild after an upgrade does this)
            await self.client.delete_collection(alias)
        ops: list[models.CreateAliasOperation | models.DeleteAliasOperation] = []
        if previous is not None and previous != alias:
            ops.append(models.DeleteAliasOperation(delete_alias=models.DeleteAlias(alias_name=alias)))
        ops.append(
            models.CreateAliasOperation(create_alias=models.CreateAlias(collection_name=target, alias_name=alias))
        )
        await self.client.update_collection_aliases(change_aliases_operations=ops)  # one request: atomic
        return None if previous == alias else previous

    async def vector_size(self, name: str) -> int:
        info = await self.client.get_collection(name)
        vectors = info.config.params.vectors
        assert isinstance(vectors, models.VectorParams), "memwright collections have one unnamed vector"
        return vectors.size

    async def optimize(self, name: str) -> None:
        """Nothing to do: the server's optimizers run in the background."""

    # ---- points -------------------------------------------------------------------------
    async def upsert(self, name: str, points: list[Point]) -> None:
        if points:
            await self.client.upsert(
                name, [models.PointStruct(id=p.id, vector=p.vector or [], payload=p.payload) for p in points]
            )

    async def delete(self, name: str, ids: list[str]) -> None:
        if ids:
            await self.client.delete(name, points_selector=models.PointIdsList(points=list(ids)))

    async def retrieve(self, name: str, ids: list[str], with_vectors: bool = False) -> list[Point]:
        records = await self.client.retrieve(name, list(ids), with_payload=True, with_vectors=with_vectors)
        return [Point(str(r.id), dict(r.payload or {}), _vector(r.vector)) for r in records]

    async def scroll(
        self, name: str, offset: str | None, limit: int, with_vectors: bool = False
    ) -> tuple[list[Point], str | None]:
        records, following = await self.client.scroll(
            name, limit=limit, offset=offset, with_payload=True, with_vectors=with_vectors
        )
        points = [Point(str(r.id), dict(r.payload or {}), _vector(r.vector)) for r in records]
        return points, None if following is None else str(following)

    async def count(self, name: str) -> int:
        return (await self.client.count(name, exact=True)).count

    async def search(self, name: str, vector: list[float], user_id: str, limit: int) -> list[tuple[str, float]]:
        result = await self.client.query_points(
            name,
            query=list(vector),
            limit=limit,
            query_filter=models.Filter(
                must=[models.FieldCondition(key="user_id", match=models.MatchValue(value=user_id))]
            ),
        )
        return [(str(p.id), p.score) for p in result.points]

    async def close(self) -> None:
        await self.client.close()
