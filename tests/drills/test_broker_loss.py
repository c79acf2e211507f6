"""A three-broker Kafka (topics with 3 replicas, min.insync.replicas 2) loses the broker that leads
most partitions of the signals topic, by SIGKILL, under load. No acknowledged signal is lost,
ingest answers 202 or a quick 503 throughout (the statuses are counted and printed), and the
changelog keeps flowing: users who first write after the loss get their memory created, relayed
to the changelog and indexed."""

from __future__ import annotations

import asyncio
import os
import signal
import time
from collections import Counter
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from aiokafka.admin import AIOKafkaAdminClient

from tests.drills.conftest import Drill, PrivateStack, running
from tests.drills.helpers import (
    Poster,
    assert_index_matches,
    assert_one_memory_each,
    assert_ready,
    assert_swept_exactly_once,
    settled,
)

pytestmark = [pytest.mark.drills, pytest.mark.cluster, pytest.mark.timeout(360)]


@pytest.fixture
async def cluster(kafka_cluster: PrivateStack, tmp_path: Path) -> AsyncIterator[Drill]:
    async with running(kafka_cluster, tmp_path, restore=False) as drill:  # the only drill on this cluster
        yield drill


async def leaders(bootstrap: str, topic: str) -> dict[int, int]:
    """partition -> the broker (node id) leading it."""
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        [described] = await admin.describe_topics([topic])
    finally:
        await admin.close()
    return {p["partition"]: p["leader"] for p in described["partitions"]}


async def test_losing_the_signals_leader_loses_no_acknowledged_signal_and_the_changelog_keeps_flowing(
    cluster: Drill,
) -> None:
    stack = cluster.stack
    before = [f"b-{i}" for i in range(12)]
    after = [f"a-{i}" for i in range(8)]  # first write after the loss: their memories cross the changelog then
    first, second = Poster(cluster, before, rate=15), Poster(cluster, after, rate=10)
    stop = asyncio.Event()
    posting = [asyncio.create_task(first.run(stop))]
    try:
        await asyncio.sleep(5)
        led = await leaders(stack.bootstrap, cluster.kafka.topic_signals)
        victim, _ = Counter(led.values()).most_common(1)[0]
        os.kill(stack.broker_pid(victim), signal.SIGKILL)
        lost_at = time.monotonic()
        posting.append(asyncio.create_task(second.run(stop)))
        await asyncio.sleep(15)
    finally:
        stop.set()
        await asyncio.gather(*posting)

    moved = await leaders(stack.bootstrap, cluster.kafka.topic_signals)
    assert victim not in moved.values(), f"broker {victim} still leads a signals partition: {moved}"
    statuses = first.statuses()
    around = first.statuses_since(lost_at - 1)
    for poster in (first, second):
        assert set(poster.statuses()) <= {202, 503}, f"only 202 or a quick 503: {poster.statuses()}"
        assert 202 in poster.statuses()
    for poster in (first, second):
        await assert_swept_exactly_once(cluster.pool, poster)
    users = before + after
    await settled(cluster.pool, users, timeout=120)
    await assert_ready(cluster)
    for poster in (first, second):
        await assert_one_memory_each(cluster.pool, poster)
    assert_index_matches(cluster)
    print(
        f"\nbroker loss drill: broker {victim} SIGKILLed leading partitions "
        f"{sorted(p for p, b in led.items() if b == victim)} of {len(led)}; statuses before and after: {statuses}, "
        f"from a second before the loss: {around}; after it, new users: {second.statuses()}"
    )
