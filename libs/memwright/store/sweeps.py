"""The sweeper's window write: messages and the user's backlog row in one transaction."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime

import asyncpg

from memwright.events import Signal

INSERT_MESSAGES = """
INSERT INTO messages (user_id, message_id, conversation_id, project_id, role, text, sent_at, accepted_at)
SELECT $1, m.message_id, m.conversation_id, m.project_id, m.role, m.text, m.sent_at, m.accepted_at
FROM unnest($2::text[], $3::text[], $4::text[], $5::text[], $6::text[], $7::timestamptz[], $8::timestamptz[])
     AS m(message_id, conversation_id, project_id, role, text, sent_at, accepted_at)
ON CONFLICT (user_id, message_id) DO NOTHING  -- replays are idempotent on message id
RETURNING accepted_at
"""

UPSERT_BACKLOG = """
INSERT INTO backlog (user_id, waiting_since) VALUES ($1, $2)
ON CONFLICT (user_id) DO UPDATE
SET waiting_since = LEAST(backlog.waiting_since, EXCLUDED.waiting_since), updated_at = now()
"""


async def write_window(conn: asyncpg.Connection, user_id: str, signals: Sequence[Signal]) -> int:
    """Store one user's window of signals; return how many were new.

    The backlog row is touched only when something new arrived, so a replay of
    already-swept signals never wakes the agent again.
    """
    # one window per user per transaction; duplicates inside the window are dropped here
    unique = list({s.message_id: s for s in signals}.values())
    now = datetime.now(UTC)
    async with conn.transaction():
        await conn.execute("INSERT INTO agents (user_id) VALUES ($1) ON CONFLICT DO NOTHING", user_id)
        # invariant 3/4: lock the user's agent row so messages get seq numbers in commit order
        await conn.execute("SELECT 1 FROM agents WHERE user_id = $1 FOR UPDATE", user_id)
        rows = await conn.fetch(
            INSERT_MESSAGES,
            user_id,
            [s.message_id for s in unique],
            [s.conversation_id for s in unique],
            [s.project_id for s in unique],
            [s.role for s in unique],
            [s.text for s in unique],
            [s.sent_at for s in unique],
            [s.accepted_at or now for s in unique],
        )
        if rows:
            await conn.execute(UPSERT_BACKLOG, user_id, min(r["accepted_at"] for r in rows))
    return len(rows)
