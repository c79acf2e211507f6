"""Every Prometheus metric of memwright, in one place.

Names follow the Prometheus conventions: memwright_<service>_<what>_<unit>. No
user id is ever a label (unbounded cardinality, and it would leak who is active).
"""

from __future__ import annotations

from prometheus_client import Counter, Gauge, Histogram

FAST_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0)
SLOW_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0)

# Kafka clients, in every service that has them (memwright.kafka)
KAFKA_CONNECT_FAILURES = Counter(
    "memwright_kafka_connect_failures_total",
    "Failed connection attempts to a Kafka broker (each followed by a backoff)",
)
KAFKA_PRODUCER_REPLACEMENTS = Counter(
    "memwright_kafka_producer_replacements_total",
    "Producers replaced after a fatal error (out-of-order sequence, fenced, dead sender), by producer",
    ["producer"],
)

# ingest
INGEST_REQUESTS = Counter("memwright_ingest_requests_total", "HTTP requests to ingest by status code", ["code"])
INGEST_LATENCY = Histogram("memwright_ingest_request_duration_seconds", "Ingest request latency", buckets=FAST_BUCKETS)
INGEST_SIGNALS = Counter("memwright_ingest_signals_accepted_total", "Signals acknowledged by Kafka and answered 202")
INGEST_REJECTIONS = Counter("memwright_ingest_rejections_total", "Signals or requests rejected, by reason", ["reason"])
INGEST_PRODUCE_ERRORS = Counter("memwright_ingest_kafka_produce_errors_total", "Kafka produce failures and timeouts")

# sweeper
SWEEPER_WINDOWS = Counter("memwright_sweeper_windows_closed_total", "Per-user windows closed and written")
SWEEPER_SIGNALS = Counter(
    "memwright_sweeper_signals_swept_total", "Signals written to the evidence store (new rows only)"
)
SWEEPER_DUPLICATES = Counter("memwright_sweeper_signals_duplicate_total", "Signals already in the evidence store")
SWEEPER_DLQ = Counter(
    "memwright_sweeper_dlq_records_total", "Records sent to the dead-letter topic, by reason", ["reason"]
)
SWEEPER_OPEN_WINDOWS = Gauge("memwright_sweeper_open_windows", "Per-user windows currently open")
SWEEPER_OLDEST_UNWRITTEN = Gauge(
    "memwright_sweeper_oldest_unwritten_window_seconds",
    "Seconds since the oldest closed window that is still not written closed (0: none waits)",
)
SWEEPER_WRITE_FAILURES = Counter(
    "memwright_sweeper_window_write_failures_total",
    "Failed window writes by kind (unavailable: retried; content, other: split and dead-lettered)",
    ["kind"],
)
SWEEPER_DLQ_SEND_FAILURES = Counter(
    "memwright_sweeper_dlq_send_failures_total",
    "Dead-letter sends Kafka refused or did not acknowledge (retried; the record's partition waits meanwhile)",
)
SWEEPER_FLUSH_SECONDS = Histogram(
    "memwright_sweeper_flush_duration_seconds", "Window write transaction duration", buckets=FAST_BUCKETS
)

# curator
CURATOR_BACKLOG_USERS = Gauge("memwright_curator_backlog_users", "Users with signals waiting for their memory agent")
CURATOR_OLDEST_WAIT = Gauge("memwright_curator_oldest_waiting_seconds", "Age of the oldest waiting signal")
CURATOR_CLAIMS = Counter("memwright_curator_claims_total", "Users claimed for a run")
CURATOR_RUNS = Counter("memwright_curator_runs_total", "Agent runs by outcome", ["outcome"])
CURATOR_RUN_SECONDS = Histogram(
    "memwright_curator_run_duration_seconds", "Agent run duration by outcome", ["outcome"], buckets=SLOW_BUCKETS
)
CURATOR_FENCED = Counter("memwright_curator_fenced_commits_total", "Commits refused because the lease was taken over")
CURATOR_LEASE_CONFLICTS = Counter(
    "memwright_curator_lease_conflicts_total",
    "Claims that took over a lease another run still held, by reason (connection_lost, holder_silent)",
    ["reason"],
)
CURATOR_HEARTBEATS_LOST = Counter(
    "memwright_curator_heartbeats_lost_total", "Runs whose heartbeat found the lease taken over or the connection gone"
)
CURATOR_ABANDONED_RECOVERED = Counter(
    "memwright_curator_abandoned_runs_recovered_total", "Runs still marked running when their user was claimed again"
)
CURATOR_ACTIVE_RUNS = Gauge("memwright_curator_active_runs", "Runs in progress in this curator process")
CURATOR_BUDGET_REFUSALS = Counter(
    "memwright_curator_budget_refusals_total", "create_memory refused because the budget is full"
)
CURATOR_GUARD_REFUSALS = Counter(
    "memwright_curator_guard_refusals_total",
    "Memory texts the tool layer refused: secret, instruction, authority (invariant 11), "
    "deleted (a user-deleted memory written again from old evidence, invariant 12)",
    ["kind"],
)
CURATOR_TOOL_CALLS = Counter(
    "memwright_curator_tool_calls_total", "Memory tool calls by tool and result", ["tool", "result"]
)
CURATOR_LLM_CALLS = Counter("memwright_curator_llm_calls_total", "LLM chat completions by outcome", ["outcome"])
CURATOR_LLM_TOKENS = Counter("memwright_curator_llm_tokens_total", "LLM tokens by kind", ["kind"])
CURATOR_LLM_WINDOWS_SKIPPED = Counter(
    "memwright_curator_llm_windows_skipped_total",
    "Windows the llm policy did not send to the model: the local classifier found only one-offs and no "
    "hypothesis to revisit (MEMWRIGHT_LLM_SKIP_ONE_OFFS)",
)
CURATOR_MEMORIES = Gauge(
    "memwright_curator_memories", "Memories in PostgreSQL by author (user, agent), all users together", ["author"]
)

