"""What every drill does: post signals at a steady rate while something breaks, remember what
each client was told, then check from PostgreSQL that every acknowledged signal was swept
exactly once and curated into exactly one memory, and nothing else appeared."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import time
from dataclasses import dataclass, field

import aiohttp
import asyncpg

from tests.drills.conftest import Drill
from tests.e2e.helpers import eventually

PREFERENCE = "Always answer in metric units"
HANG_SECONDS = 20.0  # a request unanswered this long is a hang


@dataclass
class Outcome:
    user_id: str
    message_id: str
    status: int | str  # HTTP status, or "error" (connection failed) / "hang"
    seconds: float
    sent_at: float  # monotonic


@dataclass
class Poster:
    """Posts one signal per tick, round-robin over `users`, without waiting for earlier answers
    (so a slow answer never slows the load down), until stopped."""

    drill: Drill
    users: list[str]
    rate: float = 20.0
    outcomes: list[Outcome] = field(default_factory=list)

    async def _post(self, http: aiohttp.ClientSession, user: str, message_id: str) -> None:
        body = {
            "schema_version": 1,
            "user_id": user,
            "message_id": message_id,
            "conversation_id": "c1",
            "text": PREFERENCE,
        }
        started = time.monotonic()
        try:
            async with http.post(self.drill.ingest + "/v1/signals", json=body, headers=self.drill.auth()) as r:
                await r.read()
                status: int | str = r.status
        except TimeoutError:
            status = "hang"
        except aiohttp.ClientError:
            status = "error"  # e.g. ingest killed: the connection was refused or reset
        self.outcomes.append(Outcome(user, message_id, status, time.monotonic() - started, started))

    async def run(self, stop: asyncio.Event) -> None:
        timeout = aiohttp.ClientTimeout(total=HANG_SECONDS)
        async with aiohttp.ClientSession(timeout=timeout) as http:
            tasks: set[asyncio.Task[None]] = set()
            i = 0
            while not stop.is_set():
                user = self.users[i % len(self.users)]
                task = asyncio.create_task(self._post(http, user, f"{user}-m{i}"))
                tasks.add(task)
                task.add_done_callback(tasks.discard)
                i += 1
                try:
                    await asyncio.wait_for(stop.wait(), 1 / self.rate)
                except TimeoutError:
                    pass
            if tasks:
                await asyncio.wait(tasks)

    def acked(self) -> dict[str, str]:
        """message id -> user id of every signal answered 202."""
        return {o.message_id: o.user_id for o in self.outcomes if o.status == 202}

    def statuses(self) -> dict[int | str, int]:
        return self.statuses_since(0.0)

    def statuses_since(self, monotonic: float) -> dict[int | str, int]:
        counts: dict[int | str, int] = {}
        for o in self.outcomes:
            if o.sent_at >= monotonic:
                counts[o.status] = counts.get(o.status, 0) + 1
        return counts


async def swept(pool: asyncpg.Pool, users: list[str]) -> dict[str, int]:
    """message id -> how many rows the evidence store holds for it, for these users."""
    rows = await pool.fetch(
        "SELECT message_id, count(*) AS n FROM messages WHERE user_id = ANY($1::text[]) GROUP BY message_id", users
    )
    return {r["message_id"]: r["n"] for r in rows}


async def assert_swept_exactly_once(pool: asyncpg.Pool, poster: Poster, timeout: float = 120) -> None:
    acked = poster.acked()
    users = sorted(set(poster.users))

    async def all_there() -> bool:
        return set(acked) <= set(await swept(pool, users))

    try:
        await eventually(all_there, timeout, "every acknowledged signal to be swept")
    except AssertionError:
        lost = sorted(set(acked) - set(await swept(pool, users)))
        raise AssertionError(f"{len(lost)} of {len(acked)} acknowledged signals never swept: {lost[:10]}") from None
    found = await swept(pool, users)
    twice = {m: n for m, n in found.items() if n != 1}
    assert not twice, f"signals stored more than once: {twice}"
    posted = {o.message_id for o in poster.outcomes}
    phantom = set(found) - posted
    assert not phantom, f"messages nobody posted: {sorted(phantom)[:10]}"


async def settled(pool: asyncpg.Pool, users: list[str], timeout: float = 120) -> None:
    """Nothing waits for these users' agents, no run is in flight, nothing waits to be indexed."""

    async def idle() -> bool:
        row = await pool.fetchrow(
            """SELECT (SELECT count(*) FROM backlog WHERE user_id = ANY($1::text[])) AS waiting,
                      (SELECT count(*) FROM curation_runs WHERE user_id = ANY($1::text[]) AND status = 'running')
                        AS running,
                      (SELECT count(*) FROM index_outbox) AS outbox""",
            users,
        )
        return bool(row and row["waiting"] == 0 and row["running"] == 0 and row["outbox"] == 0)

    await eventually(idle, timeout, "the backlog, running runs and the outbox to drain")


