"""indexer: relays the outbox to memory.changelog and applies the changelog to Qdrant."""

from __future__ import annotations

import asyncio

import asyncpg
import structlog
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition

from memwright import logs, metrics
from memwright.events import ChangelogEvent
from memwright.index.apply import apply_event
from memwright.index.embedders import make_embedder
from memwright.index.relay import outbox_stats, relay_once
from memwright.index.vectors import VectorIndex, open_client
from memwright.ops import Readiness, ops_app, run_until_stopped, start_site
from memwright.settings import IndexerSettings
from memwright.store.db import create_pool

log = structlog.get_logger()


async def _pause(stop: asyncio.Event, seconds: float) -> None:
    try:
        await asyncio.wait_for(stop.wait(), seconds)
    except TimeoutError:
        pass


async def relay_loop(settings: IndexerSettings, pool: asyncpg.Pool, stop: asyncio.Event) -> None:
    producer = AIOKafkaProducer(bootstrap_servers=settings.kafka_bootstrap, acks="all", enable_idempotence=True)
    await producer.start()
    try:
        while not stop.is_set():
            try:
                sent = await relay_once(pool, producer, settings.topic_changelog, settings.relay_batch)
                metrics.INDEXER_RELAYED.inc(sent)
                depth, age = await outbox_stats(pool)
                metrics.INDEXER_OUTBOX_DEPTH.set(depth)
                metrics.INDEXER_OUTBOX_AGE.set(age)
            except Exception as exc:
                sent = 0
                log.warning("relay_failed", error=repr(exc))
            if sent < settings.relay_batch:
                await _pause(stop, settings.relay_poll_seconds)
    finally:
        await producer.stop()


async def apply_loop(settings: IndexerSettings, pool: asyncpg.Pool, index: VectorIndex, stop: asyncio.Event) -> None:
    consumer = AIOKafkaConsumer(
        settings.topic_changelog,
        bootstrap_servers=settings.kafka_bootstrap,
        group_id=settings.indexer_group,
        enable_auto_commit=False,
        auto_offset_reset="earliest",
    )
    await consumer.start()
    try:
        while not stop.is_set():
            batches = await consumer.getmany(timeout_ms=500, max_records=200)
            for tp, records in batches.items():
                for record in records:
                    event = ChangelogEvent.from_bytes(record.value)
                    while True:
                        try:
                            action = await apply_event(pool, index, event.memory_id)
                            break
                        except (OSError, asyncpg.PostgresError, asyncpg.InterfaceError) as exc:
                            log.warning("apply_failed_retrying", memory_id=event.memory_id, error=str(exc))
                            await _pause(stop, 1.0)
                            if stop.is_set():
                                return  # not committed: re-applied after restart
                    metrics.INDEXER_EVENTS.labels(action).inc()
                await consumer.commit({tp: records[-1].offset + 1})
            await _publish_lag(consumer)
    finally:
        await consumer.stop()


async def _publish_lag(consumer: AIOKafkaConsumer) -> None:
    assigned: set[TopicPartition] = consumer.assignment()
    if not assigned:
        return
    ends = await consumer.end_offsets(list(assigned))
    lag = 0
    for tp in assigned:
        position = await consumer.position(tp)
        lag += max(0, ends[tp] - position)
    metrics.INDEXER_LAG.set(lag)


async def serve(settings: IndexerSettings, stop: asyncio.Event) -> None:
    pool = await create_pool(settings.pg_dsn, 1, settings.pg_pool_max)
    client = open_client(settings)
    index = VectorIndex(client, settings.qdrant_collection, await make_embedder(settings))
    await index.ensure_collection()
    readiness = Readiness()
    readiness.add("postgres", lambda: pool.fetchval("SELECT true"))
    ops = await start_site(ops_app(readiness), settings.ops_host, settings.ops_port)
    log.info("indexer_started", collection=settings.qdrant_collection, embedder=index.embedder.name)
    try:
        await asyncio.gather(relay_loop(settings, pool, stop), apply_loop(settings, pool, index, stop))
    finally:
        await ops.cleanup()
        await client.close()  # releases the embedded store's lock for the next process
        await pool.close()
        log.info("indexer_stopped")


def main() -> None:
    settings = IndexerSettings.from_env()
    logs.configure("indexer", settings.log_level, settings.log_json)
    run_until_stopped(lambda stop: serve(settings, stop))
