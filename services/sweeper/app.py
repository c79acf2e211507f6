"""sweeper: a faust-streaming shell around memwright.sweeping.Sweeper, which batches each user's
signals in a tumbling window and, when the window closes, writes its messages and the user's
backlog row in one PostgreSQL transaction. Malformed records, and signals PostgreSQL refuses to
store, go to the dead-letter topic with the reason.

Offsets are acknowledged only after the window's transaction committed (manual acks), or after
the record is in the dead-letter topic, so a crash re-delivers the unswept signals; the write is
idempotent on message id. SIGTERM stops the worker within STOP_DEADLINE_SECONDS.
"""

from __future__ import annotations

import asyncio
import os
import threading
import time
from collections.abc import Awaitable
from typing import Any

import faust
import structlog
from memwright import kafka, logs, metrics
from memwright.events import InvalidSignal
from memwright.ops import Readiness, ops_app, start_site
from memwright.settings import SweeperSettings
from memwright.sweeping import (
    DRAIN_SECONDS,
    READY_MAX_UNWRITTEN_SECONDS,
    RETRY_FIRST_SECONDS,
    RETRY_MAX_SECONDS,
    InOrderAcks,
    Sweeper,
    dead_letter_key,
    dead_letter_records,
    describe,
    read_record,
    reason_label,
)

log = structlog.get_logger()
TICK_SECONDS = 0.25
# SIGTERM: Sweeper.stop drains for DRAIN_SECONDS, then faust leaves the group and commits; if
# anything hangs past this, the process exits anyway (what is unacked is delivered again).
STOP_DEADLINE_SECONDS = DRAIN_SECONDS + 15.0


def build_app(settings: SweeperSettings) -> faust.App:
    app = faust.App(
        settings.sweeper_app_id,
        broker=f"kafka://{settings.kafka_bootstrap}",
        datadir=settings.sweeper_data_dir,
        web_enabled=False,
        topic_allow_declare=False,
        consumer_auto_offset_reset="earliest",
        broker_commit_interval=1.0,
        broker_session_timeout=settings.sweeper_session_timeout_seconds,
        broker_heartbeat_interval=settings.sweeper_session_timeout_seconds / 5,
        producer_acks=-1,
        key_serializer="raw",
        value_serializer="raw",
        # Shutdown and rebalances do not wait until every consumed signal is acked (a window may be
        # a minute long, or unwritable while PostgreSQL is down): unacked signals are delivered again.
        stream_wait_empty=False,
    )
    signals = app.topic(settings.topic_signals, key_type=bytes, value_type=bytes)
    dlq = app.topic(settings.topic_dlq, key_type=bytes, value_type=bytes)

    async def dead_letter(event: Any, reason: str) -> None:
        msg = event.message
        records = dead_letter_records(reason, event.key, event.value, msg.topic, msg.partition, msg.offset)
        futures = [await dlq.send(key=dead_letter_key(event.key), value=record) for record in records]
        await asyncio.gather(*futures)  # the DLQ record is acknowledged before the bad record's offset moves on

    async def dead_letter_until_sent(event: Any, reason: str) -> None:
        """Kafka refusing the dead-letter record must not crash the agent (faust would restart it on
        the same record): try again, with a backoff, while the record's offset waits."""
        delay = RETRY_FIRST_SECONDS
        while True:
            try:
                await dead_letter(event, reason)
                dead_letter_failing.cleared()
                return
            except Exception as exc:
                metrics.SWEEPER_DLQ_SEND_FAILURES.inc()
                dead_letter_failing.failed(error=describe(exc))
                await asyncio.sleep(delay)
                delay = min(delay * 2, RETRY_MAX_SECONDS)

    def dead_letters_flowing() -> bool:
        """Not ready while a dead-letter record has not gone out for a while: its partition waits."""
        since = dead_letter_failing.since
        return since is None or time.monotonic() - since <= READY_MAX_UNWRITTEN_SECONDS

    dead_letter_failing = logs.Condition("dead_letter_failing")
    acks = InOrderAcks()
    sweeper = Sweeper(settings, lambda receipt, reason: dead_letter(receipt.event, reason))
    readiness = Readiness()
    readiness.add("postgres", lambda: _pg_ok(sweeper))
    started = asyncio.Event()  # set once the worker is running and consuming
    readiness.add("kafka", started.is_set)
    readiness.add("windows_written", lambda: sweeper.ready(time.time()))
    readiness.add("dead_letters_sent", dead_letters_flowing)
    metrics.SWEEPER_OLDEST_UNWRITTEN.set_function(lambda: sweeper.oldest_unwritten_seconds(time.time()))

    @app.agent(signals)
    async def sweep(stream: Any) -> None:  # a faust.Stream; its stubs lack noack()
        async for event in stream.noack().events():
            msg = event.message
            receipt = acks.receipt(msg.tp, event)  # every record: the acks pass on in offset order
            try:
                signal = read_record(event.key, event.value, msg.timestamp)
            except Exception as exc:  # InvalidSignal, or anything else a record can provoke: never stop here
                reason = exc.reason if isinstance(exc, InvalidSignal) else f"unreadable record: {describe(exc)}"
                await dead_letter_until_sent(event, reason)
                receipt.ack()
                metrics.SWEEPER_DLQ.labels(reason_label(reason)).inc()
                log.warning("dead_lettered", reason=reason, partition=msg.partition, offset=msg.offset)
                continue
            sweeper.add(signal, receipt, time.time())

    @app.timer(interval=TICK_SECONDS)
    async def close_windows() -> None:
        await sweeper.flush_due(time.time())

    @app.task
    async def serve_ops() -> None:
        await start_site(ops_app(readiness), settings.ops_host, settings.ops_port)
        started.set()
        log.info("sweeper_started", window_seconds=settings.window_seconds)

    def drain(_: Any, *args: Any, signal: Any, **kwargs: Any) -> Awaitable[None]:
        return sweeper.stop()  # awaited by faust: the consumer is paused by now, the producer still up

    app.on_before_shutdown.connect(drain)  # type: ignore[arg-type]  # mode types the handler too narrowly

    app.sweeper = sweeper  # type: ignore[attr-defined]
    return app


async def _pg_ok(sweeper: Sweeper) -> bool:
    pool = await sweeper.pool()
    return bool(await pool.fetchval("SELECT true"))


class _Worker(faust.Worker):
    """faust's worker, with a deadline on stopping: past it the process exits (code 1) whatever hangs."""

    async def on_stop(self) -> None:
        watchdog = threading.Timer(STOP_DEADLINE_SECONDS, _exit_now)
        watchdog.daemon = True
        watchdog.start()
        await super().on_stop()


def _exit_now() -> None:
    log.error("sweeper_stop_deadline_passed", seconds=STOP_DEADLINE_SECONDS)
    os._exit(1)


def main() -> None:
    settings = SweeperSettings.from_env()
    logs.configure("sweeper", settings.log_level, settings.log_json)
    kafka.install_reconnect_backoff()  # faust's aiokafka clients too: quiet, cheap outages
    app = build_app(settings)
    worker = _Worker(app, loglevel=settings.log_level.upper(), quiet=True)
    worker.execute_from_commandline()
