"""Outages are quiet and cheap: a repeating failure is one condition in the log, failed Kafka
connection attempts back off (bounded, jittered), and aiokafka's own per-attempt lines are folded
into the condition. (The long-outage drill bounds lines and CPU per service end to end.)"""

from __future__ import annotations

import asyncio
import gc
import logging
import time

import pytest
from aiokafka.client import AIOKafkaClient
from memwright import kafka
from memwright.logs import Condition
from structlog.testing import capture_logs


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_a_condition_failing_for_100_s_logs_four_warnings_and_one_recovery() -> None:
    clock = Clock()
    condition = Condition("kafka_unreachable", every=30, clock=clock)
    with capture_logs() as logs:
        for _ in range(400):  # 4 attempts a second for 100 s
            condition.failed(node="1")
            clock.now += 0.25
        condition.cleared()
        condition.cleared()  # clearing twice says nothing more
    assert [(e["event"], e["log_level"]) for e in logs] == [("kafka_unreachable", "warning")] * 4 + [
        ("kafka_unreachable_cleared", "info")
    ]
    assert logs[1]["for_s"] == 30 and logs[3]["attempts"] == 361 and logs[4]["attempts"] == 400


def test_a_condition_that_returns_after_clearing_is_reported_again() -> None:
    clock = Clock()
    condition = Condition("relay_failing", clock=clock)
    with capture_logs() as logs:
        condition.failed()
        condition.cleared()
        clock.now += 1
        condition.failed()
    assert [e["event"] for e in logs] == ["relay_failing", "relay_failing_cleared", "relay_failing"]


def test_reconnect_delay_grows_exponentially_up_to_the_bound_with_jitter() -> None:
    delays = [kafka.reconnect_delay(n) for n in range(1, 40)]
    low, high = 1 - kafka.RECONNECT_JITTER, 1 + kafka.RECONNECT_JITTER
    assert kafka.RECONNECT_BACKOFF_S * low <= delays[0] <= kafka.RECONNECT_BACKOFF_S * high
    assert all(d <= kafka.RECONNECT_BACKOFF_MAX_S * high for d in delays)
    assert min(delays[10:]) >= kafka.RECONNECT_BACKOFF_MAX_S * low
    assert len({round(kafka.reconnect_delay(30), 6) for _ in range(20)}) > 1, "no jitter"


def test_aiokafka_per_attempt_lines_are_dropped_and_its_complaints_only_during_an_outage() -> None:
    kafka.install_reconnect_backoff()
    seen: list[str] = []

    class Keep(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            seen.append(record.getMessage())

    handler = Keep()
    fetcher = logging.getLogger("aiokafka.consumer.fetcher")
    logging.getLogger("aiokafka").addHandler(handler)  # the fetcher's records reach it too
    try:
        logging.getLogger("aiokafka").error("Unable connect to node with id %s: %s", 1, "refused")
        fetcher.error("Failed fetch messages from %s: %s", 1, "NodeNotReadyError")
        kafka._FAILING[("127.0.0.1:9", 1)] = (1, time.monotonic())  # a node failing now
        fetcher.error("Failed fetch messages from %s: %s", 1, "NodeNotReadyError")
        del kafka._FAILING[("127.0.0.1:9", 1)]  # any client reached it again
        fetcher.error("Failed fetch messages from %s: %s", 2, "NodeNotReadyError")
    finally:
        logging.getLogger("aiokafka").removeHandler(handler)
    assert seen == [
        "Failed fetch messages from 1: NodeNotReadyError",
        "Failed fetch messages from 2: NodeNotReadyError",
    ]


@pytest.mark.parametrize("attempts_without_backoff", [1000])
async def test_failed_connection_attempts_back_off_instead_of_spinning(attempts_without_backoff: int) -> None:
    """A node that cannot be reached (here: one missing from the metadata, which fails at once
    like a refused connection) is retried a handful of times in 2 s, not thousands."""
    kafka.install_reconnect_backoff()
    client = AIOKafkaClient(bootstrap_servers="127.0.0.1:1")
    attempts = 0

    async def spin() -> None:
        nonlocal attempts
        while True:  # what aiokafka's sender does with an idempotent producer while Kafka is away
            assert await client._get_conn(7) is None
            attempts += 1

    task = asyncio.create_task(spin())
    await asyncio.sleep(2)
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)
    kafka._FAILING.clear()
    kafka._outage_ongoing()
    assert 1 <= attempts <= 20 < attempts_without_backoff, attempts


def test_an_outage_that_no_client_retries_any_more_is_over(monkeypatch: pytest.MonkeyPatch) -> None:
    """A failing node is forgotten once nobody has tried it for a while (its client was closed,
    e.g. a replaced producer): the condition clears instead of hiding aiokafka's lines for good."""
    now = [1000.0]
    monkeypatch.setattr(kafka.time, "monotonic", lambda: now[0])
    kafka._FAILING[("127.0.0.1:9", 1)] = (3, now[0])
    with capture_logs() as logs:
        kafka.UNREACHABLE.failed(node="1")
        assert kafka._outage_ongoing()
        now[0] += kafka._FORGET_AFTER_S + 1
        assert not kafka._outage_ongoing()
    assert [e["event"] for e in logs] == ["kafka_unreachable", "kafka_unreachable_cleared"]
    assert not kafka.UNREACHABLE.active


async def test_a_send_given_up_by_its_caller_leaves_no_error_for_asyncio_to_log() -> None:
    """Ingest gives a send 5 s; when Kafka answers later with an error, nobody reads it. Before,
    asyncio logged each such error as "exception was never retrieved": 786 lines in the long-outage
    drill's 50 s, far over its bound."""
    loop = asyncio.get_running_loop()
    unretrieved: list[dict[str, object]] = []
    previous = loop.get_exception_handler()
    loop.set_exception_handler(lambda _, context: unretrieved.append(context))
    pending: list[asyncio.Future[None]] = []

    alive: asyncio.Future[None] = loop.create_future()

    class Sender:
        sender_task = alive  # still running: the send waits on its records and on this

    class SlowProducer:  # answers each record later, like a broker that is away
        _sender = Sender()

        async def send(
            self, topic: str, key: bytes | None = None, value: bytes | None = None, headers: object = None
        ) -> asyncio.Future[None]:
            pending.append(loop.create_future())
            return pending[-1]

    kept = kafka.KeptProducer("127.0.0.1:1", name="ingest")
    kept.producer = SlowProducer()  # type: ignore[assignment]
    try:
        with pytest.raises(TimeoutError):
            await asyncio.wait_for(kept.send_all("t", [(b"k", b"v"), (b"k", b"w")]), 0.05)
        for future in pending:
            if not future.done():
                future.set_exception(kafka.KafkaError("LeaderNotAvailableError"))
        await asyncio.sleep(0)
        gc.collect()
        await asyncio.sleep(0)
    finally:
        loop.set_exception_handler(previous)
        alive.cancel()
    assert unretrieved == []
