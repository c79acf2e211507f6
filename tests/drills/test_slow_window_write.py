"""A slow database under a window write: a signal that arrives for a user while that user's
window is being written must not be lost.

Made deterministic from outside: the test holds a row lock on the user's `agents` row (the
sweeper's window transaction locks it too), so the sweeper's write waits in PostgreSQL while a
second signal for the same user is acknowledged by ingest. Then the lock is released.
"""

from __future__ import annotations

import asyncio

import aiohttp
import pytest

from tests.drills.conftest import Drill
from tests.drills.helpers import eventually, swept

pytestmark = [pytest.mark.drills, pytest.mark.timeout(240)]


async def _post(drill: Drill, user: str, message_id: str) -> int:
    body = {"schema_version": 1, "user_id": user, "message_id": message_id, "conversation_id": "c1", "text": "hi"}
    async with (
        aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=20)) as http,
        http.post(drill.ingest + "/v1/signals", json=body, headers=drill.auth()) as r,
    ):
        return r.status


async def test_signal_acknowledged_while_its_users_window_is_being_written_is_swept(drill: Drill) -> None:
    user = "slow-write"
    assert await _post(drill, user, "m0") == 202
    await eventually(lambda: _has(drill, user, {"m0"}), 60, "the first window (it creates the agents row)")

    async with drill.pool.acquire() as blocker, blocker.transaction():
        await blocker.execute("SELECT 1 FROM agents WHERE user_id = $1 FOR UPDATE", user)
        assert await _post(drill, user, "m1") == 202

        async def sweeper_waits_on_the_lock() -> bool:
            waiting = await drill.pool.fetchval(
                """SELECT count(*) FROM pg_stat_activity
                   WHERE datname = current_database() AND wait_event_type = 'Lock' AND query LIKE '%FOR UPDATE%'"""
            )
            return bool(waiting)

        await eventually(sweeper_waits_on_the_lock, 60, "the sweeper's window write to wait on the row lock", 0.1)
        assert await _post(drill, user, "m2") == 202  # acknowledged: Kafka has it, the client moves on
        await asyncio.sleep(5)  # the sweeper consumes m2 while m1's window is still being written
    # lock released: the window write commits

    async def both() -> bool:
        return await _has(drill, user, {"m1", "m2"})

    try:
        await eventually(both, 60, "m1 and m2 in the evidence store")
    except AssertionError:
        stored = sorted(await swept(drill.pool, [user]))
        raise AssertionError(
            f"acknowledged signal lost: the evidence store has {stored}. m2 arrived while m1's window was "
            "being written; the sweeper acked it with that window but did not write it"
        ) from None


async def _has(drill: Drill, user: str, wanted: set[str]) -> bool:
    return wanted <= set(await swept(drill.pool, [user]))
