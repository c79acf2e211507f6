"""`memwright eval`: run a labelled dataset through the real pipeline and score it from PostgreSQL.

For every conversation round (the first conversation of every user, then the second, ...)
each message is posted to ingest with a minted service token; the sweeper closes its short
window, the curator runs each user's memory agent, and the round is over when every message
is swept and no user waits for its agent. Users with a `budget` get `agents.memory_budget`
set before any of their signals is swept. The eval uses a fresh database (default
`memwright_eval`, kept afterwards for inspection) and Kafka topics of its own (deleted
afterwards), so it never mixes with the demo or the tests.

The last line of output is one JSON object: users, expected, memories, precision, recall,
false_memory_rate, update_accuracy, evidence_accuracy, max_memories_per_user,
budget_violations (and the policy). `--offline` runs the same dataset through the same
tool layer in-process, without services, for quick iteration; it is labelled as such.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import secrets
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

import aiohttp
import asyncpg

from memwright.auth import mint
from memwright.eval.dataset import DatasetError, UserCase, default_dataset_path, load
from memwright.eval.scoring import Observed, ObservedMemory, missed_targets, score
from memwright.localrun import ServiceProcesses
from memwright.settings import AuthSettings
from memwright.store.db import create_pool
from memwright.store.migrate import create_database
from memwright.topics import ensure_topics, isolated_env, prefixed_topics

SERVICES = ("ingest", "sweeper", "curator")
POST_CONCURRENCY = 16


def _say(line: str) -> None:
    print(line, flush=True)


# ---- the database ------------------------------------------------------------------------


SET_BUDGET = """
INSERT INTO agents (user_id, memory_budget) VALUES ($1, $2)
ON CONFLICT (user_id) DO UPDATE SET memory_budget = EXCLUDED.memory_budget
"""

PROGRESS = """
SELECT (SELECT count(*) FROM messages) AS swept,
       (SELECT count(*) FROM backlog) AS waiting,
       (SELECT count(*) FROM curation_runs WHERE status = 'committed') AS committed,
       (SELECT count(*) FROM curation_runs WHERE status <> 'committed' AND status <> 'running') AS failed
"""

MEMORIES = """
SELECT m.user_id, m.author, m.text,
       coalesce(array_agg(e.message_id) FILTER (WHERE e.message_id IS NOT NULL), '{}') AS evidence
