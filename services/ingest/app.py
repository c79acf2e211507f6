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
from memwright import kafka, logs, metrics
from memwright.auth import AuthError, authorize
from memwright.events import InvalidSignal, Signal, parse_signal
from memwright.ops import Readiness, ops_app, run_until_stopped, start_site
from memwright.producer import SignalProducer
from memwright.quota import IngestQuota
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


def build_app(settings: IngestSettings, producer: SignalProducer) -> web.Application:
    produce_failing = logs.Condition("produce_failing")  # one line per ~30 s while Kafka is away, not one per request
    quota = IngestQuota(settings.ingest_quota_window_s, settings.ingest_quota_signals, settings.ingest_quota_bytes)

    async def post_signals(request: web.Request) -> web.Response:
        started = time.monotonic()
        try:
            response = await _handle(request)
        except ConnectionResetError:  # the client hung up mid-body: nobody to answer, nothing went wrong here
            log.info("ingest_client_gone")
            metrics.INGEST_REQUESTS.labels("499").inc()
            return _json_error(400, "the client closed the connection before sending the whole body")
        except Exception:  # counted like every other answer
            log.exception("ingest_request_failed")
            response = _json_error(500, "internal error; the ingest log has the details")
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
            raw = await asyncio.wait_for(request.read(), settings.body_read_timeout_s)
            body = json.loads(raw)
        except web.HTTPRequestEntityTooLarge:
            metrics.INGEST_REJECTIONS.labels("too_large").inc()
            return _json_error(413, f"body larger than {settings.max_body_bytes} bytes")
        except TimeoutError:
            metrics.INGEST_REJECTIONS.labels("timeout").inc()
            timeout = settings.body_read_timeout_s
            return _json_error(408, f"the request body did not arrive within {timeout:g} s; send it at once")
        except RecursionError:
            metrics.INGEST_REJECTIONS.labels("not_json").inc()
            return _json_error(400, "body is not JSON this service reads: nested too deeply")
        except ValueError as exc:  # UnicodeDecodeError, JSONDecodeError, an integer over Python's 4,300 digits
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
        if not producer.ready:
            metrics.INGEST_PRODUCE_ERRORS.inc()
            return _json_error(503, "Kafka is unavailable; retry later", retry_after_s=1)
        usage = [(s.user_id, len(s.text.encode("utf-8"))) for s in signals]
        exceeded = quota.take(usage)
        if exceeded is not None:
            metrics.INGEST_REJECTIONS.labels("quota").inc()
            return web.json_response(
                {"error": exceeded.reason, "retry_after_s": exceeded.retry_after_s},
                status=429,
                headers={"Retry-After": str(exceeded.retry_after_s)},
            )
        try:
            await asyncio.wait_for(producer.send_many(signals), settings.produce_timeout_s)
        except Exception as exc:  # timeout or broker error: the client may retry (ids make it idempotent)
            quota.refund(usage)  # a retry of what Kafka did not take is not charged twice
            metrics.INGEST_PRODUCE_ERRORS.inc()
            produce_failing.failed(error=repr(exc))
            return _json_error(503, "Kafka did not acknowledge in time; retry later", retry_after_s=1)
        produce_failing.cleared()
        metrics.INGEST_SIGNALS.inc(len(signals))
        # where to ask what came of each message: the api's status route (404 until the sweeper wrote it)
        messages = [
            {
                "user_id": s.user_id,
                "message_id": s.message_id,
                "status": f"/v1/users/{s.user_id}/messages/{s.message_id}",
            }
            for s in signals
        ]
        return web.json_response({"accepted": len(signals), "messages": messages}, status=202)

    app = web.Application(client_max_size=settings.max_body_bytes)
    app.router.add_post("/v1/signals", post_signals)
    return app


async def serve(settings: IngestSettings, stop: asyncio.Event) -> None:
    producer = SignalProducer(
        settings.kafka_bootstrap, settings.topic_signals, name="ingest", linger_ms=settings.producer_linger_ms
    )
    await producer.start(wait_s=None)  # up (answering 503) while Kafka is down; connects in the background
    readiness = Readiness()
    readiness.add("kafka", lambda: producer.ready)
    ops = await start_site(ops_app(readiness), settings.ops_host, settings.ops_port)
    site = await start_site(build_app(settings, producer), settings.http_host, settings.http_port)
    log.info("ingest_started", port=settings.http_port)
    await stop.wait()
    await site.cleanup()  # stop taking requests, let in-flight ones finish
    await producer.stop()
    await ops.cleanup()
    log.info("ingest_stopped")


def main() -> None:
    settings = IngestSettings.from_env()
    logs.configure("ingest", settings.log_level, settings.log_json)
    kafka.install_reconnect_backoff()
    run_until_stopped(lambda stop: serve(settings, stop))