async def assert_one_memory_each(pool: asyncpg.Pool, poster: Poster) -> None:
    """Every user with an acknowledged preference has exactly one memory, created once, which cites
    every acknowledged signal; no two committed runs of a user covered the same signals."""
    acked = poster.acked()
    users = sorted(set(acked.values()))
    memories = await pool.fetch(
        "SELECT user_id, count(*) AS n FROM memories WHERE user_id = ANY($1::text[]) GROUP BY user_id", users
    )
    counts = {r["user_id"]: r["n"] for r in memories}
    wrong = {u: counts.get(u, 0) for u in users if counts.get(u, 0) != 1}
    assert not wrong, f"users without exactly one memory (user: count): {wrong}"
    creates = await pool.fetch(
        """SELECT user_id, count(*) AS n FROM memory_audit WHERE user_id = ANY($1::text[]) AND action = 'create'
           GROUP BY user_id HAVING count(*) <> 1""",
        users,
    )
    assert not creates, f"memories created more than once: {[dict(r) for r in creates]}"
    cited = {
        r["message_id"]
        for r in await pool.fetch("SELECT message_id FROM memory_evidence WHERE user_id = ANY($1::text[])", users)
    }
    uncited = sorted(set(acked) - cited)
    assert not uncited, f"{len(uncited)} acknowledged signals curated into no memory: {uncited[:10]}"
    overlaps = await pool.fetch(
        """SELECT a.user_id, a.run_id AS first, b.run_id AS second
           FROM curation_runs a JOIN curation_runs b
             ON a.user_id = b.user_id AND a.run_id < b.run_id
            AND a.status = 'committed' AND b.status = 'committed'
            AND a.watermark_to > a.watermark_from AND b.watermark_to > b.watermark_from
            AND a.watermark_from < b.watermark_to AND b.watermark_from < a.watermark_to
           WHERE a.user_id = ANY($1::text[])""",
        users,
    )
    assert not overlaps, f"committed runs that curated the same signals twice: {[dict(r) for r in overlaps]}"


async def assert_ready(drill: Drill, timeout: float = 90) -> None:
    """Every service is still the process we started (or restarted) and answers ready."""
    for name, proc in drill.procs.procs.items():
        assert proc.poll() is None, f"{name} exited with {proc.returncode}; see {drill.procs.log_dir / (name + '.log')}"
    await drill.procs.wait_ready(timeout=timeout)


def assert_index_matches(drill: Drill) -> None:
    """With the indexer stopped (the embedded store is single-process), `memwright index check`
    compares Qdrant with PostgreSQL: exit 0 means no missing, stale or orphaned point."""
    drill.procs.stop("indexer")
    env = {**drill.procs.env, "MEMWRIGHT_OPS_PORT": str(drill.procs.ops_port("indexer"))}
    done = subprocess.run(
        [sys.executable, "-m", "memwright", "index", "check"],
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, f"index check found drift:\n{done.stdout}\n{done.stderr}"


@dataclass(frozen=True)
class Footprint:
    """What one service process had written to its log and spent in CPU at one moment."""

    log_lines: int
    cpu_seconds: float

    def since(self, earlier: Footprint) -> Footprint:
        return Footprint(self.log_lines - earlier.log_lines, round(self.cpu_seconds - earlier.cpu_seconds, 2))


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process (fields 14 and 15 of /proc/<pid>/stat), in seconds."""
    with open(f"/proc/{pid}/stat") as f:
        # the command name (field 2) may hold spaces: split after its closing parenthesis
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def footprints(drill: Drill) -> dict[str, Footprint]:
    """Log lines so far and CPU seconds so far of every running service."""
    out = {}
    for name, proc in drill.procs.procs.items():
        with open(drill.procs.log_dir / f"{name}.log", "rb") as f:
            lines = sum(chunk.count(b"\n") for chunk in iter(lambda: f.read(1 << 20), b""))
        out[name] = Footprint(lines, cpu_seconds(proc.pid))
    return out