# indexer
INDEXER_OUTBOX_DEPTH = Gauge("memwright_indexer_outbox_depth", "Outbox rows not yet relayed to Kafka")
INDEXER_OUTBOX_AGE = Gauge("memwright_indexer_outbox_oldest_age_seconds", "Age of the oldest outbox row")
INDEXER_RELAYED = Counter("memwright_indexer_outbox_relayed_total", "Outbox rows produced to the changelog")
INDEXER_EVENTS = Counter("memwright_indexer_events_applied_total", "Changelog events applied, by action", ["action"])
INDEXER_LAG = Gauge("memwright_indexer_consumer_lag", "Changelog records not yet consumed")
INDEXER_UPSERTS = Counter("memwright_indexer_upserts_total", "Points written to Qdrant (changelog, repairs, rebuilds)")
INDEXER_DELETES = Counter("memwright_indexer_deletes_total", "Points deleted from Qdrant because their memory is gone")
INDEXER_EMBEDDINGS = Counter("memwright_indexer_embeddings_total", "Texts embedded (embedding cache misses)")
INDEXER_DRIFT = Gauge(
    "memwright_indexer_drift_points", "Points that differ from PostgreSQL at the last check, by kind", ["kind"]
)
INDEXER_DRIFT_CHECKED = Gauge(
    "memwright_indexer_drift_check_timestamp_seconds", "Unix time the last drift check finished"
)

# api
API_REQUESTS = Counter(
    "memwright_api_requests_total", "HTTP requests to the api by route and status code", ["route", "code"]
)
API_LATENCY = Histogram(
    "memwright_api_request_duration_seconds", "Api request latency by route", ["route"], buckets=FAST_BUCKETS
)
API_CONTEXT_READS = Counter(
    "memwright_api_context_reads_total",
    "Context reads by how they were answered: not_modified (304 from the version check), hit (cached block), "
    "miss (previews read and the block rendered)",
    ["result"],
)

# mcp (memwright mcp): tool calls and resource reads, and the HTTP transport's answers
MCP_OPERATIONS = (
    "get_context",
    "get_memory",
    "remember",
    "forget",
    "list_hypotheses",
    "message_status",
    "read_previews",
    "read_memory",
)
MCP_CALLS = Counter(
    "memwright_mcp_calls_total",
    "MCP tool calls and resource reads by operation and outcome: ok, refused (the caller was told why: no "
    "token, scope, not found, bad input, a guard), error (a bug or an outage)",
    ["operation", "outcome"],
)
MCP_CALL_LATENCY = Histogram(
    "memwright_mcp_call_duration_seconds",
    "MCP tool call and resource read latency",
    ["operation"],
    buckets=FAST_BUCKETS,
)
MCP_HTTP_REQUESTS = Counter(
    "memwright_mcp_http_requests_total",
    "HTTP requests to the MCP server's Streamable HTTP endpoint by status code",
    ["code"],
)

# Every series whose label values are known in advance exists from the start, at 0. A counter
# series born at its first event starts at 1, and rate() or increase() over it shows nothing:
# the alert on failed runs would miss the first failures. (tests/unit/test_metrics_labels.py
# checks that the code only uses these values.)
KNOWN_LABELS: dict[Counter | Histogram, tuple[str, ...]] = {
    # 499: the client hung up mid-body (nothing answered)
    INGEST_REQUESTS: ("202", "400", "401", "403", "408", "413", "429", "499", "500", "503"),
    INGEST_REJECTIONS: ("auth", "too_large", "not_json", "invalid", "forbidden", "timeout", "quota"),
    # write_failed: refused by PostgreSQL at the window write (memwright.sweeping)
    SWEEPER_DLQ: (
        "not_json",
        "no_value",
        "schema_version",
        "key",
        "text",
        "required",
        "too_long",
        "schema",
        "write_failed",
    ),
    SWEEPER_WRITE_FAILURES: ("unavailable", "content", "other"),
    CURATOR_RUNS: ("committed", "failed", "fenced", "abandoned"),
    CURATOR_RUN_SECONDS: ("committed", "failed", "fenced"),
    CURATOR_LEASE_CONFLICTS: ("connection_lost", "holder_silent"),
    CURATOR_LLM_CALLS: ("ok", "timeout", "error"),
    CURATOR_LLM_TOKENS: ("prompt", "completion"),
    CURATOR_GUARD_REFUSALS: ("secret", "instruction", "authority", "deleted"),
    INDEXER_EVENTS: ("upsert", "delete", "unchanged", "absent", "newer", "invalid"),
    API_CONTEXT_READS: ("not_modified", "hit", "miss"),
    MCP_HTTP_REQUESTS: ("200", "202", "400", "401", "403", "404", "405", "406", "413", "429", "500"),
    MCP_CALL_LATENCY: MCP_OPERATIONS,
    KAFKA_PRODUCER_REPLACEMENTS: ("ingest", "relay", "signals"),
}
for _metric, _values in KNOWN_LABELS.items():
    for _value in _values:
        _metric.labels(_value)
for _operation in MCP_OPERATIONS:
    for _outcome in ("ok", "refused", "error"):
        MCP_CALLS.labels(_operation, _outcome)
