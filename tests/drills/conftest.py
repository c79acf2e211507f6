"""Fault drills run against a PRIVATE Kafka + PostgreSQL: deploy/local/stack.sh with its own
state folder and free ports, started once per session and stopped at its end. Drills stop,
restart and kill freely; the shared stack that other test sessions use is never touched.

Each drill gets a fresh database, fresh topics and the five services as processes
(`drill` fixture), with a 1 s window and a 10 s lease so recovery stays within seconds.
"""

from __future__ import annotations

import os
import random
import shutil
import socket
import subprocess
import tempfile
import uuid
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass
from pathlib import Path

import asyncpg
import pytest
from memwright.auth import mint
from memwright.localrun import SERVICES, ServiceProcesses, free_ports
from memwright.settings import AuthSettings, KafkaSettings
from memwright.store.migrate import create_database, drop_database
from memwright.topics import ensure_topics, isolated_env, prefixed_topics

from tests.conftest import JWT_SECRET, ROOT, STACK

LEASE_SECONDS = 10  # a SIGKILLed curator's users are taken over when its lease expires


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "drills: fault drills against a private Kafka + PostgreSQL (tests/drills)")
    config.addinivalue_line("markers", "cluster: drills on a private three-broker Kafka (its start adds ~1 min)")


@dataclass
class PrivateStack:
    local_dir: Path
    kafka_port: int
    controller_port: int
    pg_port: int
    brokers: int = 1
    own_postgres: bool = True  # False: Kafka only, PostgreSQL is another stack's

    @property
    def env(self) -> dict[str, str]:
        return {
            "MEMWRIGHT_LOCAL_DIR": str(self.local_dir),
            "MEMWRIGHT_KAFKA_PORT": str(self.kafka_port),
            "MEMWRIGHT_KAFKA_CONTROLLER_PORT": str(self.controller_port),
            "MEMWRIGHT_PG_PORT": str(self.pg_port),
            "MEMWRIGHT_KAFKA_BROKERS": str(self.brokers),
        }

    @property
    def bootstrap(self) -> str:
        """Every broker (stack.sh puts node n on the first port + 2(n-1))."""
        return ",".join(f"127.0.0.1:{self.kafka_port + 2 * n}" for n in range(self.brokers))

    def broker_pid(self, node: int) -> int:
        folder = self.local_dir / ("kafka" if node == 1 else f"kafka-{node}")
        return int((folder / "kafka.pid").read_text())

    @property
    def admin_dsn(self) -> str:
        return f"postgresql://memwright:memwright@127.0.0.1:{self.pg_port}/memwright"

    def _stack(self, command: str, component: str = "all") -> None:
        if component == "all" and not self.own_postgres:
            component = "kafka"
        done = subprocess.run(
            [str(STACK), command, component],
            env={**os.environ, **self.env},
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            timeout=180,
        )
        if done.returncode != 0:
            raise RuntimeError(f"stack.sh {command} {component} failed:\n{done.stdout}")

    def start(self, component: str = "all") -> None:
        self._stack("start", component)

    def stop(self, component: str = "all") -> None:
        self._stack("stop", component)


def _state_folder() -> Path:
    local = Path(tempfile.mkdtemp(prefix="memwright-drills-"))
    local.chmod(0o755)  # PostgreSQL runs as the postgres user when we are root: it must reach its folder
    cache = ROOT / ".local" / "cache"
    cache.mkdir(parents=True, exist_ok=True)
    (local / "cache").symlink_to(cache)  # the Kafka jars, fetched once for every stack
    return local


@contextmanager
def _started(stack: PrivateStack) -> Iterator[PrivateStack]:
    try:
        stack.start()
        yield stack
    finally:
        try:
            stack.stop()
        finally:
            shutil.rmtree(stack.local_dir, ignore_errors=True)


@pytest.fixture(scope="session")
def private_stack() -> Iterator[PrivateStack]:
    kafka, controller, pg = free_ports(3)
    with _started(PrivateStack(_state_folder(), kafka, controller, pg)) as stack:
        yield stack


