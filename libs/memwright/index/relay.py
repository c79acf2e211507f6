"""The outbox relay: index_outbox rows -> memory.changelog (key = memory id) and, for rows that
name an audit row, the public memory.changes (key = user id, see changes.py); deleted only
after the broker acknowledged both. Several relays may run; one sends at a time (ONE_RELAY).

Claim, produce and delete happen inside one transaction. If the relay dies after the
broker acknowledged but before the commit, the transaction rolls back, the rows stay and
are produced again: both topics are at-least-once; the indexer is idempotent, and the consumers
of memory.changes dedupe on the event id.
"""

from __future__ import annotations

import asyncpg

from memwright.changes import load_changes
from memwright.events import ChangelogEvent
from memwright.kafka import KeptProducer

# One relay sends at a time: two relays' batches could overtake each other on Kafka, and
# memory.changes keeps each user's changes in order. The others stand by; the lock goes with the
# sending relay's transaction (commit, rollback or its connection dying), and the next poll takes over.
# The two-key form keeps it apart from the runs' one-key locks (store/leases.py).
ONE_RELAY = "SELECT pg_try_advisory_xact_lock(7246, 2)"
# ...and a relay whose host vanished mid-send (no FIN reaches PostgreSQL) must not hold that lock
# until the server's TCP keepalive gives up (hours): its transaction ends after this long idle.
# Well above a send's own bound (the producer's 10 s request timeout).
RELAY_IDLE_LIMIT = "SET LOCAL idle_in_transaction_session_timeout = '120s'"

CLAIM_BATCH = """
SELECT outbox_id, memory_id, user_id, audit_id FROM index_outbox
ORDER BY outbox_id
LIMIT $1
FOR UPDATE SKIP LOCKED  -- several relays never send the same row at once
"""

# invariant 9: only rows the broker acknowledged are removed (same transaction as the claim)
DELETE_SENT = "DELETE FROM index_outbox WHERE outbox_id = ANY($1::bigint[])"

OUTBOX_STATS = """
SELECT count(*) AS depth, coalesce(extract(epoch FROM now() - min(created_at)), 0) AS age FROM index_outbox
"""


async def relay_once(
    pool: asyncpg.Pool, producer: KeptProducer, topic: str, batch: int, changes_topic: str | None = None
) -> int:
    """Relay one batch; return how many rows were sent once the broker acknowledged all of them.
    With `changes_topic`, the batch's audited changes go there too, in outbox order.
    A failure rolls back: the rows stay (a wedged producer is replaced for the next try)."""
    async with pool.acquire() as conn, conn.transaction():
        await conn.execute(RELAY_IDLE_LIMIT)
        if not await conn.fetchval(ONE_RELAY):
            return 0  # another relay is sending
        rows = await conn.fetch(CLAIM_BATCH, batch)
        if not rows:
            return 0
        events = [ChangelogEvent(str(r["memory_id"]), r["user_id"], r["outbox_id"]) for r in rows]
        await producer.send_all(topic, [(e.memory_id.encode(), e.to_bytes()) for e in events])
        if changes_topic:
            changes = await load_changes(conn, [r["audit_id"] for r in rows if r["audit_id"] is not None])
            await producer.send_all(changes_topic, [c.record() for c in changes])
        await conn.execute(DELETE_SENT, [r["outbox_id"] for r in rows])
    return len(rows)


async def outbox_stats(pool: asyncpg.Pool) -> tuple[int, float]:
    """(rows waiting, age in seconds of the oldest)."""
    row = await pool.fetchrow(OUTBOX_STATS)
    assert row is not None
    return int(row["depth"]), float(row["age"])


async def pending_memory_ids(pool: asyncpg.Pool) -> set[str]:
    """Memories with a change not yet relayed: the changelog will still bring them up to date."""
    return {str(r["memory_id"]) for r in await pool.fetch("SELECT DISTINCT memory_id FROM index_outbox")}
