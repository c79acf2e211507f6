"""Each service SIGKILLed under load and restarted: no acknowledged signal is lost and no memory
is duplicated, in PostgreSQL or in the index."""

from __future__ import annotations

import asyncio

import pytest
from memwright.localrun import SERVICES

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


@pytest.mark.parametrize("service", SERVICES)
async def test_sigkill_under_load_loses_no_acknowledged_signal_and_duplicates_no_memory(
    drill: Drill, service: str
) -> None:
    users = [f"{service[0]}-{i}" for i in range(20)]
    poster = Poster(drill, users, rate=20)
    stop = asyncio.Event()
    posting = asyncio.create_task(poster.run(stop))
    try:
        await asyncio.sleep(4)
        drill.procs.kill(service)  # SIGKILL: no shutdown code runs
        await asyncio.sleep(1)
        drill.procs.start(service)
        await asyncio.sleep(6)
    finally:
        stop.set()
        await posting

    statuses = poster.statuses()
    if service == "ingest":
        # in flight or sent while it was down: connection errors; just restarted, before its producer is up: 503.
        # None of them was acknowledged, so none of them has to be swept.
        assert set(statuses) <= {202, 503, "error"}, statuses
    else:
        assert set(statuses) == {202}, f"only ingest's own death may fail a request: {statuses}"
    await assert_swept_exactly_once(drill.pool, poster)
    await settled(drill.pool, users, timeout=180)
    await assert_ready(drill)
    await assert_one_memory_each(drill.pool, poster)
    assert_index_matches(drill)
