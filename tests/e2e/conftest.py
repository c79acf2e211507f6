"""The five services as real processes against the local stack, started once per session."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path

import aiohttp
import asyncpg
import pytest
from memwright.auth import mint
from memwright.localrun import ServiceProcesses
from memwright.settings import AuthSettings, KafkaSettings
from memwright.store.db import create_pool
from memwright.topics import isolated_env

from tests.conftest import JWT_SECRET, KAFKA_PREFIX, drop_database, fresh_database

WINDOW_SECONDS = 1.0


@dataclass
class Pipeline:
    procs: ServiceProcesses
    env: dict[str, str]
    kafka: KafkaSettings
    service_token: str

    @property
    def ingest(self) -> str:
        return self.procs.url("ingest")

    @property
    def api(self) -> str:
        return self.procs.url("api")

    def auth(self, token: str | None = None) -> dict[str, str]:
        return {"Authorization": f"Bearer {token or self.service_token}"}


@pytest.fixture(scope="session")
def pipeline(stack: dict[str, str], kafka: KafkaSettings, session_tmp: Path) -> Iterator[Pipeline]:
    dsn = fresh_database(stack, "e2e")
    env = {
        **isolated_env(kafka, KAFKA_PREFIX),
        "MEMWRIGHT_SWEEPER_DATA_DIR": str(session_tmp / "sweeper"),
        "MEMWRIGHT_PG_DSN": dsn,
        "MEMWRIGHT_JWT_SECRET": JWT_SECRET,
        "MEMWRIGHT_WINDOW_SECONDS": str(WINDOW_SECONDS),
        "MEMWRIGHT_POLL_SECONDS": "0.2",
        "MEMWRIGHT_QDRANT_PATH": str(session_tmp / "qdrant"),
        "MEMWRIGHT_QDRANT_URL": "",  # the embedded Qdrant Edge store even where a server is named
        "MEMWRIGHT_LOG_LEVEL": "info",
    }
    procs = ServiceProcesses(env, session_tmp / "logs")
    procs.start()
    asyncio.run(procs.wait_ready(timeout=90))
    token = mint(AuthSettings(jwt_secret=JWT_SECRET), "service:tests", ["signals:write", "memories:read", "admin"])
    yield Pipeline(procs, env, kafka, token)
    codes = procs.stop()
    drop_database(stack, dsn)
    # every service shuts down cleanly on SIGTERM
    assert all(code == 0 for code in codes.values()), f"unclean shutdown: {codes} (logs in {procs.log_dir})"


@pytest.fixture(scope="session")
async def e2e_pool(pipeline: Pipeline) -> AsyncIterator[asyncpg.Pool]:
    p = await create_pool(pipeline.env["MEMWRIGHT_PG_DSN"], 1, 5)
    yield p
    await p.close()


@pytest.fixture
async def http() -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=30)) as session:
        yield session
