"""`memwright eval`: run a labelled dataset through the real pipeline and score it from PostgreSQL.

For every conversation round (the first conversation of every user, then the second, ...)
each message is posted to ingest with a minted service token; the sweeper closes its short
window, the curator runs each user's memory agent, and the round is over when every message
is swept and no user waits for its agent. Users with a `budget` get `agents.memory_budget`
set before any of their signals is swept. The eval uses a fresh database (default
`memwright_eval`, kept afterwards for inspection) and Kafka topics of its own (deleted
afterwards), so it never mixes with the demo or the tests.

Several sets can run at once (`--split shipped --split dev --split test`, `--dataset PATH` for
any other file, both repeatable): one pipeline run over all their users, then each set is scored
on its own, overall and per category (the dataset's `category` field). `--check` exits 1 when a
gated set misses a target; `--gate NAME` limits that to the named sets (default: every set), the
others are reported only -- `make eval` gates the shipped set and reports dev and test.

The last line of output is one JSON object. With one set: users, expected, memories, precision,
recall, false_memory_rate, update_accuracy, evidence_accuracy, max_memories_per_user,
budget_violations, the policy (and `categories`, the same metrics per category, when the set has
categories). With several: {"policy", "sets": {name: that object without the policy}, "gated",
"targets_met": {name: bool}}. `--offline` runs the same datasets through the same tool layer
in-process, without services, for quick iteration; it is labelled as such.
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
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
import asyncpg

from memwright.auth import mint
from memwright.eval.dataset import SPLITS, DatasetError, UserCase, default_dataset_path, load, split_path
from memwright.eval.scoring import Observed, ObservedMemory, by_category, categories, missed_targets, score
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
            await _delete_topics(
                kafka_bootstrap, [kafka.topic_signals, kafka.topic_dlq, kafka.topic_changelog, kafka.topic_changes]
            )
        except Exception as exc:  # the topics are this run's own; leaving them is harmless
            _say(f"could not delete the eval topics: {exc}")


# ---- the command -------------------------------------------------------------------------

# Why dev and test are measured but do not fail `--check` yet (make eval gates the shipped set only).
NOT_ENFORCED = (
    "reported, not enforced: the default policy is being reworked on train and dev (issue 14); "
    "test is the honest figure"
)


@dataclass
class EvalSet:
    name: str
    path: Path
    cases: list[UserCase]


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="memwright eval",
        description="Measure memory quality: run labelled datasets through the pipeline, score by receipts.",
    )
    p.add_argument(
        "--dataset",
        type=Path,
        action="append",
        default=[],
        help="a JSON Lines dataset; repeat for several (default: the shipped set when no --split either)",
    )
    p.add_argument(
        "--split",
        choices=tuple(SPLITS),
        action="append",
        default=[],
        help="a shipped set by name (shipped: the set the rules were tuned on; train, dev, test); repeatable",
    )
    p.add_argument(
        "--policy",
        choices=("rules", "llm"),
        default=None,
        help="memory agent policy (default: llm when MEMWRIGHT_LLM_BASE_URL is set, else rules)",
    )
    p.add_argument("--window", type=float, default=1.0, help="sweep window in seconds (default 1)")
    p.add_argument("--users", type=int, default=0, help="only the first N users of each dataset")
    p.add_argument("--database", default="memwright_eval", help="database to (re)create (default memwright_eval)")
    p.add_argument("--timeout", type=float, default=300.0, help="seconds each round may take to settle")
    p.add_argument(
        "--concurrency",
        type=int,
        default=8,
        help="agent runs the curator does at once (default 8; 1 for a local model)",
    )
    p.add_argument("--check", action="store_true", help="exit 1 when a gated set misses a target of issue 3")
    p.add_argument(
        "--gate",
        action="append",
        default=[],
        metavar="NAME",
        help="with --check, only these sets can fail the run (default: every set); the others are reported",
    )
    p.add_argument("--findings", type=int, default=40, help="findings printed per set (default 40)")
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
        extra_env={"MEMWRIGHT_CONCURRENCY": str(args.concurrency)},
    )


def _policy_object(policy: str) -> Any:
    if policy == "llm":
        from memwright.agent.llm import LlmPolicy
        from memwright.settings import CuratorSettings

        return LlmPolicy(CuratorSettings.from_env({**os.environ, "MEMWRIGHT_POLICY": "llm", "MEMWRIGHT_PG_DSN": "-"}))
    from memwright.agent.rules import RulesPolicy
    from memwright.settings import CuratorSettings

    env = {**os.environ, "MEMWRIGHT_POLICY": "rules", "MEMWRIGHT_PG_DSN": "-"}
    return RulesPolicy(read_slots=CuratorSettings.from_env(env).rules_slots)


def load_sets(splits: list[str], datasets: list[Path], users: int = 0) -> list[EvalSet]:
    """The named shipped sets, then the given files; a user id may appear in one set only."""
    named = [(name, split_path(name)) for name in dict.fromkeys(splits)]
    if not named and not datasets:
        named = [("shipped", default_dataset_path())]
    for path in datasets:
        taken = {name for name, _ in named}
        named.append((path.stem if path.stem not in taken else str(path), path))
    sets: list[EvalSet] = []
    owner: dict[str, str] = {}
    for name, path in named:
        cases = load(path)
        if users > 0:
            cases = cases[:users]
        for case in cases:
            if case.user_id in owner:
                raise DatasetError(f"{path}: user {case.user_id} is also in {owner[case.user_id]}; run them separately")
            owner[case.user_id] = name
        sets.append(EvalSet(name, path, cases))
    return sets


COLUMNS = (
    ("users", "users"),
    ("expected", "expected"),
    ("memories", "memories"),
    ("precision", "precision"),
    ("recall", "recall"),
    ("false_memory_rate", "false mem"),
    ("update_accuracy", "update acc"),
    ("evidence_accuracy", "evidence"),
    ("budget_violations", "over budget"),
)


def _cell(metrics: dict[str, Any], key: str, cases: list[UserCase]) -> str:
    value = metrics[key]
    # a ratio over nothing is vacuous: show a dash rather than a perfect score
    if (
        (key in ("precision", "false_memory_rate", "evidence_accuracy") and metrics["memories"] == 0)
        or (key == "recall" and metrics["expected"] == 0)
        or (key == "update_accuracy" and not any(c.update for c in cases))
    ):
        return "-"
    return f"{value:.2f}" if isinstance(value, float) else str(value)


def table(cases: list[UserCase], observed: Observed) -> list[str]:
    """The metrics of a set as a text table: one row per category, then all of its users."""
    rows = [
        (name, group, metrics)
        for (name, group), metrics in zip(categories(cases).items(), by_category(cases, observed).values(), strict=True)
    ]
    rows.append(("all", cases, score(cases, observed)[0]))
    width = max(len(name) for name, _, _ in rows)
    lines = ["  " + "category".ljust(width) + "".join(f"{title:>12}" for _, title in COLUMNS)]
    for name, group, metrics in rows:
        lines.append("  " + name.ljust(width) + "".join(f"{_cell(metrics, key, group):>12}" for key, _ in COLUMNS))
    return lines


def report(
    sets: list[EvalSet], observed: Observed, policy: str, gated: set[str], max_findings: int
) -> tuple[dict[str, Any], list[str]]:
    """Print each set's findings and table; return (the JSON summary, the gated sets that missed a target)."""
    summary: dict[str, Any] = {}
    failed: list[str] = []
    for s in sets:
        metrics, findings = score(s.cases, observed)
        missed = missed_targets(metrics)
        enforced = s.name in gated
        note = "" if enforced else f" ({NOT_ENFORCED})"
        _say(f"\n== {s.name}: {len(s.cases)} users from {s.path}{note} ==")
        if findings and max_findings > 0:
            _say(f"{len(findings)} finding(s){'' if len(findings) <= max_findings else f', the first {max_findings}'}:")
            for finding in findings[:max_findings]:
                _say(f"  - {finding}")
        for line in table(s.cases, observed):
            _say(line)
        _say(
            ("targets met" if not missed else "missed: " + "; ".join(missed)) + ("" if enforced else " (not enforced)")
        )
        if missed and enforced:
            failed.append(s.name)
        cats = by_category(s.cases, observed)
        summary[s.name] = {**metrics, **({"categories": cats} if any(c.category for c in s.cases) else {})}
    if len(sets) == 1:
        return {**summary[sets[0].name], "policy": policy}, failed
    return {
        "policy": policy,
        "sets": summary,
        "gated": [s.name for s in sets if s.name in gated],
        "targets_met": {s.name: not missed_targets(summary[s.name]) for s in sets},
    }, failed


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
    try:
        sets = load_sets(args.split, args.dataset, args.users)
    except (OSError, DatasetError) as exc:
        print(f"memwright eval: {exc}", file=sys.stderr)
        return 2
    names = [s.name for s in sets]
    unknown = [g for g in args.gate if g not in names]
    if unknown:
        print(f"memwright eval: --gate {', '.join(unknown)} names no set ({', '.join(names)})", file=sys.stderr)
        return 2
    gated = set(args.gate or names)
    cases = [case for s in sets for case in s.cases]
    mode = "in-process (offline)" if args.offline else "through ingest, sweeper and curator"
    described = ", ".join(f"{s.name} {len(s.cases)}" for s in sets)
    _say(f"== memwright eval: {len(cases)} users ({described}), {policy} policy, {mode} ==")
    started = time.monotonic()
    observed = asyncio.run(_observe(args, cases, policy))
    summary, failed = report(sets, observed, policy, gated, args.findings)
    enforced = ", ".join(n for n in names if n in gated)
    verdict = f"targets met ({enforced})" if not failed else "missed targets in " + ", ".join(failed)
    _say(f"\ntook {time.monotonic() - started:.0f}s; {verdict}")
    print(json.dumps(summary), flush=True)
    return 1 if args.check and failed else 0