def _free_port_run(count: int) -> int:
    """The first of `count` consecutive ports that are all free on 127.0.0.1."""
    for _ in range(200):
        first = random.randrange(20000, 60000, 2)
        sockets = [socket.socket() for _ in range(count)]
        try:
            for i, s in enumerate(sockets):
                s.bind(("127.0.0.1", first + i))
            return first
        except OSError:
            continue
        finally:
            for s in sockets:
                s.close()
    raise RuntimeError(f"no {count} consecutive free ports found")


@pytest.fixture(scope="session")
def kafka_cluster(private_stack: PrivateStack) -> Iterator[PrivateStack]:
    """A private three-broker Kafka (stack.sh --brokers 3) beside the private stack's PostgreSQL."""
    first = _free_port_run(6)
    cluster = PrivateStack(_state_folder(), first, first + 1, private_stack.pg_port, brokers=3, own_postgres=False)
    with _started(cluster) as stack:
        yield stack


@dataclass
class Drill:
    stack: PrivateStack
    procs: ServiceProcesses
    dsn: str
    kafka: KafkaSettings
    token: str
    pool: asyncpg.Pool

    @property
    def ingest(self) -> str:
        return self.procs.url("ingest")

    def auth(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.token}"}


@asynccontextmanager
async def running(
    stack: PrivateStack,
    tmp_path: Path,
    names: tuple[str, ...] = SERVICES,
    extra_env: dict[str, str] | None = None,
    restore: bool = True,
) -> AsyncIterator[Drill]:
    """A fresh database and topics on `stack`, and the services `names` running on them (a name
    `sweeper:2` is a second sweeper: each instance gets its own data folder). With `restore`, a
    part of the stack the drill stopped is started again at the end, for the next drill."""
    stack.start()  # idempotent: a drill that failed half-way may have left a part stopped
    tag = uuid.uuid4().hex[:8]
    database = f"drill_{tag}"
    dsn = await create_database(stack.admin_dsn, database)
    prefix = f"d{tag}"
    kafka = prefixed_topics(stack.bootstrap, prefix, replication=stack.brokers)
    await ensure_topics(kafka, sweeper_app_id=f"{prefix}-sweeper")
    env = {
        **isolated_env(kafka, prefix),
        "MEMWRIGHT_SWEEPER_DATA_DIR": str(tmp_path / "sweeper"),
        "MEMWRIGHT_TOPIC_REPLICATION": str(stack.brokers),
        "MEMWRIGHT_PG_DSN": dsn,
        "MEMWRIGHT_JWT_SECRET": JWT_SECRET,
        "MEMWRIGHT_WINDOW_SECONDS": "1",
        "MEMWRIGHT_POLL_SECONDS": "0.2",
        "MEMWRIGHT_LEASE_SECONDS": str(LEASE_SECONDS),
        "MEMWRIGHT_QDRANT_PATH": str(tmp_path / "qdrant"),
        "MEMWRIGHT_QDRANT_URL": "",  # the embedded Qdrant Edge store even where a server is named
        "MEMWRIGHT_LOG_LEVEL": "info",
        **(extra_env or {}),
    }
    procs = ServiceProcesses(env, tmp_path / "logs")
    for name in names:
        procs.start(name, extra_env={"MEMWRIGHT_SWEEPER_DATA_DIR": str(tmp_path / name.replace(":", "-"))})
    pool = await asyncpg.create_pool(dsn, min_size=0, max_size=4)  # min 0: no reconnect noise while PostgreSQL is down
    assert pool is not None
    try:
        await procs.wait_ready(timeout=120)
        token = mint(AuthSettings(jwt_secret=JWT_SECRET), "service:drills", ["signals:write", "memories:read"])
        yield Drill(stack, procs, dsn, kafka, token, pool)
    finally:
        await pool.close()
        procs.stop()
        if restore:
            stack.start()  # leave the stack whole for the next drill
        await drop_database(stack.admin_dsn, database)


@pytest.fixture
async def drill(private_stack: PrivateStack, tmp_path: Path) -> AsyncIterator[Drill]:
    """A fresh database and topics on the private stack, and the five services running on them."""
    async with running(private_stack, tmp_path) as drill:
        yield drill
