"""Invariant 1: nothing on the message path waits on memory.

The ingest service must not even import a database driver, the LLM client or the
vector store; and with Kafka unavailable it answers 503 at once, never hangs."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import uuid

import pytest
from aiohttp.test_utils import TestClient, TestServer
from hypothesis import HealthCheck, example, given
from hypothesis import settings as settings_
from hypothesis import strategies as st
from memwright import metrics
from memwright.auth import mint
from memwright.events import Signal
from memwright.producer import SignalProducer
from memwright.quota import IngestQuota
from memwright.services.ingest import app as ingest_app
from memwright.services.ingest.app import build_app
from memwright.settings import IngestSettings

from tests.conftest import raw_request

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


# ---- any input gets a 4xx, never a 5xx, and every answer is counted --------------------


class AcceptingProducer:
    """Kafka acknowledges everything at once: the handler runs its whole path."""

    ready = True

    def __init__(self) -> None:
        self.sent: list[Signal] = []

    async def send_many(self, signals: list[Signal]) -> int:
        self.sent += signals
        return len(signals)


def _counted() -> dict[str, float]:
    return {
        code: metrics.INGEST_REQUESTS.labels(code)._value.get()
        for code in metrics.KNOWN_LABELS[metrics.INGEST_REQUESTS]
    }


def _signal(user: str = "u", text: str = "hi", **extra: object) -> dict[str, object]:
    return {
        "schema_version": 1,
        "user_id": user,
        "message_id": f"m-{uuid.uuid4().hex[:8]}",
        "conversation_id": "c",
        "text": text,
        **extra,
    }


JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=12), inner, max_size=4),
    max_leaves=12,
)
SIGNALISH = st.fixed_dictionaries(
    {"schema_version": st.sampled_from([1, 2, "1"]), "user_id": st.text(max_size=20),
     "message_id": st.text(max_size=20), "conversation_id": st.text(max_size=20), "text": st.text()},
    optional={"role": st.text(max_size=10), "sent_at": st.text(max_size=30), "extra": JSON},
)  # fmt: skip
BODIES = st.one_of(
    JSON.map(lambda v: json.dumps(v).encode()),
    SIGNALISH.map(lambda v: json.dumps(v).encode()),
    st.lists(SIGNALISH, max_size=3).map(lambda v: json.dumps({"signals": v}).encode()),
    st.binary(max_size=200),
    st.integers(1, 100_000).map(lambda n: b"[" * n + b"]" * n),  # nested past the recursion limit
    st.integers(4_301, 20_000).map(lambda n: b'{"schema_version": ' + b"9" * n + b"}"),  # over 4,300 digits
    st.integers(4_301, 20_000).map(lambda n: json.dumps(_signal()).encode()[:-1] + b', "n": ' + b"1" * n + b"}"),
)


def test_ingest_answers_any_body_with_a_4xx_or_202_never_a_5xx_and_counts_every_answer() -> None:
    settings = IngestSettings(kafka_bootstrap="127.0.0.1:1", jwt_secret="k" * 40, max_body_bytes=200_000)
    auth = {"Authorization": "Bearer " + mint(settings, "service:fuzz", ["signals:write"])}
    loop = asyncio.new_event_loop()
    client = TestClient(TestServer(build_app(settings, AcceptingProducer())), loop=loop)  # type: ignore[arg-type]
    loop.run_until_complete(client.start_server())

    async def post(body: bytes) -> int:
        async with client.post("/v1/signals", data=body, headers={**auth, "Content-Type": "application/json"}) as r:
            await r.read()
            return r.status

    @settings_(max_examples=300, deadline=None, suppress_health_check=list(HealthCheck))
    @given(body=BODIES)
    @example(body=b"[" * 100_000 + b"]" * 100_000)
    @example(body=b'{"schema_version": ' + b"1" * 5000 + b"}")
    @example(body=json.dumps(_signal(text="\x00")).encode())
    @example(body=json.dumps(_signal(text="\ud800")).encode())
    def run(body: bytes) -> None:
        before = _counted()
        status = loop.run_until_complete(post(body))
        after = _counted()
        assert status in (202, 400, 413, 429), (status, body[:200])
        assert sum(after.values()) - sum(before.values()) == 1 and after[str(status)] - before[str(status)] == 1

    try:
        run()
    finally:
        loop.run_until_complete(client.close())
        loop.close()


async def test_an_unexpected_error_is_a_counted_500_with_a_reason(monkeypatch: pytest.MonkeyPatch) -> None:
    def broken(body: object, max_batch: int) -> list[Signal]:
        raise RuntimeError("a bug nobody planned for")

    monkeypatch.setattr(ingest_app, "parse_body", broken)
    settings = IngestSettings(kafka_bootstrap="127.0.0.1:1", jwt_secret="k" * 40)
    auth = {"Authorization": "Bearer " + mint(settings, "service:t", ["signals:write"])}
    async with TestClient(TestServer(build_app(settings, AcceptingProducer()))) as client:  # type: ignore[arg-type]
        before = _counted()
        async with client.post("/v1/signals", json=_signal(), headers=auth) as r:
            assert r.status == 500 and "ingest log" in (await r.json())["error"]
        assert _counted()["500"] - before["500"] == 1


def _head(path: str, token: str, length: int) -> bytes:
    return (
        f"POST {path} HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {token}\r\nContent-Type: application/json\r\n"
        f"Content-Length: {length}\r\nConnection: close\r\n\r\n"
    ).encode()


async def test_a_client_that_hangs_up_mid_body_is_counted_as_gone_not_as_a_500() -> None:
    settings = IngestSettings(kafka_bootstrap="127.0.0.1:1", jwt_secret="k" * 40)
    token = mint(settings, "service:t", ["signals:write"])
    async with TestClient(TestServer(build_app(settings, AcceptingProducer()))) as client:  # type: ignore[arg-type]
        before = _counted()
        await raw_request(client, _head("/v1/signals", token, 1000), b'{"schema_version": 1', hang_up=True)
        for _ in range(100):
            if _counted() != before:
                break
            await asyncio.sleep(0.02)
        after = _counted()
        assert after["499"] - before["499"] == 1 and after["500"] == before["500"]


async def test_a_body_that_does_not_arrive_in_time_is_a_408() -> None:
    settings = IngestSettings(kafka_bootstrap="127.0.0.1:1", jwt_secret="k" * 40, body_read_timeout_s=0.3)
    token = mint(settings, "service:t", ["signals:write"])
    async with TestClient(TestServer(build_app(settings, AcceptingProducer()))) as client:  # type: ignore[arg-type]
        answer = await raw_request(client, _head("/v1/signals", token, 1000), b'{"schema_version": 1', hang_up=False)
        assert answer.startswith(b"HTTP/1.1 408") and b"did not arrive within 0.3 s" in answer


# ---- per-user quota ---------------------------------------------------------------------


async def test_each_user_has_an_ingest_quota_of_signals_and_bytes_with_a_429_and_retry_after() -> None:
    settings = IngestSettings(
        kafka_bootstrap="127.0.0.1:1", jwt_secret="k" * 40, ingest_quota_signals=3, ingest_quota_bytes=100
    )
    producer = AcceptingProducer()
    service = {"Authorization": "Bearer " + mint(settings, "service:chat", ["signals:write"])}
    alice = {"Authorization": "Bearer " + mint(settings, "alice", ["signals:write"])}
    async with TestClient(TestServer(build_app(settings, producer))) as client:  # type: ignore[arg-type]
        statuses = [(await client.post("/v1/signals", json=_signal("alice"), headers=alice)).status for _ in range(4)]
        assert statuses == [202, 202, 202, 429]
        r = await client.post("/v1/signals", json=_signal("alice"), headers=service)  # a service speaking for her too
        answer = await r.json()
        assert r.status == 429 and "3 signals per 60 s" in answer["error"] and 1 <= int(r.headers["Retry-After"]) <= 60
        r = await client.post("/v1/signals", json={"signals": [_signal("bob"), _signal("carol")]}, headers=service)
        assert r.status == 202  # other users have their own quota
        r = await client.post("/v1/signals", json=_signal("dave", "x" * 101), headers=service)
        assert r.status == 429 and "100 bytes of text per 60 s" in (await r.json())["error"]
        r = await client.post(
            "/v1/signals", json={"signals": [_signal("erin"), _signal("erin", "x" * 100)]}, headers=service
        )
        assert r.status == 429  # all or nothing: the first of the two is not sent either
    assert [s.user_id for s in producer.sent] == ["alice"] * 3 + ["bob", "carol"]


def test_the_quota_window_resets() -> None:
    now = [0.0]
    quota = IngestQuota(window_s=10, signals=2, bytes_=1000, clock=lambda: now[0])
    assert quota.take([("a", 1), ("a", 1)]) is None
    refused = quota.take([("a", 1)])
    assert refused is not None and refused.retry_after_s == 10
    now[0] = 9.5
    assert quota.take([("a", 1)]) is not None
    now[0] = 10.0
    assert quota.take([("a", 1)]) is None


async def test_a_user_id_with_the_service_prefix_is_refused_and_a_user_admin_token_reaches_only_itself() -> None:
    settings = IngestSettings(kafka_bootstrap="127.0.0.1:1", jwt_secret="k" * 40)
    service = {"Authorization": "Bearer " + mint(settings, "service:chat", ["signals:write"])}
    admin_user = {"Authorization": "Bearer " + mint(settings, "alice", ["admin"])}
    async with TestClient(TestServer(build_app(settings, AcceptingProducer()))) as client:  # type: ignore[arg-type]
        r = await client.post("/v1/signals", json=_signal("service:billing"), headers=service)
        assert r.status == 400 and "must not start with 'service:'" in (await r.json())["error"]
        assert (await client.post("/v1/signals", json=_signal("bob"), headers=admin_user)).status == 403
        assert (await client.post("/v1/signals", json=_signal("alice"), headers=admin_user)).status == 202


async def test_signals_kafka_did_not_take_are_not_charged_to_the_quota() -> None:
    class Failing(AcceptingProducer):
        async def send_many(self, signals: list[Signal]) -> int:
            raise TimeoutError  # Kafka did not acknowledge in time

    settings = IngestSettings(kafka_bootstrap="127.0.0.1:1", jwt_secret="k" * 40, ingest_quota_signals=2)
    alice = {"Authorization": "Bearer " + mint(settings, "alice", ["signals:write"])}
    async with TestClient(TestServer(build_app(settings, Failing()))) as client:  # type: ignore[arg-type]
        statuses = [(await client.post("/v1/signals", json=_signal("alice"), headers=alice)).status for _ in range(5)]
    assert statuses == [503] * 5  # retries of a failed produce never turn into 429s
