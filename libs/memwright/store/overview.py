"""Reads for the memory console that the JSON routes do not have: a user's budget used, an
operator's search for users, a user's curation runs and the pipeline at a glance.

Every per-user statement has the user id in its WHERE clause (tenant isolation). The backlog
and outbox figures come from the functions the curator and the relay export as metrics
(leases.backlog_stats, index.relay.outbox_stats), so the console and Grafana agree.
"""

from __future__ import annotations

import json
from typing import Any

import asyncpg

from memwright.index.relay import outbox_stats
from memwright.store.leases import backlog_stats

# invariant 5: the cap is the user's own override, else the curator's MEMWRIGHT_MEMORY_BUDGET
BUDGET = """
SELECT count(*) FILTER (WHERE m.author = 'agent') AS agent_written,
       count(*) FILTER (WHERE m.author = 'user') AS user_written,
       (SELECT memory_budget FROM agents WHERE user_id = $1) AS own_cap
FROM memories m WHERE m.user_id = $1  -- tenant isolation
"""

# users known to the system (an agents row: a message swept or a memory written), by id prefix
FIND_USERS = """
SELECT a.user_id, a.watermark,
       (SELECT count(*) FROM memories m WHERE m.user_id = a.user_id) AS memories,
       (SELECT waiting_since FROM backlog b WHERE b.user_id = a.user_id) AS waiting_since
FROM agents a WHERE a.user_id LIKE $1 || '%' ESCAPE '\\' ORDER BY a.user_id LIMIT $2
"""

USER_RUNS = """
SELECT run_id, worker, status, policy, watermark_from, watermark_to, messages_seen, changes, error,
       started_at, finished_at
FROM curation_runs WHERE user_id = $1 ORDER BY started_at DESC LIMIT $2  -- tenant isolation
"""

# the transcript keeps each committed run's tool results (the last 50 runs): its refusals
TRANSCRIPT = "SELECT transcript FROM agent_state WHERE user_id = $1"

FAILED_RUNS = """
SELECT count(*) FILTER (WHERE status IN ('failed', 'fenced', 'abandoned')) AS failed,
       count(*) FILTER (WHERE status = 'running') AS running,
       count(*) AS runs
FROM curation_runs WHERE started_at > now() - make_interval(hours => $1)
"""


async def budget(conn: asyncpg.Connection | asyncpg.Pool, user_id: str, default_cap: int) -> dict[str, int]:
    row = await conn.fetchrow(BUDGET, user_id)
    assert row is not None
    cap = row["own_cap"] if row["own_cap"] is not None else default_cap
    return {"agent_written": row["agent_written"], "cap": cap, "user_written": row["user_written"]}


def _like_prefix(text: str) -> str:
    return text.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")


async def find_users(conn: asyncpg.Connection | asyncpg.Pool, prefix: str, limit: int = 50) -> list[dict[str, Any]]:
    rows = await conn.fetch(FIND_USERS, _like_prefix(prefix), limit)
    return [dict(r) for r in rows]


async def user_runs(conn: asyncpg.Connection | asyncpg.Pool, user_id: str, limit: int = 50) -> list[dict[str, Any]]:
    """The user's latest runs, newest first, each with the refusals its transcript entry recorded."""
    runs = [dict(r) for r in await conn.fetch(USER_RUNS, user_id, limit)]
    transcript = await conn.fetchval(TRANSCRIPT, user_id)
    entries = json.loads(transcript) if isinstance(transcript, str) else (transcript or [])
    refusals = {
        e.get("run_id"): [r for r in e.get("results", []) if isinstance(r, str) and r.startswith("Refused")]
        for e in entries
        if isinstance(e, dict)
    }
    for run in runs:
        run["refusals"] = refusals.get(str(run["run_id"]), [])
    return runs


async def pipeline(pool: asyncpg.Pool, hours: int = 24) -> dict[str, Any]:
    users_waiting, oldest_s = await backlog_stats(pool)
    depth, outbox_age_s = await outbox_stats(pool)
    row = await pool.fetchrow(FAILED_RUNS, hours)
    assert row is not None
    return {
        "users_waiting": users_waiting,
        "oldest_waiting_s": oldest_s,
        "outbox_depth": depth,
        "outbox_oldest_s": outbox_age_s,
        "runs": row["runs"],
        "running": row["running"],
        "failed_runs": row["failed"],
        "hours": hours,
    }
