"""indexer: relays the outbox to memory.changelog (and memory.changes), applies the changelog to Qdrant, and checks
now and then that Qdrant still matches PostgreSQL (the drift gauges)."""

from __future__ import annotations

import asyncio
import time
import uuid
from dataclasses import dataclass

import asyncpg
import structlog
from aiokafka import AIOKafkaConsumer, ConsumerRecord, TopicPartition
from aiokafka.errors import KafkaError
from memwright import kafka, logs, metrics
from memwright.embeddings import make_embedder
from memwright.events import ChangelogEvent
from memwright.index.apply import converge
from memwright.index.backend import QdrantUnavailable, open_backend
from memwright.index.drift import find_drift
from memwright.index.relay import outbox_stats, relay_once
from memwright.index.vectors import VectorIndex
from memwright.ops import Readiness, ops_app, run_until_stopped, start_site
from memwright.settings import IndexerSettings
from memwright.store.db import create_pool

log = structlog.get_logger()

MAX_RETRY_PAUSE = 30.0


@dataclass
class ConsumerState:
    lag: int | None = None  # None until the consumer has measured it


async def _pause(stop: asyncio.Event, seconds: float) -> None:
    try:
        await asyncio.wait_for(stop.wait(), seconds)
    except TimeoutError:
        pass


async def relay_loop(
    settings: IndexerSettings, pool: asyncpg.Pool, producer: kafka.KeptProducer, stop: asyncio.Event
) -> None:
    """Relay the outbox until stopped; while Kafka is away the rows wait in PostgreSQL."""
    failing = logs.Condition("relay_failing")
    while not stop.is_set():
        sent = 0
        try:
            if producer.ready:
                sent = await relay_once(
                    pool, producer, settings.topic_changelog, settings.relay_batch, settings.topic_changes
                )
                metrics.INDEXER_RELAYED.inc(sent)
                failing.cleared()
            depth, age = await outbox_stats(pool)
            metrics.INDEXER_OUTBOX_DEPTH.set(depth)
            metrics.INDEXER_OUTBOX_AGE.set(age)
        except Exception as exc:  # the rows stay; a wedged producer has been replaced for the next try
            sent = 0
            failing.failed(error=repr(exc))
        if sent < settings.relay_batch:
            await _pause(stop, settings.relay_poll_seconds)


def _memory_ids(records: list[ConsumerRecord]) -> list[str]:
    """The memory id of every valid event; an unreadable event is logged and skipped."""
    ids = []
    for record in records:
        try:
            ids.append(str(uuid.UUID(ChangelogEvent.from_bytes(record.value).memory_id)))
        except (TypeError, ValueError, KeyError) as exc:
            log.error("changelog_event_invalid", partition=record.partition, offset=record.offset, error=repr(exc))
            metrics.INDEXER_EVENTS.labels("invalid").inc()
    return ids


async def apply_records(
    pool: asyncpg.Pool, index: VectorIndex, records: list[ConsumerRecord], stop: asyncio.Event
) -> bool:
    """Converge the memories these events name; retry until it works. False if stopped first."""
    ids = _memory_ids(records)
    pause = 0.5
    while True:
        try:
            outcome = await converge(pool, index, ids)
            break
        except Exception as exc:  # PostgreSQL or Qdrant away: keep the events, try again
            log.warning("apply_failed_retrying", events=len(ids), error=repr(exc))
            await _pause(stop, pause)
            pause = min(pause * 2, MAX_RETRY_PAUSE)
            if stop.is_set():
                return False  # not committed: applied again after the restart
    for mid in ids:
        metrics.INDEXER_EVENTS.labels(outcome[mid]).inc()
    return True


