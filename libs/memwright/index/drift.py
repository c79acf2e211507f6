"""Compare PostgreSQL (the truth) with the Qdrant collection: drift per user and overall.

Three kinds of drift:
- missing:  a memory has no point;
- stale:    the point's payload (version, user, author, kind, updated_at, text hash) is not the row's;
- orphaned: a point whose memory no longer exists.

A difference for a memory whose change is still in the outbox is not drift, only lag: the
changelog will fix it. Differences seen while the indexer is busy are read again after a
short settle time, so events in flight are not reported.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import asyncpg

from memwright import metrics
from memwright.index.relay import pending_memory_ids
from memwright.index.vectors import VectorIndex, payload_for

KINDS = ("missing", "stale", "orphaned")
PAGE = 10_000

# the text's hash is computed by PostgreSQL, so a check never moves the texts themselves
_STATE = """
SELECT memory_id, user_id, author, kind, version, updated_at,
       encode(sha256(convert_to(text, 'UTF8')), 'hex') AS text_hash
FROM memories
"""
STATE_PAGE = _STATE + "WHERE ($1::uuid IS NULL OR memory_id > $1) ORDER BY memory_id LIMIT $2"
STATE_OF = _STATE + "WHERE memory_id = ANY($1::uuid[])"


@dataclass
class Drift:
    memories: int = 0  # rows in PostgreSQL
    points: int = 0  # points in the collection
    missing: dict[str, str] = field(default_factory=dict)  # memory id -> user id
    stale: dict[str, str] = field(default_factory=dict)
    orphaned: dict[str, str] = field(default_factory=dict)
    pending: int = 0  # differences whose change is still in the outbox (lag, not drift)
    seconds: float = 0.0

    @property
    def total(self) -> int:
        return len(self.missing) + len(self.stale) + len(self.orphaned)

    def ids(self) -> list[str]:
        return sorted({*self.missing, *self.stale, *self.orphaned})

    def by_user(self) -> dict[str, Counter[str]]:
        users: dict[str, Counter[str]] = {}
        for kind in KINDS:
            for user in getattr(self, kind).values():
                users.setdefault(user, Counter())[kind] += 1
        return dict(sorted(users.items()))

    def as_dict(self) -> dict[str, Any]:
        return {
            "memories": self.memories,
            "points": self.points,
            "drift": self.total,
            **{kind: len(getattr(self, kind)) for kind in KINDS},
            "pending": self.pending,
            "users": {user: dict(counts) for user, counts in self.by_user().items()},
            "ids": {kind: sorted(getattr(self, kind)) for kind in KINDS},
        }

    def publish(self) -> None:
        """Set the drift gauges (memwright_indexer_drift_points{kind})."""
        for kind in KINDS:
            metrics.INDEXER_DRIFT.labels(kind).set(len(getattr(self, kind)))
        metrics.INDEXER_DRIFT_CHECKED.set(time.time())


async def expected_payloads(pool: asyncpg.Pool, memory_ids: Iterable[str] | None = None) -> dict[str, dict[str, Any]]:
    """The payload each memory's point must have: all memories, or only these."""
    if memory_ids is not None:
        return {str(r["memory_id"]): payload_for(r) for r in await pool.fetch(STATE_OF, list(memory_ids))}
    out: dict[str, dict[str, Any]] = {}
    last: uuid.UUID | None = None
    while True:
        rows = await pool.fetch(STATE_PAGE, last, PAGE)
        out.update((str(r["memory_id"]), payload_for(r)) for r in rows)
        if len(rows) < PAGE:
            return out
        last = rows[-1]["memory_id"]


def _classify(
    drift: Drift, expected: dict[str, dict[str, Any]], actual: dict[str, dict[str, Any]], ids: Iterable[str]
) -> None:
    for mid in ids:
        want, have = expected.get(mid), actual.get(mid)
        if want is not None and have is None:
            drift.missing[mid] = want["user_id"]
        elif want is None and have is not None:
            drift.orphaned[mid] = str(have.get("user_id", "?"))
        elif want != have:
            assert want is not None
            drift.stale[mid] = want["user_id"]


async def find_drift(pool: asyncpg.Pool, index: VectorIndex, settle: float = 0.0) -> Drift:
    """Compare every memory with every point; differences are read again after `settle` seconds."""
    started = time.monotonic()
    expected = await expected_payloads(pool)
    actual = await index.all_payloads()
    drift = Drift(memories=len(expected), points=len(actual))
    _classify(drift, expected, actual, expected.keys() | actual.keys())
    if drift.total and settle > 0:
        await asyncio.sleep(settle)  # let events in flight land, then look at the differences again
        ids = drift.ids()
        again = Drift(memories=drift.memories, points=drift.points)
        _classify(again, await expected_payloads(pool, ids), await index.payloads(ids), ids)
        drift = again
    if drift.total:
        pending = await pending_memory_ids(pool)
        for kind in KINDS:
            found: dict[str, str] = getattr(drift, kind)
            waiting = found.keys() & pending
            drift.pending += len(waiting)
            for mid in waiting:
                del found[mid]
    drift.seconds = time.monotonic() - started
    return drift
