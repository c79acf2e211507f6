"""The index's pure parts: payloads, the embedding cache, embedder choice, event parsing, drift
classification and the tools' settings. No services."""

from __future__ import annotations

import hashlib
import json
import uuid
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path

import pytest
from aiokafka import ConsumerRecord
from memwright.embeddings import CachedEmbedder, HashingEmbedder, make_embedder
from memwright.index import admin
from memwright.index.drift import Drift, _classify
from memwright.index.vectors import payload_for
from memwright.services.indexer.app import _memory_ids
from memwright.settings import IndexerSettings, QdrantSettings, SettingsError

ROW = {
    "memory_id": uuid.uuid4(),
    "user_id": "ana",
    "author": "agent",
    "kind": "preference",
    "text": "Prefers metric units ☃",
    "version": 3,
    "updated_at": datetime(2026, 5, 1, 12, 0, tzinfo=UTC),
}


def test_payload_is_spelled_the_same_whatever_the_session_time_zone() -> None:
    paris = ROW["updated_at"].astimezone(timezone(timedelta(hours=2)))
    assert payload_for({**ROW, "updated_at": paris}) == payload_for(ROW)
    assert payload_for(ROW) == {
        "user_id": "ana",
        "version": 3,
        "author": "agent",
        "kind": "preference",
        "updated_at": "2026-05-01T12:00:00+00:00",
        "text_hash": hashlib.sha256("Prefers metric units ☃".encode()).hexdigest(),
    }
    # a check brings the hash from PostgreSQL instead of the text: same payload
    without_text = {k: v for k, v in ROW.items() if k != "text"}
    assert payload_for({**without_text, "text_hash": payload_for(ROW)["text_hash"]}) == payload_for(ROW)


class CountingEmbedder(HashingEmbedder):
    def __init__(self) -> None:
        self.calls: list[list[str]] = []

    async def embed(self, texts: list[str]) -> list[list[float]]:
        self.calls.append(list(texts))
        return await super().embed(texts)


async def test_an_unchanged_text_is_never_embedded_twice() -> None:
    inner = CountingEmbedder()
    cached = CachedEmbedder(inner)
    first = await cached.embed(["tea", "coffee", "tea"])
    assert inner.calls == [["tea", "coffee"]]
    assert first[0] == first[2]
    assert await cached.embed(["coffee", "tea"]) == [first[1], first[0]]
    assert inner.calls == [["tea", "coffee"]] and cached.misses == 2


async def test_the_embedding_cache_is_bounded_and_forgets_the_least_recently_used() -> None:
    inner = CountingEmbedder()
    cached = CachedEmbedder(inner, size=2)
    await cached.embed(["a"])
    await cached.embed(["b"])
    await cached.embed(["a"])  # a is now the most recent
    await cached.embed(["c"])  # evicts b
    await cached.embed(["a", "b"])
    assert inner.calls == [["a"], ["b"], ["c"], ["b"]]


async def test_embedder_choice_errors_name_the_variable_and_the_choices() -> None:
    with pytest.raises(ValueError, match="choose 'hashing', 'openai' or 'local'"):
        await make_embedder(QdrantSettings(embedder="word2vec"))
    with pytest.raises(ValueError, match="MEMWRIGHT_EMBED_BASE_URL is not set"):
        await make_embedder(QdrantSettings(embedder="openai"))
    hashing = await make_embedder(QdrantSettings())
    assert (hashing.name, hashing.dim) == ("hashing", 256)


def _record(value: bytes | None, offset: int = 0) -> ConsumerRecord:
    return ConsumerRecord("t", 0, offset, 0, 0, None, value, None, 0, 0, ())


def test_unreadable_changelog_events_are_skipped_not_retried_forever() -> None:
    good = str(uuid.uuid4())
    event = {"memory_id": good, "user_id": "ana", "outbox_id": 1}
    records = [
        _record(b"{not json", 0),
        _record(None, 1),
        _record(json.dumps({**event, "memory_id": "not-a-uuid"}).encode(), 2),
        _record(json.dumps({"user_id": "ana"}).encode(), 3),
        _record(json.dumps({**event, "memory_id": good.upper()}).encode(), 4),
    ]
    assert _memory_ids(records) == [good]


def test_drift_is_classified_as_missing_stale_or_orphaned() -> None:
    a, b, c, d = (str(uuid.uuid4()) for _ in range(4))
    want = {a: {"user_id": "ana", "version": 1}, b: {"user_id": "ben", "version": 2}, c: {"user_id": "cho"}}
    have = {b: {"user_id": "ben", "version": 1}, c: {"user_id": "cho"}, d: {"user_id": "dan"}}
    drift = Drift()
    _classify(drift, want, have, want.keys() | have.keys())
    assert (drift.missing, drift.stale, drift.orphaned) == ({a: "ana"}, {b: "ben"}, {d: "dan"})
    assert drift.total == 3 and drift.ids() == sorted([a, b, d])
    assert {u: dict(k) for u, k in drift.by_user().items()} == {
        "ana": {"missing": 1},
        "ben": {"stale": 1},
        "dan": {"orphaned": 1},
    }


def test_indexer_timings_are_validated_at_start() -> None:
    env = {"MEMWRIGHT_KAFKA_BOOTSTRAP": "k:9092", "MEMWRIGHT_PG_DSN": "postgresql://x/y"}
    assert IndexerSettings.from_env(env).drift_check_seconds == 600.0
    with pytest.raises(SettingsError, match="DRIFT_CHECK_SECONDS"):
        IndexerSettings.from_env({**env, "MEMWRIGHT_DRIFT_CHECK_SECONDS": "-1"})


def test_demo_flag_points_at_the_demo_database_and_the_store_it_recorded(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MEMWRIGHT_PG_DSN", "postgresql://u:p@127.0.0.1:5432/memwright")
    monkeypatch.delenv("MEMWRIGHT_QDRANT_URL", raising=False)
    store = tmp_path / "demo" / "qdrant-1000"
    asked: list[str] = []

    async def recorded_store(dsn: str) -> str:  # what `memwright demo` wrote on the demo database
        asked.append(dsn)
        return str(store)

    monkeypatch.setattr(admin, "demo_store", recorded_store)
    with pytest.raises(ValueError, match=r"which is gone .* run `make demo` again"):
        admin._settings(demo=True)
    (tmp_path / "demo" / "qdrant-2000").mkdir(parents=True)  # a newer store of another run: not ours
    store.mkdir(parents=True)
    settings = admin._settings(demo=True)
    assert settings.pg_dsn == asked[-1] == "postgresql://u:p@127.0.0.1:5432/memwright_demo"
    assert settings.qdrant_path == str(store)
    assert admin._settings(demo=False).pg_dsn.endswith("/memwright")