async def apply_loop(
    settings: IndexerSettings,
    pool: asyncpg.Pool,
    index: VectorIndex,
    stop: asyncio.Event,
    state: ConsumerState,
) -> None:
    consumer = AIOKafkaConsumer(
        settings.topic_changelog,
        bootstrap_servers=settings.kafka_bootstrap,
        group_id=settings.indexer_group,
        enable_auto_commit=False,
        auto_offset_reset="earliest",
    )
    await consumer.start()
    unavailable = logs.Condition("changelog_kafka_unavailable")
    drain_until: float | None = None
    try:
        while True:
            if stop.is_set():
                # drain: what was relayed before the stop is applied before the process exits
                drain_until = drain_until or time.monotonic() + settings.drain_seconds
                if time.monotonic() > drain_until:
                    break
            batches = await consumer.getmany(timeout_ms=500, max_records=500)
            records = [r for recs in batches.values() for r in recs]
            if records and not await apply_records(pool, index, records, stop):
                return
            try:
                if records:
                    # offsets are committed only after the points are written: at-least-once
                    await consumer.commit({tp: recs[-1].offset + 1 for tp, recs in batches.items()})
                state.lag = await _publish_lag(consumer)
            except KafkaError as exc:
                # Kafka away (a long outage): keep going; uncommitted records come again and
                # applying them twice is harmless. Found by tests/drills/test_kafka_long_outage.py.
                unavailable.failed(error=repr(exc))
                state.lag = None
                await _pause(stop, 1.0)
                continue
            unavailable.cleared()
            if stop.is_set() and not records and not state.lag:
                break
    finally:
        await consumer.stop()


async def _publish_lag(consumer: AIOKafkaConsumer) -> int:
    assigned: set[TopicPartition] = consumer.assignment()
    if not assigned:
        return 0
    ends = await consumer.end_offsets(list(assigned))
    lag = 0
    for tp in assigned:
        position = await consumer.position(tp)
        lag += max(0, ends[tp] - position)
    metrics.INDEXER_LAG.set(lag)
    return lag


async def drift_loop(
    settings: IndexerSettings,
    pool: asyncpg.Pool,
    index: VectorIndex,
    stop: asyncio.Event,
    state: ConsumerState,
) -> None:
    """Compare Qdrant with PostgreSQL once caught up, then every drift_check_seconds; set the gauges."""
    if settings.drift_check_seconds <= 0:
        return
    while state.lag != 0 and not stop.is_set():
        await _pause(stop, 1.0)
    while not stop.is_set():
        if state.lag:
            log.info("drift_check_postponed", lag=state.lag)  # differences now would only be lag
        else:
            try:
                drift = await find_drift(pool, index, settle=settings.drift_settle_seconds)
                drift.publish()
                report = log.warning if drift.total else log.info
                report(
                    "drift_checked",
                    memories=drift.memories,
                    points=drift.points,
                    missing=len(drift.missing),
                    stale=len(drift.stale),
                    orphaned=len(drift.orphaned),
                    pending=drift.pending,
                    seconds=round(drift.seconds, 2),
                )
            except Exception as exc:
                log.warning("drift_check_failed", error=repr(exc))
        await _pause(stop, settings.drift_check_seconds)


async def serve(settings: IndexerSettings, stop: asyncio.Event) -> None:
    backend = open_backend(settings)  # the embedded store: this process holds it until it stops
    pool = await create_pool(settings.pg_dsn, 1, settings.pg_pool_max)
    try:
        index = VectorIndex(backend, settings.qdrant_collection, await make_embedder(settings))
        await index.ensure_collection()
        readiness = Readiness()
        readiness.add("postgres", lambda: pool.fetchval("SELECT true"))
        ops = await start_site(ops_app(readiness), settings.ops_host, settings.ops_port)
        log.info(
            "indexer_started", collection=settings.qdrant_collection, embedder=index.embedder.name, store=backend.where
        )
        state = ConsumerState()
        producer = kafka.KeptProducer(settings.kafka_bootstrap, name="relay")
        producer.start()  # connects in the background: the indexer comes up while Kafka is down
        try:
            await asyncio.gather(
                relay_loop(settings, pool, producer, stop),
                apply_loop(settings, pool, index, stop, state),
                drift_loop(settings, pool, index, stop, state),
            )
        finally:
            await producer.stop()
            await ops.cleanup()
    finally:
        await backend.close()  # releases the embedded store for the next process
        await pool.close()
        log.info("indexer_stopped")


def main() -> None:
    settings = IndexerSettings.from_env()
    logs.configure("indexer", settings.log_level, settings.log_json)
    kafka.install_reconnect_backoff()
    try:
        run_until_stopped(lambda stop: serve(settings, stop))
    except QdrantUnavailable as exc:  # say why in one line, not a traceback
        log.error("index_store_unavailable", error=str(exc))
        raise SystemExit(2) from None
