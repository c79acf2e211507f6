"""The sweeper's domain: each user's tumbling window of signals is written to PostgreSQL on its
own, so no window, and no signal, can hold back another (invariant 10: bad input gets a clear
error and loses nothing). services/sweeper/app.py wires it to Kafka with faust.

A failed write is sorted by why (`failure_kind`):

- **unavailable**: PostgreSQL is down, restarting, out of connections or not usable by this
  deployment (connection errors, SQLSTATE classes 08, 28, 3D, 40, 42, 53, 55, 57, 58, timeouts).
  Not the signals' fault: the window is kept, unacked, and retried with a backoff for as long
  as it takes; nothing is dead-lettered (a PostgreSQL restart loses nothing).
- **content**: PostgreSQL refuses the data (class 22 data exception, e.g. U+0000 or a lone
  surrogate, asyncpg's own encoding errors included; 23 constraint; 54 limit). The window is
  split: each signal is written alone, and only those PostgreSQL still refuses go to the
  dead-letter topic, with the reason and their original record.
- **other**: retried up to MAX_WINDOW_ATTEMPTS times with a backoff, then split the same way.

A window that waits for its retry is not due, so the next users' windows are written meanwhile.
Offsets are acknowledged only after a signal is stored or its record is in the dead-letter
topic, so a crash or SIGTERM re-delivers the rest; the write is idempotent on message id.
Windows close per user, so signals are stored out of offset order; `InOrderAcks` passes the acks
on in offset order within each partition, because faust commits past a one-offset hole.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import json
import time
from collections import deque
from collections.abc import Awaitable, Callable, Hashable, Iterable, Sequence
from datetime import UTC, datetime
from typing import Any, Literal

import asyncpg
import structlog

from memwright import metrics
from memwright.events import InvalidSignal, Signal, decode_signal
from memwright.settings import SweeperSettings
from memwright.store.db import create_pool
from memwright.store.sweeps import write_window
from memwright.windows import Window, WindowBuffer

log = structlog.get_logger()

MAX_WINDOW_ATTEMPTS = 3  # failures of kind "other" before a window is split signal by signal
RETRY_FIRST_SECONDS = 0.25  # backoff after a failed write, doubling per failure in a row...
RETRY_MAX_SECONDS = 5.0  # ...up to this, also while PostgreSQL is down (recovery within 5 s of its return)
READY_MAX_UNWRITTEN_SECONDS = 60.0  # /readyz fails while a closed window waits longer than this
DRAIN_SECONDS = 10.0  # on SIGTERM, time to write what is open; the rest is delivered again after restart

FailureKind = Literal["unavailable", "content", "other"]

UNAVAILABLE_ERRORS: tuple[type[BaseException], ...] = (
    OSError,  # refused, reset, unreachable
    TimeoutError,  # connect or command timeout
    asyncpg.InterfaceError,  # connection closed, pool closing
    asyncpg.PostgresConnectionError,  # 08
    asyncpg.InvalidAuthorizationSpecificationError,  # 28: credentials
    asyncpg.InvalidCatalogNameError,  # 3D: no such database
    asyncpg.TransactionRollbackError,  # 40: deadlock, serialization
    asyncpg.SyntaxOrAccessError,  # 42: migrations missing, privileges
    asyncpg.InsufficientResourcesError,  # 53: disk full, too many connections
    asyncpg.ObjectNotInPrerequisiteStateError,  # 55: lock not available
    asyncpg.OperatorInterventionError,  # 57: shutting down, starting up, statement timeout
    asyncpg.PostgresSystemError,  # 58
)
CONTENT_ERRORS: tuple[type[BaseException], ...] = (
    asyncpg.DataError,  # 22, and asyncpg's "invalid input for query argument" (surrogates, dates)
    asyncpg.IntegrityConstraintViolationError,  # 23
    asyncpg.ProgramLimitExceededError,  # 54: a value too large
    UnicodeError,
    OverflowError,
)


def failure_kind(exc: BaseException) -> FailureKind:
    """Whether a failed write is PostgreSQL's trouble ("unavailable"), the data's ("content"), or unknown."""
    if isinstance(exc, asyncpg.QueryCanceledError):
        return "other"  # 57014, e.g. a statement timeout on a huge window: retried a few times, then split
    if isinstance(exc, UNAVAILABLE_ERRORS):
        return "unavailable"
    if isinstance(exc, CONTENT_ERRORS):
        return "content"
    return "other"


def describe(exc: BaseException, limit: int = 300) -> str:
    """The error for a log line or a dead-letter reason, bounded (asyncpg quotes the arguments)."""
    text = f"{type(exc).__name__}: {exc}"
    return text if len(text) <= limit else text[: limit - 1] + "…"


REASON_MAX_CHARS = 1000
DLQ_RECORD_MAX_BYTES = 900_000  # below faust's max request size and Kafka's message size (both 1 MB)
DLQ_PART_BYTES = 600_000  # a larger record travels in parts of this many bytes (base64: 800 kB)


def dead_letter_records(
    reason: str, key: bytes | None, value: bytes | None, topic: str, partition: int, offset: int
) -> list[bytes]:
    """The dead-letter record: the reason and the original record, byte for byte (its value and key
    as text when they are UTF-8, else as {"base64": ...}). JSON escaping can make it larger than
    Kafka takes, though the original fitted: then it goes in parts ({"part": i, "parts": n,
    "record_base64": ...}, same key, so in order on one partition); `read_dead_letters` joins them."""
    if len(reason) > REASON_MAX_CHARS:
        reason = reason[: REASON_MAX_CHARS - 1] + "…"
    where = {"reason": reason, "topic": topic, "partition": partition, "offset": offset}
    record = json.dumps(
        {**where, "key": _text(key), "value": _text(value), "failed_at": datetime.now(UTC).isoformat()}
    ).encode()
    if len(record) <= DLQ_RECORD_MAX_BYTES:
        return [record]
    pieces = [record[i : i + DLQ_PART_BYTES] for i in range(0, len(record), DLQ_PART_BYTES)]
    return [
        json.dumps({**where, "part": n, "parts": len(pieces), "record_base64": base64.b64encode(p).decode()}).encode()
        for n, p in enumerate(pieces, 1)
    ]


DLQ_KEY_MAX_BYTES = 256


def dead_letter_key(key: bytes | None) -> bytes | None:
    """The key a dead-letter record is sent with: the original key, or its SHA-256 when it is long
    (a huge key on every part would make each part larger than Kafka takes; the record itself
    keeps the original key)."""
    if key is None or len(key) <= DLQ_KEY_MAX_BYTES:
        return key
    return b"sha256:" + hashlib.sha256(key).hexdigest().encode()


def _text(raw: bytes | None) -> Any:
    if raw is None:
        return None
    try:
        return raw.decode()
    except UnicodeDecodeError:
        return {"base64": base64.b64encode(raw).decode()}


def read_dead_letters(values: Iterable[bytes]) -> list[dict[str, Any]]:
    """Dead-letter records as consumed from the topic, in order, with parts joined into their record."""
    records: list[dict[str, Any]] = []
    parts: dict[tuple[str, int, int], list[bytes]] = {}
    for raw in values:
        obj = json.loads(raw)
        if "record_base64" not in obj:
            records.append(obj)
            continue
        pieces = parts.setdefault((obj["topic"], obj["partition"], obj["offset"]), [])
        if obj["part"] == 1:
            pieces.clear()  # a redelivered record starts again
        pieces.append(base64.b64decode(obj["record_base64"]))
        if obj["part"] == obj["parts"] == len(pieces):
            records.append(json.loads(b"".join(pieces)))
    return records


def original_value(record: dict[str, Any]) -> bytes | None:
    """The original record's value from a dead-letter record: exactly the bytes that were consumed."""
    value = record["value"]
    if value is None:
        return None
    return base64.b64decode(value["base64"]) if isinstance(value, dict) else str(value).encode()


