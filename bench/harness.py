"""The bench's own corner of the running stack: a fresh database and Kafka topics named after
the run (so it never touches anyone else's data), the services as processes, and HTTP helpers.

Everything is reached the way a deployment reaches it: the services through HTTP and their
ops ports, the data through PostgreSQL, the signals through Kafka.
"""

from __future__ import annotations

import os
import secrets
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
from aiokafka.admin import AIOKafkaAdminClient
from memwright.auth import mint
from memwright.localrun import ServiceProcesses
from memwright.settings import AuthSettings, KafkaSettings
from memwright.store.migrate import create_database, drop_database, sibling_dsn
from memwright.topics import ensure_topics, isolated_env, prefixed_topics

POSITIVE_TEXTS = (
    "Always answer in metric units",
    "Never use emoji in your answers",
    "From now on reply in British English",
    "I prefer concise answers with bullet points",
)
CHATTER = (
    "can you help me with this function",
    "what is the weather like on mars",
    "thanks, that worked",
    "let's look at the second part now",
    "hmm, not sure about that one",
)


def signal(user_id: str, text: str, conversation_id: str = "c1", message_id: str | None = None) -> dict[str, Any]:
    return {
        "schema_version": 1,
        "user_id": user_id,
        "message_id": message_id or uuid.uuid4().hex[:16],
        "conversation_id": conversation_id,
        "text": text,
    }


@dataclass
class Topics:
    kafka: KafkaSettings
    app_prefix: str

    def env(self) -> dict[str, str]:
        return isolated_env(self.kafka, self.app_prefix)


class BenchStack:
    """A run's database and topics on the stack named by MEMWRIGHT_PG_DSN / MEMWRIGHT_KAFKA_BOOTSTRAP."""

    def __init__(self, work_dir: Path) -> None:
        admin = os.environ.get("MEMWRIGHT_PG_DSN")
        bootstrap = os.environ.get("MEMWRIGHT_KAFKA_BOOTSTRAP")
        if not admin or not bootstrap:
            raise SystemExit(
                "MEMWRIGHT_PG_DSN and MEMWRIGHT_KAFKA_BOOTSTRAP are not set; run `make bench` "
                '(it starts the local stack), or eval "$(deploy/local/stack.sh env)" first'
            )
        self.admin_dsn = admin
        self.bootstrap = bootstrap
        self.run_id = f"{time.strftime('%m%d%H%M')}{secrets.token_hex(2)}"
        self.database = f"memwright_bench_{self.run_id}"
        self.dsn = sibling_dsn(admin, self.database)
        self.work_dir = work_dir
        self.secret = secrets.token_hex(32)
        self.token = mint(
            AuthSettings(jwt_secret=self.secret), "service:bench", ["signals:write", "memories:read", "memories:write"]
        )
        self._topics: list[Topics] = []

    @property
    def pg_port(self) -> int:
        return int(self.admin_dsn.rsplit(":", 1)[1].split("/")[0])

    async def create_database(self) -> None:
        await create_database(self.admin_dsn, self.database)

    async def topics(self, name: str) -> Topics:
        prefix = f"b{self.run_id}{name}"
        kafka = prefixed_topics(self.bootstrap, prefix)
        await ensure_topics(kafka, sweeper_app_id=f"{prefix}-sweeper")
        topics = Topics(kafka, prefix)
        self._topics.append(topics)
        return topics

    async def cleanup(self) -> None:
        """Drop the run's database and delete its topics (best effort: never hide the results)."""
        try:
            await drop_database(self.admin_dsn, self.database)
        except Exception as exc:
            print(f"  (could not drop database {self.database}: {exc})", flush=True)
        admin = AIOKafkaAdminClient(bootstrap_servers=self.bootstrap)
        try:
            await admin.start()
            existing = set(await admin.list_topics())
            doomed = [n for n in existing if any(n.startswith(t.app_prefix) for t in self._topics)]
            if doomed:
                await admin.delete_topics(doomed)
        except Exception as exc:
            print(f"  (could not delete the bench topics: {exc})", flush=True)
        finally:
            await admin.close()

    def services(self, topics: Topics | None, name: str, **extra: str) -> ServiceProcesses:
        """The services' environment for this run (no Kafka topics for a part that needs none: the api)."""
        env = {
            "MEMWRIGHT_PG_DSN": self.dsn,
            "MEMWRIGHT_JWT_SECRET": self.secret,
            "MEMWRIGHT_WINDOW_SECONDS": "1",
            "MEMWRIGHT_POLL_SECONDS": "0.2",
            "MEMWRIGHT_QDRANT_PATH": str(self.work_dir / name / "qdrant"),
            "MEMWRIGHT_SWEEPER_DATA_DIR": str(self.work_dir / name / "sweeper"),
            "MEMWRIGHT_LOG_LEVEL": "warning",
            # the bench polls the api with one token far above a working agent's rate: lift the limit
            "MEMWRIGHT_RATE_LIMIT_PER_S": "100000",
            "MEMWRIGHT_RATE_LIMIT_BURST": "100000",
            **(topics.env() if topics else {}),
            **extra,
        }
        return ServiceProcesses(env, self.work_dir / name / "logs")

    def auth(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.token}"}


async def post_signals(
    http: aiohttp.ClientSession, url: str, stack: BenchStack, body: Any, timeout_s: float = 30.0
) -> int:
    """POST to ingest; return the number of signals accepted (0 when refused)."""
    async with http.post(
        url + "/v1/signals", json=body, headers=stack.auth(), timeout=aiohttp.ClientTimeout(total=timeout_s)
    ) as r:
        await r.read()
        if r.status == 202:
            return len(body["signals"]) if isinstance(body, dict) and "signals" in body else 1
        return 0


async def memory_count(http: aiohttp.ClientSession, api: str, stack: BenchStack, user_id: str) -> int:
    async with http.get(f"{api}/v1/users/{user_id}/memories", headers=stack.auth()) as r:
        if r.status != 200:
            return 0
        return len((await r.json())["memories"])
