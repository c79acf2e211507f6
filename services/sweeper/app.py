"""sweeper: a faust-streaming app that batches each user's signals in a tumbling window
and, when the window closes, writes its messages and the user's backlog row in one
PostgreSQL transaction. Malformed records go to the dead-letter topic with the reason.

Offsets are acknowledged only after the window's transaction committed (manual acks),
so a crash re-delivers the unswept signals; the write is idempotent on message id.
"""

from __future__ import annotations

import asyncio
import base64
import json
import time
from datetime import UTC, datetime
from typing import Any

import asyncpg
import faust
import structlog
from memwright import logs, metrics
from memwright.events import InvalidSignal, decode_signal
from memwright.ops import Readiness, ops_app, start_site
from memwright.settings import SweeperSettings
from memwright.store.db import create_pool
from memwright.store.sweeps import write_window
from memwright.windows import Window, WindowBuffer

log = structlog.get_logger()
TICK_SECONDS = 0.25


def dead_letter(reason: str, key: bytes | None, value: bytes | None, topic: str, partition: int, offset: int) -> bytes:
    def text(raw: bytes | None) -> Any:
        if raw is None:
            return None
        try:
            return raw.decode()
        except UnicodeDecodeError:
            return {"base64": base64.b64encode(raw).decode()}

    return json.dumps(
        {
            "reason": reason,
            "topic": topic,
            "partition": partition,
            "offset": offset,
            "key": text(key),
            "value": text(value),
            "failed_at": datetime.now(UTC).isoformat(),
        }
    ).encode()


class Sweeper:
    def __init__(self, settings: SweeperSettings) -> None:
        self.settings = settings
        self.buffer = WindowBuffer(settings.window_seconds)
        self._pool: asyncpg.Pool | None = None
        self._pool_lock = asyncio.Lock()

    async def pool(self) -> asyncpg.Pool:
        async with self._pool_lock:
            if self._pool is None:
                self._pool = await create_pool(self.settings.pg_dsn, 1, self.settings.pg_pool_max)
            return self._pool

    async def flush(self, window: Window) -> None:
        started = time.monotonic()
        self.buffer.detach(window)  # signals arriving during the write belong to the next window
        try:
            pool = await self.pool()
            async with pool.acquire() as conn:
                new = await write_window(conn, window.user_id, window.signals)
        except BaseException:
            self.buffer.restore(window)  # nothing acked: retried on the next tick
            raise
        for event in window.receipts:
            event.ack()  # only now may the offset be committed
        metrics.SWEEPER_WINDOWS.inc()
        metrics.SWEEPER_SIGNALS.inc(new)
        metrics.SWEEPER_DUPLICATES.inc(len(window.signals) - new)
        metrics.SWEEPER_FLUSH_SECONDS.observe(time.monotonic() - started)
        log.info("window_closed", user_id=window.user_id, signals=len(window.signals), new=new)

    async def flush_due(self, now: float) -> None:
        for window in self.buffer.due(now):
            try:
                await self.flush(window)
            except Exception as exc:
                # the window and its unacked offsets are kept; retry on the next tick
                log.warning("window_write_failed", user_id=window.user_id, error=repr(exc))
                return
        metrics.SWEEPER_OPEN_WINDOWS.set(len(self.buffer.open))


def build_app(settings: SweeperSettings) -> faust.App:
    app = faust.App(
        settings.sweeper_app_id,
        broker=f"kafka://{settings.kafka_bootstrap}",
        datadir=settings.sweeper_data_dir,
        web_enabled=False,
        topic_allow_declare=False,
        consumer_auto_offset_reset="earliest",
        broker_commit_interval=1.0,
        producer_acks=-1,
        key_serializer="raw",
        value_serializer="raw",
    )
    sweeper = Sweeper(settings)
    signals = app.topic(settings.topic_signals, key_type=bytes, value_type=bytes)
    dlq = app.topic(settings.topic_dlq, key_type=bytes, value_type=bytes)
    readiness = Readiness()
    readiness.add("postgres", lambda: _pg_ok(sweeper))
    started = asyncio.Event()  # set once the worker is running and consuming
    readiness.add("kafka", started.is_set)

    @app.agent(signals)
    async def sweep(stream: Any) -> None:  # a faust.Stream; its stubs lack noack()
        async for event in stream.noack().events():
            msg = event.message
            try:
                signal = decode_signal(event.value)
                if event.key is not None and event.key != signal.user_id.encode():
                    raise InvalidSignal(f"record key {event.key!r} does not match user_id {signal.user_id!r}")
            except InvalidSignal as exc:
                fut = await dlq.send(
                    key=event.key,
                    value=dead_letter(exc.reason, event.key, event.value, msg.topic, msg.partition, msg.offset),
                )
                await fut  # the DLQ record is acknowledged before the bad record's offset moves on
                event.ack()
                metrics.SWEEPER_DLQ.labels(_reason_label(exc.reason)).inc()
                log.warning("dead_lettered", reason=exc.reason, partition=msg.partition, offset=msg.offset)
                continue
            if signal.accepted_at is None:
                signal = signal.accepted(datetime.fromtimestamp(msg.timestamp, UTC))
            sweeper.buffer.add(signal, event, time.time())

    @app.timer(interval=TICK_SECONDS)
    async def close_windows() -> None:
        await sweeper.flush_due(time.time())

    @app.task
    async def serve_ops() -> None:
        await start_site(ops_app(readiness), settings.ops_host, settings.ops_port)
        started.set()
        log.info("sweeper_started", window_seconds=settings.window_seconds)

    app.sweeper = sweeper  # type: ignore[attr-defined]
    return app


async def _pg_ok(sweeper: Sweeper) -> bool:
    pool = await sweeper.pool()
    return bool(await pool.fetchval("SELECT true"))


def _reason_label(reason: str) -> str:
    """A bounded label for the DLQ metric (the full reason is in the DLQ record)."""
    for label in ("not JSON", "no value", "schema_version", "key", "text", "required", "too long"):
        if label in reason:
            return label.replace(" ", "_").lower()
    return "schema"


def main() -> None:
    settings = SweeperSettings.from_env()
    logs.configure("sweeper", settings.log_level, settings.log_json)
    app = build_app(settings)
    worker = faust.Worker(app, loglevel=settings.log_level.upper(), quiet=True)
    worker.execute_from_commandline()
