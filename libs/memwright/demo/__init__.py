"""`memwright demo`: the whole pipeline on the local stack with a demo stream of messages.

It creates a fresh `memwright_demo` database, starts the five services, replays the
stream shipped beside this file through the ingest HTTP endpoint in two phases (as if
two days passed), waits for the sweeps with a progress line, prints every user's
memories with their receipts and the hypotheses still being watched, prints the memory
console's address (a sign-in link for a demo user and one for an operator), and stops the
services it started; with MEMWRIGHT_DEMO_KEEP=1 (`make demo KEEP=1`) it keeps them running
until Ctrl-C or SIGTERM, so a person can open the console. The local stack itself is started
and stopped by `make demo`.
"""

from __future__ import annotations

import asyncio
import json
import os
import secrets
import signal
import time
from collections import defaultdict
from importlib import resources
from pathlib import Path
from typing import Any

import aiohttp
import asyncpg

from memwright.auth import mint
from memwright.localrun import ServiceProcesses
from memwright.settings import AuthSettings, KafkaSettings
from memwright.store.db import create_pool
from memwright.store.migrate import create_database
from memwright.topics import ensure_topics

DEMO_DB = "memwright_demo"


def load_stream() -> list[dict[str, Any]]:
    text = resources.files("memwright.demo").joinpath("stream.jsonl").read_text()
    return [json.loads(line) for line in text.splitlines() if line.strip()]


def load_expected() -> dict[str, list[list[str]]]:
    text = resources.files("memwright.demo").joinpath("expected.json").read_text()
    return {k: v for k, v in json.loads(text).items() if not k.startswith("_")}


async def check_expected(pool: asyncpg.Pool, expected: dict[str, list[list[str]]]) -> list[str]:
    """Compare the memories formed with expected.json; return what is missing or extra."""
    problems = []
    for user, wanted in expected.items():
        texts = [r["text"].lower() for r in await pool.fetch("SELECT text FROM memories WHERE user_id = $1", user)]
        for words in wanted:
            if not any(any(w in t for w in words) for t in texts):
                problems.append(f"{user}: no memory mentions {' or '.join(words)}")
        if len(texts) > len(wanted):
            problems.append(f"{user}: {len(texts)} memories, expected {len(wanted)}")
    return problems


def _say(line: str) -> None:
    print(line, flush=True)


async def _post_phase(http: aiohttp.ClientSession, url: str, token: str, lines: list[dict[str, Any]]) -> int:
    by_user: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for line in lines:
        by_user[line["user_id"]].append(
            {"schema_version": 1, **{k: line[k] for k in ("user_id", "conversation_id", "message_id", "text")}}
        )
    for signals in by_user.values():
        async with http.post(
            url + "/v1/signals", json={"signals": signals}, headers={"Authorization": f"Bearer {token}"}
        ) as r:
            if r.status != 202:
                raise RuntimeError(f"ingest answered {r.status}: {await r.text()}")
    return sum(len(s) for s in by_user.values())


async def _wait_for_sweeps(pool: asyncpg.Pool, expected_messages: int, timeout: float) -> None:
    """Show progress (a line whenever something moves) until everything is swept, curated and indexed."""
    started = time.monotonic()
    last = None
    while True:
        row = await pool.fetchrow(
            """SELECT (SELECT count(*) FROM messages) AS swept, (SELECT count(*) FROM backlog) AS waiting,
                      (SELECT count(*) FROM index_outbox) AS outbox, (SELECT count(*) FROM memories) AS memories"""
        )
        assert row is not None
        state = (row["swept"], row["waiting"], row["outbox"], row["memories"])
        elapsed = time.monotonic() - started
        if state != last:
            _say(
                f"  [{elapsed:5.1f}s] swept {row['swept']}/{expected_messages} messages, "
                f"{row['waiting']} user(s) waiting for their agent, {row['outbox']} change(s) to index, "
                f"{row['memories']} memories"
            )
            last = state
        if row["swept"] >= expected_messages and row["waiting"] == 0 and row["outbox"] == 0:
            return
        if elapsed > timeout:
            raise TimeoutError(f"the pipeline did not settle within {timeout:.0f}s; see the service logs")
        await asyncio.sleep(0.5)


async def _print_memories(pool: asyncpg.Pool, users: list[str]) -> int:
    total = 0
    for user in users:
        memories = await pool.fetch(
            "SELECT memory_id, author, text, version FROM memories WHERE user_id = $1 ORDER BY created_at", user
        )
        hypotheses = await pool.fetchval("SELECT hypotheses FROM agent_state WHERE user_id = $1", user) or []
        _say(
            f"\n{user}: {len(memories)} memor{'y' if len(memories) == 1 else 'ies'}, "
            f"{len(hypotheses)} hypothes{'is' if len(hypotheses) == 1 else 'es'} still being watched"
        )
        for m in memories:
            total += 1
            _say(f"  * {m['text']}  [{m['author']}, v{m['version']}]")
            receipts = await pool.fetch(
                """SELECT e.message_id, msg.conversation_id, msg.text FROM memory_evidence e
                   JOIN messages msg ON msg.user_id = e.user_id AND msg.message_id = e.message_id
                   WHERE e.memory_id = $1 ORDER BY msg.seq""",
                m["memory_id"],
            )
            for r in receipts:
                _say(f'      because {r["message_id"]} in {r["conversation_id"]}: "{r["text"]}"')
        for h in hypotheses:
            _say(
                f"  ? {h['statement']}  (seen {h['count']}x in {len(h['conversations'])} conversation(s); "
                "needs another conversation)"
            )
    return total


