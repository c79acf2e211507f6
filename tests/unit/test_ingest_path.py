"""Invariant 1: nothing on the message path waits on memory.

The ingest service must not even import a database driver, the LLM client or the
vector store; and with Kafka unavailable it answers 503 at once, never hangs."""

from __future__ import annotations

import json
import subprocess
import sys

from aiohttp.test_utils import TestClient, TestServer
from memwright.auth import mint
from memwright.producer import SignalProducer
from memwright.services.ingest.app import build_app
from memwright.settings import IngestSettings

SETTINGS = IngestSettings(kafka_bootstrap="127.0.0.1:1", jwt_secret="k" * 40)


def test_ingest_imports_no_database_llm_or_vector_client() -> None:
    code = (
        "import sys, memwright.services.ingest.app\n"
        "print([m for m in ('asyncpg', 'openai', 'qdrant_client') if m in sys.modules])"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


async def test_without_kafka_ingest_answers_503_and_validates_first() -> None:
    producer = SignalProducer(SETTINGS.kafka_bootstrap)  # never started: Kafka is unavailable
    token = mint(SETTINGS, "service:t", ["signals:write"])
    auth = {"Authorization": f"Bearer {token}"}
    async with TestClient(TestServer(build_app(SETTINGS, producer))) as client:
        ok = {"schema_version": 1, "user_id": "u", "message_id": "m", "conversation_id": "c", "text": "hi"}
        r = await client.post("/v1/signals", json=ok, headers=auth)
        assert r.status == 503 and "Kafka" in (await r.json())["error"]
        r = await client.post("/v1/signals", json={**ok, "text": ""}, headers=auth)
        assert r.status == 400
        r = await client.post("/v1/signals", data="{", headers=auth)
        assert r.status == 400 and "not JSON" in (await r.json())["error"]
        r = await client.post("/v1/signals", json={"signals": [ok, {**ok, "user_id": ""}]}, headers=auth)
        assert r.status == 400 and (await r.json())["error"].startswith("signals[1]")
        r = await client.post("/v1/signals", json=ok)
        assert r.status == 401
        user_token = mint(SETTINGS, "alice", ["signals:write"])
        r = await client.post("/v1/signals", json=ok, headers={"Authorization": f"Bearer {user_token}"})
        assert r.status == 403 and json.loads(await r.text())["error"].startswith("token may not send")
