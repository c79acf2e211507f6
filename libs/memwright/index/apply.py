"""Make Qdrant match the CURRENT rows of some memories (invariant 9).

A changelog event only names a memory; its content is never used. For each memory the
current row is read from PostgreSQL: a row means "upsert it", no row means "delete the
point". A point is never replaced by an older version. After writing, the rows are read
again: if one changed meanwhile (a concurrent writer, such as a second indexer during a
rebalance or a rebuild's repair pass, may have written an older read), that memory goes
round again. So applying any events, any number of times, in any order, ends in the state
of PostgreSQL.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable
from typing import Any

import asyncpg

from memwright.index.vectors import VectorIndex, payload_for

CURRENT_ROWS = """
SELECT memory_id, user_id, author, kind, text, version, updated_at FROM memories WHERE memory_id = ANY($1::uuid[])
"""

CURRENT_VERSIONS = "SELECT memory_id, version FROM memories WHERE memory_id = ANY($1::uuid[])"

MAX_ROUNDS = 5

# what happened to one memory's point
UPSERT, DELETE, UNCHANGED, ABSENT, NEWER = "upsert", "delete", "unchanged", "absent", "newer"


def _version(payload: dict[str, Any]) -> int:
    """The point's version; a damaged payload counts as 0, so the row overwrites it."""
    try:
        return int(payload.get("version", 0))
    except (TypeError, ValueError):
        return 0


async def converge(
    pool: asyncpg.Pool, index: VectorIndex, memory_ids: Iterable[str], trust_versions: bool = True
) -> dict[str, str]:
    """Bring these memories' points to their current rows; return what was done to each.

    `trust_versions=False` is for repairing confirmed drift: a point whose version is ahead of
    PostgreSQL (say, after a database restore) is overwritten too. PostgreSQL is the truth.
    """
    todo = sorted({str(uuid.UUID(m)) for m in memory_ids})
    outcome: dict[str, str] = {}
    for _ in range(MAX_ROUNDS):
        if not todo:
            break
        rows = {str(r["memory_id"]): r for r in await pool.fetch(CURRENT_ROWS, todo)}
        points = await index.payloads(todo)
        write, delete = [], []
        for mid in todo:
            row, point = rows.get(mid), points.get(mid)
            if row is None:
                # invariant 9: the row is gone, so the point goes, whatever version it holds
                if point is not None:
                    delete.append(mid)
                outcome[mid] = DELETE if point is not None else ABSENT
            elif trust_versions and point is not None and _version(point) > row["version"]:
                outcome[mid] = NEWER  # invariant 9: never replace a point with an older version
            elif point == payload_for(row):
                outcome[mid] = UNCHANGED
            else:
                write.append(row)
                outcome[mid] = UPSERT
        await index.write(write)
        await index.delete(delete)
        # read again what we acted on: anything that changed while we wrote goes round again
        acted = [str(r["memory_id"]) for r in write] + delete
        if not acted:
            break
        now = {str(r["memory_id"]): r["version"] for r in await pool.fetch(CURRENT_VERSIONS, acted)}
        todo = [str(r["memory_id"]) for r in write if now.get(str(r["memory_id"])) != r["version"]]
        todo += [mid for mid in delete if mid in now]
    return outcome


async def apply_event(pool: asyncpg.Pool, index: VectorIndex, memory_id: str) -> str:
    """Apply one changelog event (by its memory id); return what was done."""
    return (await converge(pool, index, [memory_id]))[str(uuid.UUID(memory_id))]
