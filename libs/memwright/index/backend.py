"""The one index interface: Qdrant's engine embedded (Qdrant Edge) or a Qdrant server.

`IndexBackend` is what the indexer, `index rebuild`, `index check` and the tests need from a
vector store: physical collections, an alias that names the live one, and points (a memory
id, its payload, its vector). Two implementations:

- `EdgeBackend` (index/edge.py): Qdrant Edge, in-process and on disk under
  MEMWRIGHT_QDRANT_PATH; the default when MEMWRIGHT_QDRANT_URL is unset. One process at a
  time opens the store (the indexer while it runs).
- `ServerBackend` (index/server.py): a Qdrant server through qdrant-client
  (MEMWRIGHT_QDRANT_URL); any number of processes.

A `name` argument is an alias or a physical collection; an alias is resolved on every call.
"""

from __future__ import annotations

import secrets
import time
from dataclasses import dataclass
from typing import Any, Protocol

from memwright.settings import QdrantSettings

SEPARATOR = "__"  # physical collection = <alias>__<UTC timestamp>_<random>


class QdrantUnavailable(RuntimeError):
    """The store cannot be opened; the message says why and what to do."""


class CollectionMissing(LookupError):
    """No collection (or alias) of that name."""


@dataclass(frozen=True)
class Point:
    id: str  # the memory id
    payload: dict[str, Any]
    vector: list[float] | None = None  # only when asked for


class IndexBackend(Protocol):
    where: str  # for messages: "Qdrant server <url>" or "embedded Qdrant Edge store <path>"

    # ---- collections and the alias ----------------------------------------------------
    async def create_collection(self, name: str, dim: int) -> None:
        """A new physical collection of `dim`-dimensional cosine vectors, its payload indexed by user_id."""

    async def drop_collection(self, name: str) -> bool:
        """Remove a physical collection; False if there was none."""

    async def collection_exists(self, name: str) -> bool:
        """Whether a physical collection of this name exists (aliases do not count)."""

    async def alias_target(self, alias: str) -> str | None:
        """The physical collection behind `alias`; the name itself for a plain collection of that name."""

    async def create_alias(self, alias: str, target: str) -> bool:
        """Point a new alias at `target`; False if the alias exists already (another process made it)."""

    async def switch_alias(self, alias: str, target: str) -> str | None:
        """Point `alias` at `target` in one step; return the collection it pointed at before."""

    async def vector_size(self, name: str) -> int: ...

    async def optimize(self, name: str) -> None:
        """Compact a collection now, blocking (Edge has no background optimizer; a server has one)."""

    # ---- points -------------------------------------------------------------------------
    async def upsert(self, name: str, points: list[Point]) -> None: ...

    async def delete(self, name: str, ids: list[str]) -> None: ...

    async def retrieve(self, name: str, ids: list[str], with_vectors: bool = False) -> list[Point]: ...

    async def scroll(
        self, name: str, offset: str | None, limit: int, with_vectors: bool = False
    ) -> tuple[list[Point], str | None]:
        """One page of points in id order, and the offset of the next page (None after the last)."""

    async def count(self, name: str) -> int: ...

    async def search(self, name: str, vector: list[float], user_id: str, limit: int) -> list[tuple[str, float]]:
        """The user's points nearest to `vector` as (id, cosine score), best first."""

    async def close(self) -> None: ...


def new_collection_name(alias: str) -> str:
    stamp = time.strftime("%Y%m%dT%H%M%S", time.gmtime())
    return f"{alias}{SEPARATOR}{stamp}_{secrets.token_hex(3)}"


def open_backend(settings: QdrantSettings) -> IndexBackend:
    """A Qdrant server when MEMWRIGHT_QDRANT_URL is set, else the embedded Qdrant Edge store."""
    if settings.qdrant_url:
        from memwright.index.server import ServerBackend

        return ServerBackend.connect(settings.qdrant_url, settings.qdrant_api_key)
    from memwright.index.edge import EdgeBackend

    return EdgeBackend.open(settings.qdrant_path)