# Dead-letter reasons by a phrase they contain, for the bounded `reason` label of SWEEPER_DLQ (the
# full reason is in the record); the first match wins.
_REASON_LABELS = (
    ("not JSON", "not_json"),
    ("no value", "no_value"),
    ("schema_version", "schema_version"),
    ("key", "key"),
    ("text", "text"),
    ("required", "required"),
    ("too long", "too_long"),
)


def reason_label(reason: str) -> str:
    """A bounded label for the DLQ metric of a record refused at decode."""
    return next((label for phrase, label in _REASON_LABELS if phrase in reason), "schema")


def read_record(key: bytes | None, value: Any, timestamp: float) -> Signal:
    """The signal a record holds, or an exception (InvalidSignal, or whatever else the record
    provokes) for the caller to dead-letter: a record is read whole inside one guard, so none can
    stop its partition (invariant 10). `timestamp` is the record's (seconds): the accepted time
    of a signal that carries none, as its producer set it (so it may be anything)."""
    signal = decode_signal(value)
    if key is not None and key != signal.user_id.encode():
        raise InvalidSignal(f"record key {key!r} does not match user_id {signal.user_id!r}")
    if signal.accepted_at is None:
        signal = signal.accepted(datetime.fromtimestamp(timestamp, UTC))
    return signal


