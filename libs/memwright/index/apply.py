"""Apply a changelog event: read the memory's CURRENT row and make Qdrant match it.

The event's content is never used, only its memory id, so applying any events any
number of times in any order ends in the same state (invariant 9).
"""

from __future__ import annotations

import uuid

import asyncpg

from memwright.index.vectors import VectorIndex

CURRENT_ROW = """
SELECT memory_id, user_id, author, kind, text, version, updated_at FROM memories WHERE memory_id = $1
"""


async def apply_event(pool: asyncpg.Pool, index: VectorIndex, memory_id: str) -> str:
    row = await pool.fetchrow(CURRENT_ROW, uuid.UUID(memory_id))
    if row is None:
        return await index.delete(memory_id)
    return await index.upsert(dict(row))
