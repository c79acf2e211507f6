"""The signal producer: how other services drop signals straight onto Kafka.

    async with SignalProducer("kafka:9092") as producer:
        await producer.send({"schema_version": 1, "user_id": "u1", "message_id": "m1",
                             "conversation_id": "c1", "text": "Always answer in metric units"})

Every signal is validated against the schema before it is produced (acks=all,
idempotent producer, key = user_id). `send` returns after Kafka acknowledged.

It lives through Kafka outages (memwright.kafka.KeptProducer): while Kafka is away `send`
raises KafkaUnavailable at once, a producer wedged by a broker restart is replaced by a
new one, and reconnect attempts back off (this applies to every aiokafka client of the
process). A send that failed may be retried: the message id makes the signal idempotent.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import UTC, datetime
from types import TracebackType
from typing import Any

from memwright.events import Signal, parse_signal
from memwright.kafka import KafkaUnavailable, KeptProducer

__all__ = ["KafkaUnavailable", "SignalProducer"]


class SignalProducer:
    def __init__(
        self, bootstrap: str, topic: str = "memory.signals", *, name: str = "signals", **producer_options: Any
    ) -> None:
        self.topic = topic
        self.kafka = KeptProducer(bootstrap, name=name, **producer_options)

    @property
    def ready(self) -> bool:
        return self.kafka.ready

    async def start(self, wait_s: float | None = 30.0) -> None:
        """Connect; wait up to `wait_s` seconds (KafkaUnavailable after that), or None: return at
        once and keep connecting in the background (sends raise KafkaUnavailable until then)."""
        self.kafka.start()
        if wait_s is None:
            return
        try:
            await self.kafka.wait_ready(wait_s)
        except BaseException:
            await self.kafka.stop()
            raise

    async def stop(self) -> None:
        await self.kafka.stop()

    async def __aenter__(self) -> SignalProducer:
        await self.start()
        return self

    async def __aexit__(
        self, et: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.stop()

    async def send(self, signal: Signal | dict[str, Any]) -> None:
        await self.send_many([signal])

    async def send_many(self, signals: Iterable[Signal | dict[str, Any]]) -> int:
        """Validate all (Signal objects too: one built by hand has not been checked), then produce
        all and wait until Kafka acknowledged every one."""
        now = datetime.now(UTC)
        parsed = [
            parse_signal(s.to_record() if isinstance(s, Signal) else s, i).accepted(now) for i, s in enumerate(signals)
        ]
        await self.kafka.send_all(self.topic, [(s.user_id.encode(), s.to_bytes()) for s in parsed])
        return len(parsed)
