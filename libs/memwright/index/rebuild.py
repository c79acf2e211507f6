"""Rebuild the collection from PostgreSQL behind the alias (invariant 9).

1. Create a fresh physical collection sized for the embedder.
2. Fill it from the memories table page by page (keyset on memory_id), showing progress,
   and let the backend compact it (Qdrant Edge has no background optimizer).
3. Move the alias to it in one step: searches go from the old complete collection to the
   new complete one, never to an empty or half-built one.
4. Repair pass: changes committed while step 2 ran were applied by the indexer to the OLD
   collection (through the alias); compare the new one with PostgreSQL and converge the
   differences, so nothing committed during the rebuild is lost.
5. Drop the old collection (unless asked to keep it).

A failure before step 3 drops the half-built collection; the alias never saw it.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass

import asyncpg

from memwright.embeddings import Embedder
from memwright.index.apply import converge
from memwright.index.backend import IndexBackend, new_collection_name
from memwright.index.drift import find_drift
from memwright.index.vectors import VectorIndex

ROWS_PAGE = """
SELECT memory_id, user_id, author, kind, text, version, updated_at FROM memories
WHERE ($1::uuid IS NULL OR memory_id > $1) ORDER BY memory_id LIMIT $2
"""


@dataclass
class Progress:
    done: int
    total: int  # memories counted at the start; rows added during the rebuild can make done > total
    seconds: float

    @property
    def rate(self) -> float:
        return self.done / self.seconds if self.seconds > 0 else 0.0


@dataclass
class Rebuilt:
    alias: str
    collection: str
    previous: str | None
    memories: int
    repaired: int  # points fixed by the repair pass (changes committed during the build)
    seconds: float  # fill time (step 2): memories / seconds is the rebuild rate
    total_seconds: float
    dropped: bool

    @property
    def rate(self) -> float:
        return self.memories / self.seconds if self.seconds > 0 else 0.0


async def rebuild(
    pool: asyncpg.Pool,
    backend: IndexBackend,
    alias: str,
    embedder: Embedder,
    batch: int = 256,
    keep_old: bool = False,
    progress: Callable[[Progress], None] | None = None,
) -> Rebuilt:
    started = time.monotonic()
    total = int(await pool.fetchval("SELECT count(*) FROM memories"))
    fresh = VectorIndex(backend, new_collection_name(alias), embedder)
    await fresh.create()
    done = 0
    try:
        last: uuid.UUID | None = None
        while True:
            rows = await pool.fetch(ROWS_PAGE, last, batch)
            if not rows:
                break
            done += await fresh.write(rows)
            last = rows[-1]["memory_id"]
            if progress:
                progress(Progress(done, total, time.monotonic() - started))
            await asyncio.sleep(0)  # the embedded store works synchronously: let searches in this process run
        await backend.optimize(fresh.collection)
        filled = time.monotonic() - started
        previous = await backend.alias_target(alias)
        await backend.switch_alias(alias, fresh.collection)
    except BaseException:
        await backend.drop_collection(fresh.collection)  # the alias never pointed at it
        raise
    live = VectorIndex(backend, alias, embedder)
    drift = await find_drift(pool, live)
    outcome = await converge(pool, live, drift.ids())
    repaired = sum(1 for action in outcome.values() if action in ("upsert", "delete"))
    dropped = False
    if previous is not None and previous != alias and not keep_old:
        dropped = await backend.drop_collection(previous)
    return Rebuilt(alias, fresh.collection, previous, done, repaired, filled, time.monotonic() - started, dropped)
