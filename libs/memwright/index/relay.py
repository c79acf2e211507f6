"""The outbox relay: index_outbox rows -> memory.changelog (key = memory id), deleted only
after the broker acknowledged. Safe with several relays (FOR UPDATE SKIP LOCKED)."""

from __future__ import annotations

import asyncio

import asyncpg
from aiokafka import AIOKafkaProducer

from memwright.events import ChangelogEvent

CLAIM_BATCH = """
SELECT outbox_id, memory_id, user_id FROM index_outbox
ORDER BY outbox_id
LIMIT $1
FOR UPDATE SKIP LOCKED  -- several relays never send the same row at once
"""


async def relay_once(pool: asyncpg.Pool, producer: AIOKafkaProducer, topic: str, batch: int) -> int:
    """Relay one batch; return how many rows were sent. A failure rolls back: the rows stay."""
    async with pool.acquire() as conn, conn.transaction():
        rows = await conn.fetch(CLAIM_BATCH, batch)
        if not rows:
            return 0
        futures = []
        for r in rows:
            event = ChangelogEvent(str(r["memory_id"]), r["user_id"], r["outbox_id"])
            futures.append(await producer.send(topic, key=event.memory_id.encode(), value=event.to_bytes()))
        await asyncio.gather(*futures)
        await conn.execute("DELETE FROM index_outbox WHERE outbox_id = ANY($1::bigint[])", [r["outbox_id"] for r in rows])
    return len(rows)


async def outbox_stats(pool: asyncpg.Pool) -> tuple[int, float]:
    row = await pool.fetchrow(
        "SELECT count(*) AS depth, coalesce(extract(epoch FROM now() - min(created_at)), 0) AS age FROM index_outbox"
    )
    assert row is not None
    return int(row["depth"]), float(row["age"])