class InOrderReceipt:
    """What the sweeper acks for one consumed record: `ack()` marks it stored (or dead-lettered);
    the record's own ack goes to the consumer once every record before it in its partition is
    marked too."""

    __slots__ = ("_done", "_queue", "event")

    def __init__(self, event: Any, queue: deque[InOrderReceipt]) -> None:
        self.event = event
        self._queue = queue
        self._done = False

    def ack(self) -> None:
        self._done = True
        queue = self._queue
        while queue and queue[0]._done:
            queue.popleft().event.ack()


class InOrderAcks:
    """Acks reach the consumer in offset order within each partition.

    faust commits "the first run of consecutive acked offsets" and lets a hole of one offset at
    its head pass (faust-streaming 0.15: `Consumer._new_offset` compares with the committed offset
    off by one, and not at all before the first commit), so acking a later window of a partition
    before an earlier one would commit past a signal that is not stored yet: a crash would lose it.
    After a rebalance a partition's old and re-read records share one queue; each is acked when
    its window is written, wherever the partition went (faust drops commits of revoked partitions).
    """

    def __init__(self) -> None:
        self._queues: dict[Hashable, deque[InOrderReceipt]] = {}

    def receipt(self, partition: Hashable, event: Any) -> InOrderReceipt:
        """Call for every record, in the order consumed."""
        queue = self._queues.setdefault(partition, deque())
        receipt = InOrderReceipt(event, queue)
        queue.append(receipt)
        return receipt


# (receipt, reason): produce the receipt's original record to the dead-letter topic with the
# reason, and return once Kafka acknowledged it. The sweeper acks the receipt after that.
DeadLetter = Callable[[Any, str], Awaitable[None]]


