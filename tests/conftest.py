"""Shared fixtures. Kafka and PostgreSQL are real: the local stack (deploy/local/stack.sh)
is started once per session if it is not running, every session gets its own Kafka
topics and a freshly migrated test database."""

from __future__ import annotations

import asyncio
import os
import subprocess
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import asyncpg
import pytest
from aiohttp.test_utils import TestClient
from memwright.settings import KafkaSettings
from memwright.store import migrate
from memwright.store.db import create_pool
from memwright.store.migrate import create_database
from memwright.topics import ensure_topics, prefixed_topics

ROOT = Path(__file__).resolve().parents[1]
STACK = ROOT / "deploy" / "local" / "stack.sh"
TABLES = (
    "messages",
    "backlog",
    "agents",
    "agent_state",
    "memories",
    "memory_evidence",
    "memory_audit",
    "index_outbox",
    "curation_runs",
    "user_erasures",
)
JWT_SECRET = "test-secret-" + "x" * 32


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Mark each test by its folder; run tests that disturb the shared stack last."""
    for item in items:
        for kind in ("unit", "integration", "e2e", "drills"):
            if f"tests/{kind}/" in str(item.path).replace(os.sep, "/"):
                item.add_marker(getattr(pytest.mark, kind))
    items.sort(key=lambda item: item.get_closest_marker("disruptive") is not None)


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "disruptive: stops or restarts a shared service; runs last")


def _stack_env() -> dict[str, str]:
    out = subprocess.run([str(STACK), "env"], check=True, capture_output=True, text=True).stdout
    env = {}
    for line in out.splitlines():
        if line.startswith("export "):
            key, _, value = line.removeprefix("export ").partition("=")
            env[key] = value.strip("'\"")
    return env


@pytest.fixture(scope="session")
def stack() -> dict[str, str]:
    """The running local stack's addresses (started here if needed, left running for reuse)."""
    subprocess.run([str(STACK), "start"], check=True)
    return _stack_env()


SESSION = uuid.uuid4().hex[:8]  # names this session's databases and topics: parallel runs never collide


KAFKA_PREFIX = f"t{SESSION}"  # this session's topics, sweeper app id and indexer group


def fresh_database(stack: dict[str, str], purpose: str) -> str:
    """Create and migrate database memwright_<purpose>_<session>; return its DSN."""
    return asyncio.run(create_database(stack["MEMWRIGHT_PG_DSN"], f"memwright_{purpose}_{SESSION}"))


def drop_database(stack: dict[str, str], dsn: str) -> None:
    asyncio.run(migrate.drop_database(stack["MEMWRIGHT_PG_DSN"], dsn.rsplit("/", 1)[1]))


@pytest.fixture(scope="session")
def pg_dsn(stack: dict[str, str]) -> Iterator[str]:
    """A freshly migrated database for integration tests, dropped at the end of the session."""
    dsn = fresh_database(stack, "it")
    yield dsn
    drop_database(stack, dsn)


@pytest.fixture(scope="session")
async def pool(pg_dsn: str) -> AsyncIterator[asyncpg.Pool]:
    p = await create_pool(pg_dsn, 1, 20)
    yield p
    await p.close()


@pytest.fixture
async def db(pool: asyncpg.Pool) -> AsyncIterator[asyncpg.Pool]:
    """A pool on an empty database (all tables truncated before the test)."""
    await pool.execute(f"TRUNCATE {', '.join(TABLES)} RESTART IDENTITY")
    yield pool


@pytest.fixture(scope="session")
def kafka(stack: dict[str, str]) -> KafkaSettings:
    """Kafka settings with topics of this session only (no leftovers from other runs)."""
    settings = prefixed_topics(stack["MEMWRIGHT_KAFKA_BOOTSTRAP"], KAFKA_PREFIX)
    asyncio.run(ensure_topics(settings, sweeper_app_id=f"{KAFKA_PREFIX}-sweeper"))
    return settings


@pytest.fixture(scope="session")
def session_tmp(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    yield tmp_path_factory.mktemp("memwright")


async def raw_request(client: TestClient, head: bytes, body: bytes, hang_up: bool) -> bytes:
    """Send a request's bytes by hand (a body shorter than its Content-Length, say); with `hang_up`,
    close the connection before any answer, else return the whole answer (head and body)."""
    reader, writer = await asyncio.open_connection(client.host, client.port)
    writer.write(head + body)
    await writer.drain()
    if hang_up:
        await asyncio.sleep(0.05)
        writer.close()
        return b""
    answer_head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 10)  # the answer, while the body never came
    length = int(next(h for h in answer_head.split(b"\r\n") if h.lower().startswith(b"content-length:")).split(b":")[1])
    answer = answer_head + await asyncio.wait_for(reader.readexactly(length), 10)
    writer.close()
    return answer