FROM memories m LEFT JOIN memory_evidence e ON e.memory_id = m.memory_id
GROUP BY m.memory_id
"""

# Evidence accuracy is judged on what the database holds, not on what the dataset says.
MESSAGES = "SELECT user_id, message_id FROM messages"
BUDGETS = "SELECT user_id, coalesce(memory_budget, 40) AS memory_budget FROM agents"  # NULL: the default


async def read_observed(pool: asyncpg.Pool) -> Observed:
    observed = Observed()
    for r in await pool.fetch(MEMORIES):
        observed.memories.setdefault(r["user_id"], []).append(
            ObservedMemory(r["text"], list(r["evidence"]), r["author"])
        )
    messages: dict[str, set[str]] = defaultdict(set)
    for r in await pool.fetch(MESSAGES):
        messages[r["user_id"]].add(r["message_id"])
    observed.messages = dict(messages)
    observed.budgets = {r["user_id"]: r["memory_budget"] for r in await pool.fetch(BUDGETS)}
    return observed


# ---- posting and waiting -----------------------------------------------------------------


def _signal(case: UserCase, conversation_id: str, message: Any) -> dict[str, Any]:
    signal = {
        "schema_version": 1,
        "user_id": case.user_id,
        "conversation_id": conversation_id,
        "message_id": message.message_id,
        "text": message.text,
        "role": message.role,
    }
    if message.sent_at:
        signal["sent_at"] = message.sent_at
    return signal


async def post_round(http: aiohttp.ClientSession, url: str, token: str, cases: list[UserCase], index: int) -> int:
    """Post conversation `index` of every user, one message per request, in order per user."""
    gate = asyncio.Semaphore(POST_CONCURRENCY)
    headers = {"Authorization": f"Bearer {token}"}

    async def post_user(case: UserCase) -> int:
        conversation = case.conversations[index]
        async with gate:
            for message in conversation.messages:
                signal = _signal(case, conversation.conversation_id, message)
                for attempt in range(5):
                    async with http.post(url + "/v1/signals", json=signal, headers=headers) as r:
                        if r.status == 202:
                            break
                        body = await r.text()
                        if r.status != 503 or attempt == 4:
                            raise RuntimeError(f"ingest answered {r.status} for {case.user_id}: {body}")
                    await asyncio.sleep(1.0)  # Kafka not ready yet: ingest says retry
        return len(conversation.messages)

    counts = await asyncio.gather(*(post_user(c) for c in cases if index < len(c.conversations)))
    return sum(counts)


async def wait_settled(pool: asyncpg.Pool, posted: int, timeout: float, log_dir: Path) -> None:
    """Until every posted message is swept and no user waits for its agent."""
    started = time.monotonic()
    last = None
    while True:
        row = await pool.fetchrow(PROGRESS)
        assert row is not None
        state = (row["swept"], row["waiting"], row["committed"], row["failed"])
        if state != last:
            _say(
                f"  [{time.monotonic() - started:5.1f}s] swept {row['swept']}/{posted}, "
                f"{row['waiting']} user(s) waiting, {row['committed']} runs committed, {row['failed']} failed"
            )
            last = state
        if row["swept"] >= posted and row["waiting"] == 0:
            return
        if time.monotonic() - started > timeout:
            raise TimeoutError(
                f"the pipeline did not settle within {timeout:.0f}s ({row['swept']}/{posted} swept, "
                f"{row['waiting']} users waiting, {row['failed']} failed runs); see the logs in {log_dir}"
            )
        await asyncio.sleep(0.3)


async def _delete_topics(bootstrap: str, names: list[str]) -> None:
    from aiokafka.admin import AIOKafkaAdminClient

    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=15000)
    await admin.start()
    try:
        existing = set(await admin.list_topics())
        doomed = [n for n in names if n in existing]
        if doomed:
            await admin.delete_topics(doomed)
    finally:
        await admin.close()


# ---- the pipeline eval -------------------------------------------------------------------


async def run_pipeline(
    cases: list[UserCase],
    *,
    admin_dsn: str,
    kafka_bootstrap: str,
    policy: str = "rules",
    window_seconds: float = 1.0,
    database: str = "memwright_eval",
    work_dir: Path | None = None,
    round_timeout: float = 300.0,
    extra_env: dict[str, str] | None = None,
) -> Observed:
    """Drive the real services over `cases`; return what PostgreSQL holds afterwards."""
    work = work_dir or Path(tempfile.mkdtemp(prefix="memwright-eval-"))
    run = secrets.token_hex(4)
    prefix = f"eval{run}"
    kafka = prefixed_topics(kafka_bootstrap, prefix)
    _say(f"preparing database '{database}' and Kafka topics {prefix}.*")
    dsn = await create_database(admin_dsn, database, replace=True)
    await ensure_topics(kafka, sweeper_app_id=f"{prefix}-sweeper")
    secret = secrets.token_hex(32)
    env = {
        "MEMWRIGHT_PG_DSN": dsn,
        **isolated_env(kafka, prefix),
        "MEMWRIGHT_SWEEPER_DATA_DIR": str(work / "sweeper"),
        "MEMWRIGHT_JWT_SECRET": secret,
        "MEMWRIGHT_WINDOW_SECONDS": str(window_seconds),
        "MEMWRIGHT_POLL_SECONDS": "0.2",
        "MEMWRIGHT_CONCURRENCY": "8",
        "MEMWRIGHT_POLICY": policy,
        **(extra_env or {}),
    }
    procs = ServiceProcesses(env, work / "logs")
    pool = await create_pool(dsn, 1, 4)
    try:
        # invariant 5 is exercised on purpose: small budgets are in place before any sweep
        await pool.executemany(SET_BUDGET, [(c.user_id, c.budget) for c in cases if c.budget])
        _say(f"starting {', '.join(SERVICES)} with the {policy} policy (logs in {procs.log_dir})")
        procs.start(*SERVICES)
        await procs.wait_ready(*SERVICES, timeout=90)
        token = mint(AuthSettings(jwt_secret=secret), "service:eval", ["signals:write"])
        posted = 0
        rounds = max(len(c.conversations) for c in cases)
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=30)) as http:
            for index in range(rounds):
                n = await post_round(http, procs.url("ingest"), token, cases, index)
                posted += n
                _say(f"round {index + 1}/{rounds}: posted {n} messages; sweep window {window_seconds:g}s")
                await wait_settled(pool, posted, round_timeout, procs.log_dir)
        return await read_observed(pool)
    finally:
        await pool.close()
        codes = procs.stop()
        _say(f"services stopped: {', '.join(f'{k}={v}' for k, v in codes.items())}")
        try:
            await _delete_topics(kafka_bootstrap, [kafka.topic_signals, kafka.topic_dlq, kafka.topic_changelog])
        except Exception as exc:  # the topics are this run's own; leaving them is harmless
            _say(f"could not delete the eval topics: {exc}")


# ---- the command -------------------------------------------------------------------------


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="memwright eval",
        description="Measure memory quality: run a labelled dataset through the pipeline, score by receipts.",
    )
    p.add_argument("--dataset", type=Path, default=None, help="JSON Lines dataset (default: the shipped one)")
    p.add_argument(
        "--policy",
        choices=("rules", "llm"),
        default=None,
        help="memory agent policy (default: llm when MEMWRIGHT_LLM_BASE_URL is set, else rules)",
    )
    p.add_argument("--window", type=float, default=1.0, help="sweep window in seconds (default 1)")
    p.add_argument("--users", type=int, default=0, help="only the first N users of the dataset")
    p.add_argument("--database", default="memwright_eval", help="database to (re)create (default memwright_eval)")
    p.add_argument("--timeout", type=float, default=300.0, help="seconds each round may take to settle")
    p.add_argument("--check", action="store_true", help="exit 1 when a target of issue 3 is missed")
    p.add_argument(
        "--offline", action="store_true", help="no services: run the tool layer and policy in-process (quick)"
    )
    return p


async def _observe(args: argparse.Namespace, cases: list[UserCase], policy: str) -> Observed:
    if args.offline:
        from memwright.eval.offline import run_offline

        return await run_offline(_policy_object(policy), cases)
    return await run_pipeline(
        cases,
        admin_dsn=os.environ["MEMWRIGHT_PG_DSN"],
        kafka_bootstrap=os.environ["MEMWRIGHT_KAFKA_BOOTSTRAP"],
        policy=policy,
        window_seconds=args.window,
        database=args.database,
        round_timeout=args.timeout,
    )


def _policy_object(policy: str) -> Any:
    if policy == "llm":
        from memwright.agent.llm import LlmPolicy
        from memwright.settings import CuratorSettings

        return LlmPolicy(CuratorSettings.from_env({**os.environ, "MEMWRIGHT_POLICY": "llm", "MEMWRIGHT_PG_DSN": "-"}))
    from memwright.agent.rules import RulesPolicy

    return RulesPolicy()


def main(argv: list[str]) -> int:
    args = parser().parse_args(argv)
    policy = args.policy or ("llm" if os.environ.get("MEMWRIGHT_LLM_BASE_URL") else "rules")
    if policy == "llm" and not os.environ.get("MEMWRIGHT_LLM_BASE_URL"):
        print("memwright eval: --policy llm needs MEMWRIGHT_LLM_BASE_URL (and MEMWRIGHT_LLM_MODEL)", file=sys.stderr)
        return 2
    if not args.offline:
        for name in ("MEMWRIGHT_PG_DSN", "MEMWRIGHT_KAFKA_BOOTSTRAP"):
            if not os.environ.get(name):
                print(
                    f'memwright eval: {name} is not set; run `make eval`, or eval "$(deploy/local/stack.sh env)" '
                    "after deploy/local/stack.sh start (or use --offline)",
                    file=sys.stderr,
                )
                return 2
    path = args.dataset or default_dataset_path()
    try:
        cases = load(path)
    except (OSError, DatasetError) as exc:
        print(f"memwright eval: {exc}", file=sys.stderr)
        return 2
    if args.users > 0:
        cases = cases[: args.users]
    mode = "in-process (offline)" if args.offline else "through ingest, sweeper and curator"
    _say(f"== memwright eval: {len(cases)} users from {path}, {policy} policy, {mode} ==")
    started = time.monotonic()
    observed = asyncio.run(_observe(args, cases, policy))
    metrics, findings = score(cases, observed)
    if findings:
        _say(f"\n{len(findings)} finding(s):")
        for finding in findings:
            _say(f"  - {finding}")
    missed = missed_targets(metrics)
    _say(
        f"\ntook {time.monotonic() - started:.0f}s; "
        + ("targets met" if not missed else "missed: " + "; ".join(missed))
    )
    print(json.dumps({**metrics, "policy": policy}), flush=True)
    return 1 if args.check and missed else 0
