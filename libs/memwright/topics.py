"""The Kafka topics memwright owns, with explicit partition counts and configs."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field, replace

from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from aiokafka.errors import TopicAlreadyExistsError

from memwright.settings import KafkaSettings

WEEK_MS = 7 * 24 * 3600 * 1000


@dataclass(frozen=True)
class TopicSpec:
    name: str
    partitions: int
    config: dict[str, str] = field(default_factory=dict)


def min_insync_replicas(replication: int) -> int:
    """With acks=all, a write needs this many copies: 2 of 3 (survives one broker, refuses rather than
    keep a single copy), 1 of 2 (still writable with one broker down), 1 of 1."""
    return min(2, max(1, replication - 1))


def topic_specs(settings: KafkaSettings, sweeper_app_id: str = "memwright-sweeper") -> list[TopicSpec]:
    durable = {"min.insync.replicas": str(min_insync_replicas(settings.topic_replication))}
    return [
        # key = user_id, so one user's signals stay ordered on one partition
        TopicSpec(settings.topic_signals, 6, {"retention.ms": str(WEEK_MS), **durable}),
        TopicSpec(settings.topic_dlq, 3, {"retention.ms": str(4 * WEEK_MS), **durable}),
        # key = memory_id; compacted: the latest event per memory is all the indexer needs
        TopicSpec(
            settings.topic_changelog, 6, {"cleanup.policy": "compact", "min.compaction.lag.ms": "60000", **durable}
        ),
        # key = user_id; the public change events (CloudEvents), kept a week like the signals
        TopicSpec(settings.topic_changes, 6, {"retention.ms": str(WEEK_MS), **durable}),
        # faust's partition assignor topic for the sweeper app
        TopicSpec(f"{sweeper_app_id}-__assignor-__leader", 1, {"cleanup.policy": "compact"}),
    ]


def prefixed_topics(bootstrap: str, prefix: str, replication: int = 1) -> KafkaSettings:
    """Settings whose topics are `<prefix>.memory.*`: one run's own topics beside everyone else's."""
    return replace(
        KafkaSettings(kafka_bootstrap=bootstrap, topic_replication=replication),
        topic_signals=f"{prefix}.memory.signals",
        topic_dlq=f"{prefix}.memory.signals.dlq",
        topic_changelog=f"{prefix}.memory.changelog",
        topic_changes=f"{prefix}.memory.changes",
    )


def isolated_env(kafka: KafkaSettings, prefix: str) -> dict[str, str]:
    """MEMWRIGHT_* variables pointing services at `kafka`'s topics, with a sweeper app id and an
    indexer consumer group named after `prefix`, so parallel runs never share a consumer group."""
    return {
        "MEMWRIGHT_KAFKA_BOOTSTRAP": kafka.kafka_bootstrap,
        "MEMWRIGHT_TOPIC_SIGNALS": kafka.topic_signals,
        "MEMWRIGHT_TOPIC_DLQ": kafka.topic_dlq,
        "MEMWRIGHT_TOPIC_CHANGELOG": kafka.topic_changelog,
        "MEMWRIGHT_TOPIC_CHANGES": kafka.topic_changes,
        "MEMWRIGHT_SWEEPER_APP_ID": f"{prefix}-sweeper",
        "MEMWRIGHT_INDEXER_GROUP": f"{prefix}-indexer",
    }


TOPIC_ALREADY_EXISTS = 36
INVALID_REPLICATION_FACTOR = 38


async def ensure_topics(
    settings: KafkaSettings, sweeper_app_id: str = "memwright-sweeper", attempts: int = 5
) -> list[str]:
    """Create missing topics (settings.topic_replication copies) and wait until the broker lists
    them; return the names created.

    Existing topics are left as they are. aiokafka reports per-topic errors in the response
    instead of raising, so each one is checked and retried.
    """
    replication = settings.topic_replication
    admin = AIOKafkaAdminClient(bootstrap_servers=settings.kafka_bootstrap, request_timeout_ms=15000)
    await admin.start()
    created: list[str] = []
    try:
        wanted = topic_specs(settings, sweeper_app_id)
        for attempt in range(attempts):
            existing = set(await admin.list_topics())
            missing = [spec for spec in wanted if spec.name not in existing]
            if not missing:
                return created
            errors = []
            for spec in missing:
                try:
                    response = await admin.create_topics(
                        [NewTopic(spec.name, spec.partitions, replication, topic_configs=spec.config)]
                    )
                except TopicAlreadyExistsError:
                    continue
                for name, code, message in (e[:3] for e in response.topic_errors):
                    if code == 0:
                        created.append(name)
                    elif code == INVALID_REPLICATION_FACTOR:
                        raise RuntimeError(
                            f"cannot create {name} with {replication} replicas: the cluster has fewer brokers "
                            f"({message}); set MEMWRIGHT_TOPIC_REPLICATION (Helm: kafka.replication) to at most "
                            "the number of brokers"
                        )
                    elif code != TOPIC_ALREADY_EXISTS:
                        errors.append(f"{name}: error {code} {message or ''}".strip())
            await asyncio.sleep(0.2 * (attempt + 1))  # let the metadata catch up before listing again
        raise RuntimeError(f"could not create Kafka topics after {attempts} attempts: {'; '.join(errors)}")
    finally:
        await admin.close()