class Sweeper:
    """Per-user windows in, stored messages out; each window written, retried or split on its own."""

    def __init__(self, settings: SweeperSettings, dead_letter: DeadLetter) -> None:
        self.settings = settings
        self.dead_letter = dead_letter
        self.buffer = WindowBuffer(settings.window_seconds)
        self.stopping = False
        self._pool: asyncpg.Pool | None = None
        self._pool_lock = asyncio.Lock()
        self._flushing = asyncio.Lock()  # the timer's ticks and the final drain never write at once
        self._writing: Window | None = None  # detached from the buffer while its write runs
        self._closed = False

    async def pool(self) -> asyncpg.Pool:
        async with self._pool_lock:
            if self._closed:
                raise asyncpg.InterfaceError("the sweeper has stopped; its pool is closed")
            if self._pool is None:
                self._pool = await create_pool(self.settings.pg_dsn, 1, self.settings.pg_pool_max)
            return self._pool

    def add(self, signal: Signal, receipt: Any, now: float) -> None:
        self.buffer.add(signal, receipt, now)

    def oldest_unwritten_seconds(self, now: float) -> float:
        """How long ago the oldest closed window that is not yet written closed (0: none waits)."""
        ends = [self.buffer.oldest_closed_end(now), self._writing.end if self._writing else None]
        oldest = min((end for end in ends if end is not None), default=None)
        return 0.0 if oldest is None else max(0.0, now - oldest)

    def ready(self, now: float) -> bool:
        return self.oldest_unwritten_seconds(now) <= READY_MAX_UNWRITTEN_SECONDS

    async def flush_due(self, now: float) -> None:
        """Write every closed window that is not waiting for a retry, oldest first."""
        async with self._flushing:
            if self.stopping:
                return
            for window in self.buffer.due(now):
                if not await self._flush(window, now):
                    break  # PostgreSQL unavailable: the other windows are tried on the next ticks
            metrics.SWEEPER_OPEN_WINDOWS.set(len(self.buffer.open))

    async def stop(self, timeout: float = DRAIN_SECONDS) -> None:
        """Write every open window (closed or not) for at most `timeout` seconds, then close the pool.
        What is left stays unacked, and Kafka delivers it again after the restart."""
        self.stopping = True
        try:
            await asyncio.wait_for(self._drain(), timeout)
        except TimeoutError:
            log.warning("sweeper_drain_timed_out", seconds=timeout)
        left = sum(len(w.signals) for w in self.buffer.all())
        log.info("sweeper_drained", signals_left_unacked=left)
        async with self._pool_lock:
            self._closed = True  # a readiness probe during shutdown must not open a new pool
            if self._pool is not None:
                try:
                    await asyncio.wait_for(self._pool.close(), 2)
                except Exception:  # a write still holds a connection
                    self._pool.terminate()

    async def _drain(self) -> None:
        async with self._flushing:
            for window in sorted(self.buffer.all(), key=lambda w: w.end):
                if not await self._flush(window, time.time()):
                    return

    async def _write(self, user_id: str, signals: Sequence[Signal]) -> int:
        pool = await self.pool()
        async with pool.acquire() as conn:
            return await write_window(conn, user_id, signals)

    async def _flush(self, window: Window, now: float) -> bool:
        """Write one window; False if PostgreSQL is unavailable (the window waits for a retry)."""
        started = time.monotonic()
        self.buffer.detach(window)  # signals arriving during the write belong to the next window
        self._writing = window
        try:
            try:
                new = await self._write(window.user_id, window.signals)
            except Exception as exc:
                kind = failure_kind(exc)
                metrics.SWEEPER_WRITE_FAILURES.labels(kind).inc()
                if kind == "content" or (kind == "other" and window.attempts + 1 >= MAX_WINDOW_ATTEMPTS):
                    return await self._flush_one_by_one(window, exc, now)
                self._retry_later(window, kind, exc, now)
                return kind != "unavailable"
            except BaseException:
                self.buffer.restore(window)  # cancelled: nothing acked, written on a later tick
                raise
        finally:
            self._writing = None
        for receipt in window.receipts:
            receipt.ack()  # only now may the offset be committed
        metrics.SWEEPER_WINDOWS.inc()
        metrics.SWEEPER_SIGNALS.inc(new)
        metrics.SWEEPER_DUPLICATES.inc(len(window.signals) - new)
        metrics.SWEEPER_FLUSH_SECONDS.observe(time.monotonic() - started)
        log.info("window_closed", user_id=window.user_id, signals=len(window.signals), new=new)
        return True

    async def _flush_one_by_one(self, window: Window, cause: Exception, now: float) -> bool:
        """Write each signal of a failed window alone; dead-letter those PostgreSQL refuses."""
        log.warning(
            "window_split", user_id=window.user_id, signals=len(window.signals), attempts=window.attempts + 1,
            error=describe(cause),
        )  # fmt: skip
        stored = 0
        for i, (signal, receipt) in enumerate(zip(window.signals, window.receipts, strict=True)):
            try:
                try:
                    new = await self._write(window.user_id, [signal])
                except Exception as exc:
                    kind = failure_kind(exc)
                    if kind == "unavailable":
                        metrics.SWEEPER_WRITE_FAILURES.labels(kind).inc()
                        self._retry_later(window.rest(i), kind, exc, now)
                        return False
                    if not await self._dead_letter(window, i, exc, now):
                        return False
                    continue
            except BaseException:
                self.buffer.restore(window.rest(i))  # cancelled: the rest is written on a later tick
                raise
            receipt.ack()
            stored += 1
            metrics.SWEEPER_SIGNALS.inc(new)
            metrics.SWEEPER_DUPLICATES.inc(1 - new)
        metrics.SWEEPER_WINDOWS.inc()
        log.info("window_closed", user_id=window.user_id, signals=len(window.signals), stored=stored, split=True)
        return True

    async def _dead_letter(self, window: Window, i: int, exc: Exception, now: float) -> bool:
        """Send signal `i` of the window to the dead-letter topic and ack it; False if Kafka refused
        (the signal and the rest of the window then wait for a retry)."""
        if failure_kind(exc) == "content":
            reason = f"PostgreSQL cannot store this signal: {describe(exc)}"
        else:
            reason = f"writing this signal failed {window.attempts + 1} times: {describe(exc)}"
        try:
            await self.dead_letter(window.receipts[i], reason)
        except Exception as dlq_exc:
            self._retry_later(window.rest(i), "unavailable", dlq_exc, now)
            return False
        window.receipts[i].ack()  # its record is in the dead-letter topic: nothing is lost
        metrics.SWEEPER_DLQ.labels("write_failed").inc()
        log.warning("dead_lettered", user_id=window.user_id, message_id=window.signals[i].message_id, reason=reason)
        return True

    def _retry_later(self, window: Window, kind: FailureKind, exc: BaseException, now: float) -> None:
        window.failures += 1
        if kind != "unavailable":
            window.attempts += 1
        delay = min(RETRY_FIRST_SECONDS * 2 ** (window.failures - 1), RETRY_MAX_SECONDS)
        window.retry_at = now + delay
        window.last_error = describe(exc)
        self.buffer.restore(window)  # unacked, ahead of anything that arrived meanwhile
        log.warning(
            "window_write_failed", user_id=window.user_id, signals=len(window.signals), kind=kind,
            attempts=window.attempts, retry_in=delay, error=window.last_error,
        )  # fmt: skip