async def _record_store(dsn: str, store: Path) -> None:
    """Keep the store's path with the database, so `memwright index check --demo` pairs this
    database with this store and never with another demo's (memwright.index.admin.demo_store)."""
    conn = await asyncpg.connect(dsn)
    try:
        comment = json.dumps({"qdrant_path": str(store)}).replace("'", "''")
        await conn.execute(f"COMMENT ON DATABASE \"{DEMO_DB}\" IS '{comment}'")
    finally:
        await conn.close()


CONSOLE_LINK_TTL_S = 8 * 3600  # the demo's sign-in links work for a working day


def console_links(api_url: str, secret: str, user: str) -> tuple[str, str]:
    """Sign-in links to the console: the user's, and an operator's (a service token with admin).
    The token is in the #fragment, which the browser never sends to a server."""
    auth = AuthSettings(jwt_secret=secret)
    user_token = mint(auth, user, ["memories:read", "memories:write"], ttl_seconds=CONSOLE_LINK_TTL_S)
    operator_token = mint(auth, "service:demo-operator", ["admin"], ttl_seconds=CONSOLE_LINK_TTL_S)
    return (
        f"{api_url}/console/sign-in#token={user_token}",
        f"{api_url}/console/sign-in#token={operator_token}",
    )


async def _until_stopped() -> None:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    await stop.wait()


async def run_demo(window_seconds: float = 3.0, timeout: float = 180.0) -> int:
    kafka = KafkaSettings.from_env()
    admin_dsn = os.environ.get("MEMWRIGHT_PG_DSN")
    if not admin_dsn:
        _say("MEMWRIGHT_PG_DSN is not set; run `make demo` (it starts the local stack and sets it)")
        return 2
    local = Path(os.environ.get("MEMWRIGHT_LOCAL_DIR", ".local")) / "demo"
    _say("== memwright demo ==")
    _say(f"preparing a fresh database '{DEMO_DB}' and the Kafka topics")
    dsn = await create_database(admin_dsn, DEMO_DB, replace=True)
    store = (local / f"qdrant-{int(time.time())}").resolve()
    await _record_store(dsn, store)
    await ensure_topics(kafka)
    secret = secrets.token_hex(32)
    env = {
        "MEMWRIGHT_PG_DSN": dsn,
        "MEMWRIGHT_JWT_SECRET": secret,
        "MEMWRIGHT_WINDOW_SECONDS": str(window_seconds),
        "MEMWRIGHT_QDRANT_PATH": str(store),
        "MEMWRIGHT_SWEEPER_DATA_DIR": str(local / "sweeper"),
        "MEMWRIGHT_POLL_SECONDS": "0.5",
    }
    procs = ServiceProcesses(env, local / "logs")
    _say(f"starting ingest, sweeper, curator, indexer and api (logs in {procs.log_dir})")
    procs.start()
    pool = await create_pool(dsn, 1, 2)
    try:
        await procs.wait_ready(timeout=90)
        token = mint(AuthSettings(jwt_secret=secret), "service:demo", ["signals:write"])
        stream = load_stream()
        users = sorted({line["user_id"] for line in stream}, key=[x["user_id"] for x in stream].index)
        posted = 0
        async with aiohttp.ClientSession() as http:
            for phase in sorted({line["phase"] for line in stream}):
                lines = [line for line in stream if line["phase"] == phase]
                posted += await _post_phase(http, procs.url("ingest"), token, lines)
                _say(
                    f"\nphase {phase}: posted {len(lines)} messages from {len({x['user_id'] for x in lines})} "
                    f"users; sweep window {window_seconds:g}s"
                )
                await _wait_for_sweeps(pool, posted, timeout)
        _say("\n== what the agents remember, and why ==")
        total = await _print_memories(pool, users)
        _say(f"\n{total} memories from {posted} messages; every one cites the messages that caused it.")
        problems = await check_expected(pool, load_expected())
        for problem in problems:
            _say(f"UNEXPECTED: {problem}")
        user_link, operator_link = console_links(procs.url("api"), secret, users[0])
        _say(f"\n== the memory console (docs/console.md) ==\n{users[0]}'s memories, and why: {user_link}")
        _say(f"the operator's view: {operator_link}")
        if os.environ.get("MEMWRIGHT_DEMO_KEEP", "") not in ("", "0"):
            _say("everything keeps running so you can open the console; press Ctrl-C to stop")
            await _until_stopped()
        else:
            _say("(the services stop now: run `make demo KEEP=1` to keep them running and open the console)")
        return 1 if problems or not total else 0
    finally:
        await pool.close()
        codes = procs.stop()
        _say(f"services stopped: {', '.join(f'{k}={v}' for k, v in codes.items())}")
