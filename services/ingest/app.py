"""ingest: HTTP signal intake -> Kafka. Validates, produces (acks=all, idempotent) and answers.

Nothing on this path waits on memory (invariant 1): no database, no LLM, no memory read.
202 only after Kafka acknowledged every signal of the request; 400 with the reason for
invalid input; 503 within MEMWRIGHT_PRODUCE_TIMEOUT_S when Kafka is unreachable.
"""

from __future__ import annotations

import asyncio
import json
import time

import structlog
from aiohttp import web
from aiokafka.errors import (
    IllegalStateError,
    InvalidProducerEpoch,
    InvalidProducerIdMapping,
    OutOfOrderSequenceNumber,
    ProducerFenced,
    UnknownProducerId,
)
from memwright import logs, metrics
from memwright.auth import AuthError, authorize
from memwright.events import InvalidSignal, Signal, parse_signal
from memwright.ops import Readiness, ops_app, run_until_stopped, start_site
from memwright.producer import SignalProducer
from memwright.settings import IngestSettings

log = structlog.get_logger()


def _json_error(status: int, reason: str, **extra: object) -> web.Response:
    return web.json_response({"error": reason, **extra}, status=status)


def parse_body(body: object, max_batch: int) -> list[Signal]:
    """A body is one signal object, or {"signals": [...]}, or a JSON array of signals."""
    if isinstance(body, dict) and "signals" in body:
        items = body["signals"]
        if not isinstance(items, list):
            raise InvalidSignal("signals must be an array")
    elif isinstance(body, list):
        items = body
    else:
        items = [body]
    if not items:
        raise InvalidSignal("no signals in the request")
    if len(items) > max_batch:
        raise InvalidSignal(f"{len(items)} signals in one request; send at most {max_batch}")
    return [parse_signal(item, i if len(items) > 1 else None) for i, item in enumerate(items)]


# Errors after which an idempotent producer's state is lost for good (seen when the broker
# restarts: its sequence numbers no longer line up). Only a new producer recovers.
FATAL_PRODUCER_ERRORS = (
    OutOfOrderSequenceNumber,
    UnknownProducerId,
    InvalidProducerEpoch,
    InvalidProducerIdMapping,
    ProducerFenced,
    IllegalStateError,
)


class ProducerKeeper:
    """Starts the Kafka producer in the background and replaces it after fatal errors, so ingest
    comes up (and answers 503) while Kafka is down and recovers by itself when it returns."""

    def __init__(self, settings: IngestSettings) -> None:
        self.settings = settings
        self.producer: SignalProducer | None = None
        self._task: asyncio.Task[None] | None = None
        self._retired: set[asyncio.Task[None]] = set()

    def start(self) -> None:
        self._task = asyncio.create_task(self._keep())

    def replace(self, broken: SignalProducer) -> None:
        """Drop a producer that hit a fatal error and start a fresh one in the background."""
        if self.producer is not broken:
            return  # another request already replaced it
        self.producer = None
        retire = asyncio.create_task(self._retire(broken))
        self._retired.add(retire)
        retire.add_done_callback(self._retired.discard)
        if self._task is None or self._task.done():
            self.start()

    async def _retire(self, broken: SignalProducer) -> None:
        try:
            await asyncio.wait_for(broken.stop(), 10)
        except Exception as exc:
            log.warning("kafka_producer_stop_failed", error=repr(exc))

    async def _keep(self) -> None:
        delay = 0.5
        while self.producer is None:
            candidate = SignalProducer(
                self.settings.kafka_bootstrap, self.settings.topic_signals, linger_ms=self.settings.producer_linger_ms
            )
            try:
                await candidate.start()
                self.producer = candidate
                log.info("kafka_producer_started")
            except Exception as exc:
                await candidate.stop()
                log.warning("kafka_unavailable", error=str(exc), retry_in=delay)
                await asyncio.sleep(delay)
                delay = min(delay * 2, 10)

    async def stop(self) -> None:
        if self._task:
            self._task.cancel()
        if self.producer:
            await self.producer.stop()


def build_app(settings: IngestSettings, keeper: ProducerKeeper) -> web.Application:
    async def post_signals(request: web.Request) -> web.Response:
        started = time.monotonic()
        response = await _handle(request)
        metrics.INGEST_REQUESTS.labels(str(response.status)).inc()
        metrics.INGEST_LATENCY.observe(time.monotonic() - started)
        return response

    async def _handle(request: web.Request) -> web.Response:
        try:
            principal = authorize(settings, request, "signals:write")
        except AuthError as exc:
            metrics.INGEST_REJECTIONS.labels("auth").inc()
            return exc.response()
        if request.content_length is not None and request.content_length > settings.max_body_bytes:
            metrics.INGEST_REJECTIONS.labels("too_large").inc()
            return _json_error(413, f"body larger than {settings.max_body_bytes} bytes")
        try:
            raw = await request.read()
            body = json.loads(raw)
        except web.HTTPRequestEntityTooLarge:
            metrics.INGEST_REJECTIONS.labels("too_large").inc()
            return _json_error(413, f"body larger than {settings.max_body_bytes} bytes")
        except (UnicodeDecodeError, json.JSONDecodeError) as exc:
            metrics.INGEST_REJECTIONS.labels("not_json").inc()
            return _json_error(400, f"body is not JSON: {exc}")
        try:
            signals = parse_body(body, settings.max_batch)
        except InvalidSignal as exc:
            metrics.INGEST_REJECTIONS.labels("invalid").inc()
            return _json_error(400, str(exc))
        foreign = [s.user_id for s in signals if not principal.may_access(s.user_id)]
        if foreign:
            metrics.INGEST_REJECTIONS.labels("forbidden").inc()
            return _json_error(403, f"token may not send signals for user {foreign[0]}")
        producer = keeper.producer
        if producer is None:
            metrics.INGEST_PRODUCE_ERRORS.inc()
            return _json_error(503, "Kafka is unavailable; retry later", retry_after_s=1)
        try:
            await asyncio.wait_for(producer.send_many(signals), settings.produce_timeout_s)
        except Exception as exc:  # timeout or broker error: the client may retry (ids make it idempotent)
            metrics.INGEST_PRODUCE_ERRORS.inc()
            log.warning("produce_failed", error=repr(exc), signals=len(signals))
            if isinstance(exc, FATAL_PRODUCER_ERRORS):
                keeper.replace(producer)
            return _json_error(503, "Kafka did not acknowledge in time; retry later", retry_after_s=1)
        metrics.INGEST_SIGNALS.inc(len(signals))
        return web.json_response({"accepted": len(signals)}, status=202)

    app = web.Application(client_max_size=settings.max_body_bytes)
    app.router.add_post("/v1/signals", post_signals)
    return app


async def serve(settings: IngestSettings, stop: asyncio.Event) -> None:
    keeper = ProducerKeeper(settings)
    keeper.start()
    readiness = Readiness()
    readiness.add("kafka", lambda: keeper.producer is not None)
    ops = await start_site(ops_app(readiness), settings.ops_host, settings.ops_port)
    site = await start_site(build_app(settings, keeper), settings.http_host, settings.http_port)
    log.info("ingest_started", port=settings.http_port)
    await stop.wait()
    await site.cleanup()  # stop taking requests, let in-flight ones finish
    await keeper.stop()
    await ops.cleanup()
    log.info("ingest_stopped")


def main() -> None:
    settings = IngestSettings.from_env()
    logs.configure("ingest", settings.log_level, settings.log_json)
    run_until_stopped(lambda stop: serve(settings, stop))
