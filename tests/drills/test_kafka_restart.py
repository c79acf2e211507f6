"""Kafka stopped and restarted while signals are posted: clients are told 503 quickly (never
left hanging), and every signal that got a 202 is swept exactly once."""

from __future__ import annotations

import asyncio
import time

import pytest

from tests.drills.conftest import Drill
from tests.drills.helpers import Poster, assert_ready, assert_swept_exactly_once, settled

pytestmark = [pytest.mark.drills, pytest.mark.timeout(420)]

QUICK_503_SECONDS = 8.0  # MEMWRIGHT_PRODUCE_TIMEOUT_S (5 s) plus slack for a loaded machine
RECOVERY_SECONDS = 60  # the producer reconnects within seconds; a minute is for a loaded machine


async def test_kafka_restart_refuses_quickly_and_sweeps_every_acknowledged_signal_once(drill: Drill) -> None:
    users = [f"k-{i}" for i in range(10)]
    poster = Poster(drill, users, rate=20)
    stop = asyncio.Event()
    posting = asyncio.create_task(poster.run(stop))
    try:
        await asyncio.sleep(3)
        await asyncio.to_thread(drill.stack.stop, "kafka")
        await asyncio.sleep(6)
        await asyncio.to_thread(drill.stack.start, "kafka")
        back = time.monotonic()
        # keep posting until ingest accepts again (RECOVERY_SECONDS at most), then a little longer
        recovered = False
        while not recovered and time.monotonic() < back + RECOVERY_SECONDS:
            await asyncio.sleep(1)
            recovered = sum(1 for o in poster.outcomes if o.sent_at > back and o.status == 202) >= 40
        await asyncio.sleep(2)
    finally:
        stop.set()
        await posting

    statuses = poster.statuses()
    assert set(statuses) <= {202, 503}, f"answers other than 202/503 (errors, hangs): {statuses}"
    refused = [o for o in poster.outcomes if o.status == 503]
    assert refused, f"no 503 while Kafka was down: the drill did not disturb anything ({statuses})"
    slowest = max(o.seconds for o in refused)
    assert slowest < QUICK_503_SECONDS, f"a 503 took {slowest:.1f}s"
    after = poster.statuses_since(back)
    assert recovered, (
        f"ingest did not accept signals again within {RECOVERY_SECONDS}s of Kafka's return: {after} since then "
        f"(see produce_failed in {drill.procs.log_dir / 'ingest.log'})"
    )
    await assert_swept_exactly_once(drill.pool, poster)
    await settled(drill.pool, users)
    await assert_ready(drill)
