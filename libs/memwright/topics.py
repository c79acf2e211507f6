"""The Kafka topics memwright owns, with explicit partition counts and configs."""

from __future__ import annotations

from dataclasses import dataclass, field

from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from aiokafka.errors import TopicAlreadyExistsError

from memwright.settings import KafkaSettings

WEEK_MS = 7 * 24 * 3600 * 1000


@dataclass(frozen=True)
class TopicSpec:
    name: str
    partitions: int
    config: dict[str, str] = field(default_factory=dict)


def topic_specs(settings: KafkaSettings, sweeper_app_id: str = "memwright-sweeper") -> list[TopicSpec]:
    return [
        # key = user_id, so one user's signals stay ordered on one partition
        TopicSpec(settings.topic_signals, 6, {"retention.ms": str(WEEK_MS), "min.insync.replicas": "1"}),
        TopicSpec(settings.topic_dlq, 3, {"retention.ms": str(4 * WEEK_MS)}),
        # key = memory_id; compacted: the latest event per memory is all the indexer needs
        TopicSpec(settings.topic_changelog, 6, {"cleanup.policy": "compact", "min.compaction.lag.ms": "60000"}),
        # faust's partition assignor topic for the sweeper app
        TopicSpec(f"{sweeper_app_id}-__assignor-__leader", 1, {"cleanup.policy": "compact"}),
    ]


async def ensure_topics(
    settings: KafkaSettings, replication: int = 1, sweeper_app_id: str = "memwright-sweeper"
) -> list[str]:
    """Create missing topics; return the names created. Existing topics are left as they are."""
    admin = AIOKafkaAdminClient(bootstrap_servers=settings.kafka_bootstrap, request_timeout_ms=15000)
    await admin.start()
    created = []
    try:
        existing = set(await admin.list_topics())
        for spec in topic_specs(settings, sweeper_app_id):
            if spec.name in existing:
                continue
            try:
                await admin.create_topics(
                    [NewTopic(spec.name, spec.partitions, replication, topic_configs=spec.config)]
                )
                created.append(spec.name)
            except TopicAlreadyExistsError:
                pass
    finally:
        await admin.close()
    return created
