"""Fixtures shared by the integration tests of the api's memory routes, and of the adapters."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass

import asyncpg
import pytest
from aiohttp.test_utils import TestClient, TestServer
from memwright.auth import mint
from memwright.events import Signal, decode_signal
from memwright.producer import SignalProducer
from memwright.services.api.app import build_app
from memwright.services.ingest.app import build_app as build_ingest
from memwright.settings import IngestSettings, KafkaSettings
from memwright.store.sweeps import write_window

from tests.conftest import JWT_SECRET
from tests.integration.helpers import new_topic, read_topic
from tests.integration.test_api_memories import SETTINGS, Api


@pytest.fixture
async def api(db: asyncpg.Pool) -> AsyncIterator[Api]:
    """The api on the test database, in this process (test_api_security.py has its own)."""
    await db.execute("TRUNCATE user_erasures")
    async with TestClient(TestServer(build_app(SETTINGS, db))) as client:
        yield Api(client, SETTINGS)
    # an erasure drops later-arriving messages accepted before it: leave none for other tests
    await db.execute("TRUNCATE user_erasures")


# ---- ingest and api as one working agent sees them (adapters, hooks, examples) ---------------


@dataclass
class TurnServices:
    """Ingest (producing to a topic of its own on the real Kafka) and the api (on the test database),
    both in this process on real sockets, as a working agent reaches them."""

    api_url: str
    ingest_url: str
    topic: str
    kafka: KafkaSettings
    db: asyncpg.Pool

    def token(self, user: str = "alice", *scopes: str) -> str:
        return mint(SETTINGS, user, list(scopes or ("memories:read", "memories:write", "signals:write")))

    async def sweep(self, expected: int) -> list[Signal]:
        """Read the `expected` signals ingest put on the topic and store them as the sweeper would."""
        signals = [decode_signal(r.value) for r in await read_topic(self.kafka, self.topic, expected)]
        assert len(signals) == expected, f"ingest produced {len(signals)} signals, expected {expected}"
        async with self.db.acquire() as conn:
            for user in dict.fromkeys(s.user_id for s in signals):
                await write_window(conn, user, [s for s in signals if s.user_id == user])
        return signals


@pytest.fixture
async def turn_services(db: asyncpg.Pool, kafka: KafkaSettings) -> AsyncIterator[TurnServices]:
    topic = await new_topic(kafka, "turns")
    settings = IngestSettings(kafka_bootstrap=kafka.kafka_bootstrap, jwt_secret=JWT_SECRET, topic_signals=topic)
    await db.execute("TRUNCATE user_erasures")
    async with (
        SignalProducer(kafka.kafka_bootstrap, topic, name="ingest") as producer,
        TestServer(build_ingest(settings, producer)) as ingest,
        TestServer(build_app(SETTINGS, db)) as api,
    ):
        yield TurnServices(str(api.make_url("")).rstrip("/"), str(ingest.make_url("")).rstrip("/"), topic, kafka, db)
    await db.execute("TRUNCATE user_erasures")
