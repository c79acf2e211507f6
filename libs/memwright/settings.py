"""Typed settings, read only from MEMWRIGHT_* environment variables.

Each service has one settings class; every class is built by `from_env`, which
validates all values at start and names the variable that is wrong.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from typing import Any, get_type_hints

PREFIX = "MEMWRIGHT_"


class SettingsError(ValueError):
    """A setting is missing or malformed; the message says which and how to fix it."""


def _required() -> Any:
    return field(default=None, metadata={"required": True})


def _secret() -> Any:
    return field(default=None, repr=False, metadata={"required": True})


def _convert(name: str, raw: str, typ: Any) -> Any:
    try:
        if typ is bool:
            if raw.lower() in {"1", "true", "yes", "on"}:
                return True
            if raw.lower() in {"0", "false", "no", "off"}:
                return False
            raise ValueError("expected true or false")
        if typ is int:
            return int(raw)
        if typ is float:
            return float(raw)
        return raw
    except ValueError as exc:
        raise SettingsError(f"{PREFIX}{name.upper()}={raw!r} is not valid: {exc}") from None


@dataclass(frozen=True)
class BaseSettings:
    """Fields every service shares."""

    log_level: str = "info"
    log_json: bool = True
    ops_host: str = "127.0.0.1"
    ops_port: int = 9180

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> Any:
        env = os.environ if environ is None else environ
        hints = get_type_hints(cls)
        values: dict[str, Any] = {}
        for f in fields(cls):
            var = PREFIX + f.name.upper()
            if var in env and env[var] != "":
                values[f.name] = _convert(f.name, env[var], hints[f.name])
            elif f.metadata.get("required"):
                raise SettingsError(f"{var} is not set; export it (see README, 'Configuration') or run `make demo`")
        settings = cls(**values)
        settings.validate()
        return settings

    def validate(self) -> None:
        if not 0 < self.ops_port < 65536:
            raise SettingsError(f"{PREFIX}OPS_PORT={self.ops_port} must be a TCP port")


@dataclass(frozen=True)
class KafkaSettings(BaseSettings):
    kafka_bootstrap: str = _required()
    topic_signals: str = "memory.signals"
    topic_dlq: str = "memory.signals.dlq"
    topic_changelog: str = "memory.changelog"
    topic_changes: str = "memory.changes"  # the public stream of memory changes (changes.py), key = user id
    # copies of each partition when `memwright topics` creates the topics: 3 on a production cluster,
    # so an acknowledged signal survives a broker; 1 only on a single-broker development stack
    topic_replication: int = 1

    def validate(self) -> None:
        super().validate()
        if not 1 <= self.topic_replication <= 7:
            raise SettingsError(f"{PREFIX}TOPIC_REPLICATION={self.topic_replication} must be between 1 and 7")


@dataclass(frozen=True)
class AuthSettings(BaseSettings):
    """JWT verification for the public HTTP endpoints (ingest, api).

    HS256 with a shared secret (jwt_secret), RS256 with public keys from a JWKS file
    (jwt_jwks_file), or both; at least one. Minting (`memwright token`) signs with
    jwt_private_key_file (RS256, key id jwt_kid) when it is set, else with the secret.
    """

    jwt_secret: str = field(default="", repr=False)
    jwt_jwks_file: str = ""
    jwt_private_key_file: str = ""
    jwt_kid: str = ""
    jwt_issuer: str = "memwright"
    jwt_audience: str = "memwright"
    http_host: str = "127.0.0.1"
    http_port: int = 8080
    jwt_max_ttl_s: int = 86_400  # tokens living longer (exp - iat, or exp - now) are refused, and not minted
    body_read_timeout_s: float = 10.0  # a request body not read in full within this is answered 408

    def validate(self) -> None:
        super().validate()
        if self.jwt_max_ttl_s < 1:
            raise SettingsError(f"{PREFIX}JWT_MAX_TTL_S must be at least 1 (seconds)")
        if not 0 < self.body_read_timeout_s <= 600:
            raise SettingsError(f"{PREFIX}BODY_READ_TIMEOUT_S must be more than 0 and at most 600 (seconds)")
        if not self.jwt_secret and not self.jwt_jwks_file:
            raise SettingsError(
                f"{PREFIX}JWT_SECRET is not set (nor {PREFIX}JWT_JWKS_FILE); export a secret of at least "
                "32 characters (`openssl rand -hex 32`) or the path of a JWKS file of RS256 public keys"
            )
        if self.jwt_secret and len(self.jwt_secret) < 32:
            raise SettingsError(
                f"{PREFIX}JWT_SECRET must be at least 32 characters; generate one with `openssl rand -hex 32`"
            )
        if self.jwt_jwks_file and not os.path.isfile(self.jwt_jwks_file):
            raise SettingsError(f"{PREFIX}JWT_JWKS_FILE={self.jwt_jwks_file!r} is not a readable file")


@dataclass(frozen=True)
class IngestSettings(KafkaSettings, AuthSettings):
    ops_port: int = 9181
    http_port: int = 8081
    max_batch: int = 500
    max_body_bytes: int = 1_048_576
    produce_timeout_s: float = 5.0
    # 0: each signal goes out at once (lowest latency); a few ms trade latency for fewer, fuller
    # Kafka requests and a higher ceiling (docs/benchmarks.md)
    producer_linger_ms: int = 0
    # per user (the signals' user_id) and per ingest process, in fixed windows: beyond, 429 + Retry-After
    ingest_quota_window_s: float = 60.0
    ingest_quota_signals: int = 3000  # signals per user per window
    ingest_quota_bytes: int = 4_194_304  # UTF-8 bytes of signal text per user per window

    def validate(self) -> None:
        super().validate()
        if not 0 <= self.producer_linger_ms <= 1000:
            raise SettingsError(f"{PREFIX}PRODUCER_LINGER_MS={self.producer_linger_ms} must be between 0 and 1000")
        if not 1 <= self.ingest_quota_window_s <= 86_400:
            raise SettingsError(f"{PREFIX}INGEST_QUOTA_WINDOW_S must be between 1 and 86400 (seconds)")
        if self.ingest_quota_signals < 1 or self.ingest_quota_bytes < 1:
            raise SettingsError(f"{PREFIX}INGEST_QUOTA_SIGNALS and {PREFIX}INGEST_QUOTA_BYTES must be at least 1")


@dataclass(frozen=True)
class PostgresSettings(BaseSettings):
    pg_dsn: str = field(default=None, repr=False, metadata={"required": True})  # type: ignore[assignment]
    pg_pool_min: int = 1
    pg_pool_max: int = 10


@dataclass(frozen=True)
class SweeperSettings(KafkaSettings, PostgresSettings):
    ops_port: int = 9183
    window_seconds: float = 60.0
    sweeper_app_id: str = "memwright-sweeper"
    sweeper_data_dir: str = ".local/sweeper"
    # a sweeper that dies without leaving the group keeps its partitions this long: the longest
    # pause a crash causes (Kafka's brokers accept 6 to 1800 s by default)
    sweeper_session_timeout_seconds: float = 10.0

    def validate(self) -> None:
        super().validate()
        if not 1.0 <= self.window_seconds <= 3600:
            raise SettingsError(f"{PREFIX}WINDOW_SECONDS must be between 1 and 3600")
        if not 6.0 <= self.sweeper_session_timeout_seconds <= 300:
            raise SettingsError(f"{PREFIX}SWEEPER_SESSION_TIMEOUT_SECONDS must be between 6 and 300")


@dataclass(frozen=True)
class CuratorSettings(PostgresSettings):
    ops_port: int = 9184
    curator_id: str = ""
    lease_seconds: float = 120.0
    poll_seconds: float = 1.0
    concurrency: int = 4
    memory_budget: int = 40
    policy: str = "rules"  # rules | llm
    llm_base_url: str = ""
    llm_api_key: str = field(default="", repr=False)
    llm_model: str = "gpt-4o-mini"
    llm_timeout_s: float = 30.0  # per chat completion
    llm_max_retries: int = 2  # by the openai client, on timeouts, 429 and 5xx
    llm_max_steps: int = 16  # model calls per run (the tool-call loop is bounded)
    # the local classifier skips the model for a window of one-offs only, with no hypothesis to revisit
    llm_skip_one_offs: bool = True
    # the rules policy's slot reader for the user's other facts (job, phone, ...; home is read always)
    rules_slots: bool = False
    # pooled connections for snapshots, commits and stats, whatever the concurrency: a run holds
    # none while its model thinks; the run locks live on one more, the liveness connection
    pg_pool_max: int = 4

    def validate(self) -> None:
        super().validate()
        if self.pg_pool_max < 1:
            raise SettingsError(f"{PREFIX}PG_POOL_MAX must be at least 1 (pooled connections of the curator)")
        if self.policy not in {"rules", "llm"}:
            raise SettingsError(f"{PREFIX}POLICY must be 'rules' or 'llm', not {self.policy!r}")
        if self.policy == "llm" and not self.llm_base_url:
            raise SettingsError(f"{PREFIX}LLM_BASE_URL is not set; it is required with POLICY=llm")
        if self.concurrency < 1:
            raise SettingsError(f"{PREFIX}CONCURRENCY must be at least 1")


@dataclass(frozen=True)
class EmbedderSettings(BaseSettings):
    """The one embedder of the system (memwright.embeddings), for whichever service needs vectors."""

    embedder: str = "hashing"  # hashing | openai | local (all-MiniLM-L6-v2 on onnxruntime, installed by make install)
    embed_base_url: str = ""
    embed_model: str = "text-embedding-3-small"
    embed_api_key: str = field(default="", repr=False)
    embed_threads: int = 1  # local: onnxruntime threads per process (1 is fastest on shared cores); 0: one per core

    def validate(self) -> None:
        super().validate()
        if self.embedder not in {"hashing", "openai", "local"}:
            raise SettingsError(f"{PREFIX}EMBEDDER={self.embedder!r}: choose 'hashing', 'openai' or 'local'")
        if self.embedder == "openai" and not self.embed_base_url:
            raise SettingsError(f"{PREFIX}EMBED_BASE_URL is not set; it is required with {PREFIX}EMBEDDER=openai")
        if self.embed_threads < 0:
            raise SettingsError(f"{PREFIX}EMBED_THREADS must be 0 (one per core) or more")


@dataclass(frozen=True)
class QdrantSettings(EmbedderSettings):
    qdrant_url: str = ""  # empty: the embedded Qdrant Edge store at qdrant_path
    qdrant_api_key: str = field(default="", repr=False)
    qdrant_path: str = ".local/qdrant"
    qdrant_collection: str = "memories"


@dataclass(frozen=True)
class IndexerSettings(KafkaSettings, PostgresSettings, QdrantSettings):
    ops_port: int = 9185
    relay_batch: int = 200
    relay_poll_seconds: float = 0.5
    indexer_group: str = "memwright-indexer"
    drift_check_seconds: float = 600.0  # 0 turns the periodic drift check off
    drift_settle_seconds: float = 2.0
    drain_seconds: float = 5.0  # on SIGTERM, keep applying what was already relayed for up to this long

    def validate(self) -> None:
        super().validate()
        if self.drift_check_seconds < 0 or self.drift_settle_seconds < 0 or self.drain_seconds < 0:
            raise SettingsError(
                f"{PREFIX}DRIFT_CHECK_SECONDS, {PREFIX}DRIFT_SETTLE_SECONDS and {PREFIX}DRAIN_SECONDS "
                "must not be negative"
            )


@dataclass(frozen=True)
class ApiSettings(PostgresSettings, AuthSettings):
    ops_port: int = 9182
    http_port: int = 8082
    max_body_bytes: int = 16_384  # larger request bodies are refused with 413
    max_memory_chars: int = 500  # a user-written memory's text, like the agent's (agent/tools.py)
    user_memory_limit: int = 100  # user-written memories per user; beyond it POST answers 409
    rate_limit_per_s: float = 20.0  # requests per second per token (token bucket, per api process)
    rate_limit_burst: int = 40  # requests a token may send at once before the rate applies
    # a service token: the per-user rate above for each (service, user) pair, and this for the service in all
    service_rate_limit_per_s: float = 5000.0
    service_rate_limit_burst: int = 10_000
    context_cache_users: int = 2048  # rendered context blocks kept per api process (LRU, one per user); 0: none
    memory_budget: int = 40  # the curator's MEMWRIGHT_MEMORY_BUDGET, for the console's "budget used"
    grafana_url: str = ""  # the console's operator page links the dashboards under this Grafana

    def validate(self) -> None:
        super().validate()
        if not 1024 <= self.max_body_bytes <= 10_485_760:
            raise SettingsError(f"{PREFIX}MAX_BODY_BYTES must be between 1024 and 10485760")
        if not 1 <= self.max_memory_chars <= 2000:
            raise SettingsError(f"{PREFIX}MAX_MEMORY_CHARS must be between 1 and 2000 (the database's limit)")
        if self.user_memory_limit < 1:
            raise SettingsError(f"{PREFIX}USER_MEMORY_LIMIT must be at least 1")
        if self.rate_limit_per_s <= 0 or self.rate_limit_burst < 1:
            raise SettingsError(f"{PREFIX}RATE_LIMIT_PER_S must be > 0 and {PREFIX}RATE_LIMIT_BURST at least 1")
        if self.service_rate_limit_per_s <= 0 or self.service_rate_limit_burst < 1:
            raise SettingsError(
                f"{PREFIX}SERVICE_RATE_LIMIT_PER_S must be > 0 and {PREFIX}SERVICE_RATE_LIMIT_BURST at least 1"
            )
        if self.context_cache_users < 0:
            raise SettingsError(f"{PREFIX}CONTEXT_CACHE_USERS must be 0 (no cache) or more")


@dataclass(frozen=True)
class McpSettings(ApiSettings):
    """The MCP server (`memwright mcp`): the api's reads and the user's writes as MCP tools and
    resources, for the user the bearer token names. Over HTTP each request carries its token; over
    stdio the token is MEMWRIGHT_TOKEN, verified at start and again before every call."""

    ops_port: int = 9186
    http_port: int = 8083
    token: str = field(default="", repr=False)  # stdio only: the user's JWT (mint: memwright token <user> ...)
