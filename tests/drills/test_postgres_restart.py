"""PostgreSQL restarted while sweeps and curation run: every service reconnects by itself, and
no memory is lost or duplicated."""

from __future__ import annotations

import asyncio

import pytest

from tests.drills.conftest import Drill
from tests.drills.helpers import (
    Poster,
    assert_index_matches,
    assert_one_memory_each,
    assert_ready,
    assert_swept_exactly_once,
    settled,
)

pytestmark = [pytest.mark.drills, pytest.mark.timeout(420)]


async def test_postgres_restart_under_load_loses_and_duplicates_no_memory(drill: Drill) -> None:
    users = [f"p-{i}" for i in range(20)]
    poster = Poster(drill, users, rate=20)
    stop = asyncio.Event()
    posting = asyncio.create_task(poster.run(stop))
    try:
        await asyncio.sleep(4)  # windows closing, curator runs in flight
        await asyncio.to_thread(drill.stack.stop, "postgres")
        await asyncio.sleep(4)
        await asyncio.to_thread(drill.stack.start, "postgres")
        await asyncio.sleep(6)
    finally:
        stop.set()
        await posting

    statuses = poster.statuses()
    assert set(statuses) == {202}, f"ingest must not depend on PostgreSQL: {statuses}"
    await assert_swept_exactly_once(drill.pool, poster)
    await settled(drill.pool, users)
    await assert_ready(drill)  # reconnected by themselves: same processes, ready again
    await assert_one_memory_each(drill.pool, poster)
    assert_index_matches(drill)
