"""Migrations and topics: idempotent, recorded, explicit."""

from __future__ import annotations

from dataclasses import replace

import asyncpg
import pytest
from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.admin.config_resource import ConfigResource, ConfigResourceType
from memwright.settings import KafkaSettings
from memwright.store import migrate as migrate_module
from memwright.store.migrate import Migration, load_migrations, migrate
from memwright.topics import ensure_topics, prefixed_topics

from tests.conftest import KAFKA_PREFIX


async def test_migrations_apply_once_and_are_recorded(pg_dsn: str) -> None:
    assert await migrate(pg_dsn) == []  # the session fixture already applied them
    conn = await asyncpg.connect(pg_dsn)
    try:
        recorded = await conn.fetch("SELECT version, checksum FROM schema_migrations ORDER BY version")
    finally:
        await conn.close()
    assert [(r["version"], r["checksum"]) for r in recorded] == [(m.version, m.checksum) for m in load_migrations()]


async def test_an_edited_applied_migration_is_an_error(pg_dsn: str, monkeypatch: pytest.MonkeyPatch) -> None:
    edited = [Migration(m.version, m.name, m.sql + "\n-- edited") for m in load_migrations()]
    monkeypatch.setattr(migrate_module, "load_migrations", lambda: edited)
    with pytest.raises(RuntimeError, match="changed after it was applied"):
        await migrate(pg_dsn)


async def test_topics_have_explicit_partitions_and_the_changelog_is_compacted(kafka: KafkaSettings) -> None:
    app_id = f"{KAFKA_PREFIX}-other-app"
    assert await ensure_topics(kafka, sweeper_app_id=app_id) == [f"{app_id}-__assignor-__leader"]
    assert await ensure_topics(kafka, sweeper_app_id=app_id) == []
    admin = AIOKafkaAdminClient(bootstrap_servers=kafka.kafka_bootstrap)
    await admin.start()
    try:
        described = {
            t["topic"]: len(t["partitions"])
            for t in await admin.describe_topics(
                [kafka.topic_signals, kafka.topic_dlq, kafka.topic_changelog, kafka.topic_changes]
            )
        }
        [config] = await admin.describe_configs([ConfigResource(ConfigResourceType.TOPIC, kafka.topic_changelog)])
        [signals_config] = await admin.describe_configs([ConfigResource(ConfigResourceType.TOPIC, kafka.topic_signals)])
    finally:
        await admin.close()
    assert described == {kafka.topic_signals: 6, kafka.topic_dlq: 3, kafka.topic_changelog: 6, kafka.topic_changes: 6}
    entries = {c[0]: c[1] for c in config.resources[0][4]}
    assert entries["cleanup.policy"] == "compact"
    assert {c[0]: c[1] for c in signals_config.resources[0][4]}["min.insync.replicas"] == "1"


async def test_more_replicas_than_brokers_is_refused_with_the_setting_to_change(kafka: KafkaSettings) -> None:
    three = replace(prefixed_topics(kafka.kafka_bootstrap, f"{KAFKA_PREFIX}-rf3"), topic_replication=3)
    with pytest.raises(
        RuntimeError, match=r"with 3 replicas: the cluster has fewer brokers.*MEMWRIGHT_TOPIC_REPLICATION"
    ):
        await ensure_topics(three, sweeper_app_id=f"{KAFKA_PREFIX}-rf3")
