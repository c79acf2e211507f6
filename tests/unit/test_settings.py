"""Settings come only from MEMWRIGHT_* variables and name the one that is wrong."""

from __future__ import annotations

import pytest
from memwright.settings import CuratorSettings, IngestSettings, KafkaSettings, SettingsError, SweeperSettings
from memwright.topics import topic_specs

SECRET = "s" * 40


def test_a_missing_required_variable_is_named_with_what_to_do() -> None:
    with pytest.raises(SettingsError, match="MEMWRIGHT_PG_DSN is not set; export it"):
        CuratorSettings.from_env({})


def test_values_are_typed_and_validated() -> None:
    s = SweeperSettings.from_env(
        {"MEMWRIGHT_PG_DSN": "postgresql://x", "MEMWRIGHT_KAFKA_BOOTSTRAP": "k:9092", "MEMWRIGHT_WINDOW_SECONDS": "1.5"}
    )
    assert s.window_seconds == 1.5
    with pytest.raises(SettingsError, match="MEMWRIGHT_WINDOW_SECONDS='soon' is not valid"):
        SweeperSettings.from_env(
            {"MEMWRIGHT_PG_DSN": "x", "MEMWRIGHT_KAFKA_BOOTSTRAP": "k", "MEMWRIGHT_WINDOW_SECONDS": "soon"}
        )
    with pytest.raises(SettingsError, match="between 1 and 3600"):
        SweeperSettings.from_env(
            {"MEMWRIGHT_PG_DSN": "x", "MEMWRIGHT_KAFKA_BOOTSTRAP": "k", "MEMWRIGHT_WINDOW_SECONDS": "0.1"}
        )


def test_a_short_jwt_secret_is_refused_and_secrets_are_not_in_repr() -> None:
    with pytest.raises(SettingsError, match="at least 32 characters"):
        IngestSettings.from_env({"MEMWRIGHT_KAFKA_BOOTSTRAP": "k", "MEMWRIGHT_JWT_SECRET": "short"})
    s = IngestSettings.from_env({"MEMWRIGHT_KAFKA_BOOTSTRAP": "k", "MEMWRIGHT_JWT_SECRET": SECRET})
    assert SECRET not in repr(s)


def test_the_ingest_producer_linger_is_bounded() -> None:
    env = {"MEMWRIGHT_KAFKA_BOOTSTRAP": "k", "MEMWRIGHT_JWT_SECRET": SECRET}
    assert IngestSettings.from_env(env).producer_linger_ms == 0
    assert IngestSettings.from_env({**env, "MEMWRIGHT_PRODUCER_LINGER_MS": "5"}).producer_linger_ms == 5
    with pytest.raises(SettingsError, match="MEMWRIGHT_PRODUCER_LINGER_MS=-1 must be between 0 and 1000"):
        IngestSettings.from_env({**env, "MEMWRIGHT_PRODUCER_LINGER_MS": "-1"})


def test_the_llm_policy_needs_an_endpoint() -> None:
    with pytest.raises(SettingsError, match="MEMWRIGHT_LLM_BASE_URL is not set"):
        CuratorSettings.from_env({"MEMWRIGHT_PG_DSN": "x", "MEMWRIGHT_POLICY": "llm"})


@pytest.mark.parametrize(("replication", "min_insync"), [(1, "1"), (2, "1"), (3, "2"), (5, "2")])
def test_topics_are_created_with_the_configured_replication(replication: int, min_insync: str) -> None:
    kafka = KafkaSettings.from_env({"MEMWRIGHT_KAFKA_BOOTSTRAP": "k", "MEMWRIGHT_TOPIC_REPLICATION": str(replication)})
    durable = {s.name: s.config["min.insync.replicas"] for s in topic_specs(kafka) if "min.insync.replicas" in s.config}
    topics = [kafka.topic_signals, kafka.topic_dlq, kafka.topic_changelog, kafka.topic_changes]
    assert durable == dict.fromkeys(topics, min_insync)
    with pytest.raises(SettingsError, match="MEMWRIGHT_TOPIC_REPLICATION=0 must be between 1 and 7"):
        KafkaSettings.from_env({"MEMWRIGHT_KAFKA_BOOTSTRAP": "k", "MEMWRIGHT_TOPIC_REPLICATION": "0"})


def test_the_rules_policy_reads_slots_only_when_asked() -> None:
    from memwright.services.curator.app import make_policy

    env = {"MEMWRIGHT_PG_DSN": "x"}
    assert make_policy(CuratorSettings.from_env(env)).read_slots is False  # type: ignore[attr-defined]
    on = CuratorSettings.from_env({**env, "MEMWRIGHT_RULES_SLOTS": "true"})
    assert on.rules_slots is True and make_policy(on).read_slots is True  # type: ignore[attr-defined]
