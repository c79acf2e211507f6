"""Curator processes against one real PostgreSQL, under concurrency and faults (issue 4).

Each test starts real `memwright curator` processes with short leases (2-3 s). Slow runs come
from the scripted OpenAI-compatible server in tests/fakes (the real LlmPolicy talks to it over
HTTP); the test plays the sweeper by writing windows with memwright.store.sweeps.

1. three curators, 200 users: no two runs of one user overlap, every user is served;
2. kill -9 in the middle of a run: recovered after the lease expires, data exactly as a clean run;
3. SIGSTOP past the lease, then SIGCONT: the stale commit is refused and counted;
4. skew: one user with 100x the signals of 50 others; every light user served in time and in turn;
5. pg_terminate_backend on the liveness connection (it holds the run's lock): the lock frees,
   nothing commits, the user recovers;
6. the connections held: at concurrency 4, 16 and 64 against a 1 s model, a curator holds its
   liveness connection and at most its pool (MEMWRIGHT_PG_POOL_MAX, 4), whatever the concurrency;
7. the liveness connection terminated under several runs: all of them stop, the curator connects
   again and recovers their users itself.

A curator process holds one liveness connection (the advisory locks of all its runs) and a small
pool; a run holds no connection while its model thinks (memwright.curation).
"""

from __future__ import annotations

import asyncio
import os
import random
import re
import signal
import statistics
import time
from collections.abc import AsyncIterator, Callable
from datetime import timedelta
from pathlib import Path
from typing import Any

import aiohttp
import asyncpg
import pytest
from memwright.localrun import ServiceProcesses
from prometheus_client.parser import text_string_to_metric_families

from tests.e2e.helpers import eventually
from tests.fakes.llm_server import FakeLlm, Reply, Step, slow, text, tool_calls, tool_results
from tests.integration.helpers import sweep

LEASE = 2.0  # seconds; the takeover grace is one more lease length

# ---- harness -------------------------------------------------------------------------------


class Curator:
    """One `memwright curator` process with its own ops port and log file."""

    def __init__(self, name: str, env: dict[str, str], log_dir: Path) -> None:
        self.name = name
        self.procs = ServiceProcesses({**env, "MEMWRIGHT_CURATOR_ID": name}, log_dir / name)
        self.procs.start("curator")
        self.pid = self.procs.procs["curator"].pid
        self.paused = False
        self.killed = False

    async def metrics(self) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
        async with aiohttp.ClientSession() as http, http.get(self.procs.ops_url("curator") + "/metrics") as r:
            body = await r.text()
        return {
            (s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(body)
            for s in family.samples
        }

    async def metric(self, name: str, **labels: str) -> float:
        return (await self.metrics()).get((name, tuple(sorted(labels.items()))), 0.0)

    def kill9(self) -> None:
        self.killed = True
        self.procs.kill("curator")

    def pause(self) -> None:
        self.paused = True
        os.kill(self.pid, signal.SIGSTOP)

    def resume(self) -> None:
        self.paused = False
        os.kill(self.pid, signal.SIGCONT)

    def stop(self) -> int | None:
        if self.killed:
            return None
        if self.paused:
            self.resume()
        return self.procs.stop("curator", timeout=20)["curator"]


class Curators:
    def __init__(self, dsn: str, log_dir: Path, **settings: Any) -> None:
        self.env = {
            "MEMWRIGHT_PG_DSN": dsn,
            "MEMWRIGHT_LEASE_SECONDS": str(LEASE),
            "MEMWRIGHT_POLL_SECONDS": "0.1",
            "MEMWRIGHT_LOG_LEVEL": "info",
            **{f"MEMWRIGHT_{k.upper()}": str(v) for k, v in settings.items()},
        }
        self.log_dir = log_dir
        self.all: list[Curator] = []

    async def start(self, count: int) -> list[Curator]:
        started = [Curator(f"curator-{len(self.all) + i}", self.env, self.log_dir) for i in range(count)]
        self.all += started
        for c in started:
            await c.procs.wait_ready(timeout=30)
        return started

    def by_name(self, name: str) -> Curator:
        return next(c for c in self.all if c.name == name)

    async def stop(self) -> dict[str, int | None]:
        # in a thread: the fake LLM lives on this event loop and must keep answering meanwhile
        return {c.name: await asyncio.to_thread(c.stop) for c in self.all}


@pytest.fixture
async def curators(db: asyncpg.Pool, pg_dsn: str, tmp_path: Path) -> AsyncIterator[Callable[..., Curators]]:
    made: list[Curators] = []

    def make(**settings: Any) -> Curators:
        made.append(Curators(pg_dsn, tmp_path / "logs", **settings))
        return made[-1]

    yield make
    for group in made:
        codes = await group.stop()
        # every curator that was not killed shuts down cleanly on SIGTERM
        assert all(code in (0, None) for code in codes.values()), f"unclean exit {codes}; logs in {tmp_path}"


NEW_MESSAGE = re.compile(r"^- \[(?P<mid>[^\]]+)\] conversation \S+, \S+, user: (?P<text>.*)$", re.MULTILINE)


def brain(delay: Callable[[str, int], float], remember: bool = True) -> Step:
    """A scripted model: remembers every new user message (citing it), then says done.

    `delay(user_id, new_messages)` is how long the first completion of a run takes."""

    def step(request: dict[str, Any]) -> Reply:
        if tool_results(request):
            return text("done")
        context = request["messages"][1]["content"]
        user = re.search(r"^User id: (\S+)", context, re.MULTILINE)
        assert user is not None
        new = NEW_MESSAGE.findall(context.split("## New messages", 1)[1])
        wait = delay(user.group(1), len(new))
        if not remember or not new:
            return slow(wait, text("nothing to remember"))
        return slow(
            wait, tool_calls(*[("create_memory", {"text": f"Remembers: {t}", "evidence": [m]}) for m, t in new])
        )

    return step


async def _runs(db: asyncpg.Pool, user: str) -> list[asyncpg.Record]:
    return await db.fetch("SELECT * FROM curation_runs WHERE user_id = $1 ORDER BY started_at, lease_epoch", user)


async def _running(db: asyncpg.Pool, user: str, llm: FakeLlm) -> asyncpg.Record | None:
    """The user's run once it is inside its (slow) model call."""
    asked = any(f"User id: {user}\n" in r["messages"][1]["content"] for r in llm.requests)
    rows = [r for r in await _runs(db, user) if r["status"] == "running"]
    return rows[0] if asked and rows else None


async def _committed(db: asyncpg.Pool, user: str) -> asyncpg.Record | None:
    rows = [r for r in await _runs(db, user) if r["status"] == "committed"]
    return rows[-1] if rows and not await db.fetchval("SELECT 1 FROM backlog WHERE user_id = $1", user) else None


async def _curated(db: asyncpg.Pool, user: str) -> dict[str, Any]:
    """The user's memories, evidence links and audit rows, with the user taken out of message ids."""

    def mid(message_id: str) -> str:
        return message_id.removeprefix(user + "-")

    memories = await db.fetch("SELECT * FROM memories WHERE user_id = $1", user)
    texts = {m["memory_id"]: m["text"] for m in memories}
    evidence = await db.fetch("SELECT * FROM memory_evidence WHERE user_id = $1", user)
    audit = await db.fetch("SELECT * FROM memory_audit WHERE user_id = $1 ORDER BY audit_id", user)
    return {
        "memories": sorted((m["author"], m["kind"], m["text"], m["version"]) for m in memories),
        "evidence": sorted((texts.get(e["memory_id"]), mid(e["message_id"])) for e in evidence),
        "audit": sorted(
            (a["action"], a["actor"], (a["after"] or {}).get("text"), tuple(mid(x) for x in a["evidence"]), a["reason"])
            for a in audit
        ),
        "outbox": await db.fetchval("SELECT count(*) FROM index_outbox WHERE user_id = $1", user),
        "run_ids": {r["run_id"] for r in [*evidence, *audit]},
    }


async def _overlapping_runs(db: asyncpg.Pool) -> list[asyncpg.Record]:
    """Pairs of runs of one user whose [started_at, finished_at) intervals intersect."""
    return await db.fetch(
        """SELECT a.user_id, a.run_id AS first, b.run_id AS second
           FROM curation_runs a JOIN curation_runs b ON a.user_id = b.user_id AND a.run_id < b.run_id
           WHERE tstzrange(a.started_at, coalesce(a.finished_at, 'infinity'))
              && tstzrange(b.started_at, coalesce(b.finished_at, 'infinity'))"""
    )


async def _drained(db: asyncpg.Pool) -> bool:
    """No signal waits and no run is in progress."""
    return not await db.fetchval(
        "SELECT (SELECT count(*) FROM backlog) + (SELECT count(*) FROM curation_runs WHERE status = 'running')"
    )


PREFERENCES = ("Always answer in metric units.", "Never use emoji.", "My name is Sam.")


# ---- 1. three curators, 200 users ------------------------------------------------------------


async def test_three_curators_serve_200_users_without_two_runs_of_one_user_overlapping(
    db: asyncpg.Pool, curators: Callable[..., Curators]
) -> None:
    group = curators(concurrency=4, lease_seconds=3)
    procs = await group.start(3)
    users = [f"u{i:03d}" for i in range(200)]
    started = time.monotonic()
    for i, user in enumerate(users):
        await sweep(db, user, "Always answer in metric units.", "what time is it?", ago=300 - i)
    # more windows while the curators work: users come back, so claims race for them again
    rng = random.Random(4)
    for burst in range(3):
        await asyncio.sleep(0.3)
        for user in rng.sample(users, 60):
            await sweep(db, user, f"Never use emoji, burst {burst}.", conv=f"b{burst}")

    await eventually(lambda: _drained(db), timeout=60, what="every user curated")
    took = time.monotonic() - started

    runs = await db.fetch("SELECT * FROM curation_runs")
    assert {r["status"] for r in runs} == {"committed"}
    assert await _overlapping_runs(db) == []
    served = await db.fetch(
        """SELECT a.user_id, a.watermark, (SELECT max(seq) FROM messages m WHERE m.user_id = a.user_id) AS last
           FROM agents a"""
    )
    assert len(served) == 200 and all(r["watermark"] == r["last"] for r in served)
    per_worker = {w: sum(1 for r in runs if r["worker"] == w) for w in {c.name for c in procs}}
    assert all(n > 0 for n in per_worker.values()), per_worker

    # no process ran more than its 4 slots at once; claims seen by Prometheus match the runs
    peak = {}
    for worker in per_worker:
        edges = sorted(
            [(r["started_at"], 1) for r in runs if r["worker"] == worker]
            + [(r["finished_at"], -1) for r in runs if r["worker"] == worker]
        )
        level = top = 0
        for _, step in edges:
            level += step
            top = max(top, level)
        peak[worker] = top
    assert all(p <= 4 for p in peak.values()), peak
    claims = [await c.metric("memwright_curator_claims_total") for c in procs]
    assert sum(claims) == len(runs)
    print(
        f"\n[test 1] {len(runs)} runs for 200 users in {took:.1f}s; runs per curator {per_worker}; "
        f"peak concurrent runs per curator {peak}; overlapping pairs 0"
    )


# ---- 2. kill -9 in the middle of a run -------------------------------------------------------


@pytest.fixture
async def llm() -> AsyncIterator[FakeLlm]:
    async with FakeLlm() as fake:
        yield fake


async def test_a_curator_killed_mid_run_is_recovered_after_its_lease_with_the_data_of_a_clean_run(
    db: asyncpg.Pool, llm: FakeLlm, curators: Callable[..., Curators]
) -> None:
    llm.push(*[brain(lambda user, _: 2.5 if user == "victim" else 0.0)] * 40)
    group = curators(concurrency=2, policy="llm", llm_base_url=llm.base_url)
    await group.start(2)
    await sweep(db, "control", *PREFERENCES)  # the clean run, to compare with
    await eventually(lambda: _committed(db, "control"), timeout=20, what="the clean run")

    await sweep(db, "victim", *PREFERENCES)
    run = await eventually(lambda: _running(db, "victim", llm), timeout=20, what="the run inside its model call")
    killed = group.by_name(run["worker"])
    killed.kill9()
    killed_at, expires = await db.fetchrow("SELECT now(), lease_expires_at FROM agents WHERE user_id = 'victim'")
    recovered = await eventually(lambda: _committed(db, "victim"), timeout=30, what="the user recovered")

    runs = await _runs(db, "victim")
    assert [(r["status"], r["worker"]) for r in runs] == [
        ("abandoned", killed.name),
        ("committed", recovered["worker"]),
    ]
    assert recovered["worker"] != killed.name
    assert "connection_lost" in runs[0]["error"]
    assert recovered["watermark_from"] == 0  # the same signals again: nothing was lost
    assert recovered["started_at"] >= expires  # the valid lease was respected until it expired

    victim, control = await _curated(db, "victim"), await _curated(db, "control")
    assert victim["run_ids"] == {recovered["run_id"]}  # nothing of the killed run
    victim.pop("run_ids"), control.pop("run_ids")
    assert victim == control  # exactly the memories, evidence and audit of a clean run
    assert len(victim["memories"]) == len(PREFERENCES) and len(victim["audit"]) == len(PREFERENCES)

    survivor = group.by_name(recovered["worker"])
    assert await survivor.metric("memwright_curator_abandoned_runs_recovered_total") == 1
    assert await survivor.metric("memwright_curator_lease_conflicts_total", reason="connection_lost") == 1
    wait = (recovered["started_at"] - killed_at).total_seconds()
    print(
        f"\n[test 2] killed {killed.name} mid-run; {survivor.name} recovered after {wait:.2f}s "
        f"(lease expired {(expires - killed_at).total_seconds():.2f}s after the kill); "
        f"{len(victim['memories'])} memories, {len(victim['evidence'])} evidence links, "
        f"{len(victim['audit'])} audit rows, identical to the clean run"
    )


# ---- 3. SIGSTOP past the lease, then SIGCONT -------------------------------------------------


async def test_a_paused_curator_whose_lease_was_taken_over_has_its_commit_refused(
    db: asyncpg.Pool, llm: FakeLlm, curators: Callable[..., Curators]
) -> None:
    llm.push(*[brain(lambda user, _: 1.5)] * 40)
    group = curators(concurrency=2, policy="llm", llm_base_url=llm.base_url)
    await group.start(2)
    await sweep(db, "victim", *PREFERENCES)
    run = await eventually(lambda: _running(db, "victim", llm), timeout=20, what="the run inside its model call")
    zombie = group.by_name(run["worker"])
    owner = next(c for c in group.all if c is not zombie)
    zombie.pause()
    await asyncio.sleep(0.2)  # a renewal in flight lands before we read the expiry
    paused_at, expires = await db.fetchrow("SELECT now(), lease_expires_at FROM agents WHERE user_id = 'victim'")

    async def taken_over() -> asyncpg.Record | None:
        return next((r for r in await _runs(db, "victim") if r["lease_epoch"] == run["lease_epoch"] + 1), None)

    takeover = await eventually(taken_over, timeout=20, what="another curator taking the user over")
    resumed_at = await db.fetchval("SELECT now()")
    zombie.resume()

    async def zombie_done() -> asyncpg.Record | None:
        row = await db.fetchrow("SELECT * FROM curation_runs WHERE run_id = $1", run["run_id"])
        return row if row["status"] == "fenced" else None

    refused = await eventually(zombie_done, timeout=20, what="the paused run's commit refused")
    final = await eventually(lambda: _committed(db, "victim"), timeout=20, what="the owner's commit")

    assert final["run_id"] == takeover["run_id"] and final["worker"] == owner.name
    assert takeover["started_at"] >= expires + timedelta(seconds=LEASE)  # expired, then one grace
    assert refused["finished_at"] <= takeover["started_at"]  # its ownership ended at the takeover
    assert "holder_silent" in refused["error"] and "taken over" in refused["error"]
    assert await zombie.metric("memwright_curator_fenced_commits_total") == 1
    assert await zombie.metric("memwright_curator_runs_total", outcome="fenced") == 1
    assert await owner.metric("memwright_curator_lease_conflicts_total", reason="holder_silent") == 1
    assert await owner.metric("memwright_curator_abandoned_runs_recovered_total") == 1

    data = await _curated(db, "victim")
    assert data["run_ids"] == {final["run_id"]}  # only the run that owned the lease wrote anything
    assert len(data["memories"]) == len(PREFERENCES) and len(data["audit"]) == len(PREFERENCES)
    assert data["outbox"] == len(PREFERENCES)
    lost = await zombie.metric("memwright_curator_heartbeats_lost_total")
    print(
        f"\n[test 3] {zombie.name} paused {(resumed_at - paused_at).total_seconds():.2f}s "
        f"(lease expired {(expires - paused_at).total_seconds():.2f}s into the pause); {owner.name} took over "
        f"{(takeover['started_at'] - expires).total_seconds():.2f}s after expiry; zombie commit refused "
        f"(fenced_commits_total=1, heartbeats_lost_total={lost:g}); {len(data['memories'])} memories, all "
        "from the owner's run"
    )


# ---- 4. skew ---------------------------------------------------------------------------------


async def test_a_heavy_user_does_not_delay_light_users_beyond_their_turn(
    db: asyncpg.Pool, llm: FakeLlm, curators: Callable[..., Curators]
) -> None:
    interval, intervals, processes, concurrency = 1.0, 5, 2, 3
    slots = processes * concurrency
    # a model call takes 30 ms plus 3 ms per new message: a heavy run is ten times a light one
    llm.push(*[brain(lambda _, n: 0.03 + 0.003 * n, remember=False)] * 2000)
    group = curators(concurrency=concurrency, policy="llm", llm_base_url=llm.base_url)
    await group.start(processes)
    light = [f"light{i:02d}" for i in range(50)]
    rng = random.Random(4)
    for k in range(intervals):  # the test plays the sweeper: one window per user per interval
        tick = time.monotonic()
        await sweep(db, "heavy", *[f"heavy message {k}.{j}" for j in range(100)], conv=f"w{k}")
        for user in rng.sample(light, len(light)):
            await sweep(db, user, f"light message {k}", conv=f"w{k}")
        await asyncio.sleep(max(0.0, interval - (time.monotonic() - tick)))

    await eventually(lambda: _drained(db), timeout=60, what="every signal curated")
    runs = [
        dict(r)
        for r in await db.fetch(
            """SELECT r.run_id, r.user_id, r.started_at, r.finished_at, r.watermark_from, r.watermark_to,
                      (SELECT min(m.accepted_at) FROM messages m WHERE m.user_id = r.user_id
                          AND m.seq > r.watermark_from AND m.seq <= r.watermark_to) AS waiting_since
               FROM curation_runs r WHERE r.status = 'committed' AND r.watermark_to > r.watermark_from
               ORDER BY r.started_at"""
        )
    ]
    assert await db.fetchval("SELECT count(*) FROM curation_runs WHERE status <> 'committed'") == 0
    counts = dict(await db.fetch("SELECT user_id, count(*) FROM messages GROUP BY user_id"))
    assert counts["heavy"] == 100 * counts["light00"] == 100 * intervals

    slack = timedelta(seconds=0.2)  # claims racing on two processes, and the window's own commit
    waits: list[float] = []
    for m in await db.fetch("SELECT user_id, seq, accepted_at, swept_at FROM messages WHERE user_id <> 'heavy'"):
        mine = [r for r in runs if r["user_id"] == m["user_id"]]
        served = next(r for r in mine if r["watermark_from"] < m["seq"] <= r["watermark_to"])
        before = [r["finished_at"] for r in mine if r["finished_at"] <= served["started_at"]]
        available = max([m["swept_at"], *before])  # signal swept, and the user's previous run over
        # users that waited longer and were claimed while this one waited: its turn comes after them
        ahead = [
            r
            for r in runs
            if r["waiting_since"] < served["waiting_since"] and available <= r["started_at"] < served["started_at"]
        ]
        work_ahead = sum((r["finished_at"] - r["started_at"]).total_seconds() for r in ahead) / slots
        waited = (served["started_at"] - m["accepted_at"]).total_seconds()
        assert waited <= 2 * interval + work_ahead, (m["user_id"], waited, work_ahead)
        # and nobody who started waiting later was claimed first
        overtakers = [
            r
            for r in runs
            if r["waiting_since"] > served["waiting_since"] + slack
            and available + slack < r["started_at"] < served["started_at"] - slack
        ]
        assert overtakers == [], (m["user_id"], overtakers)
        waits.append(waited)
    heavy = [r for r in runs if r["user_id"] == "heavy"]
    print(
        f"\n[test 4] {len(waits)} light signals from 50 users and {counts['heavy']} heavy signals; light waits: "
        f"median {statistics.median(waits):.3f}s, max {max(waits):.3f}s (bound {2 * interval:.1f}s + work "
        f"ahead); {len(heavy)} heavy runs, longest "
        f"{max((r['finished_at'] - r['started_at']).total_seconds() for r in heavy):.2f}s; no light user overtaken"
    )


# ---- 5. pg_terminate_backend on the liveness connection ---------------------------------------

RUN_LOCK_HOLDER = """
SELECT pid FROM pg_locks WHERE locktype = 'advisory' AND objsubid = 1 AND granted
  AND ((classid::bigint << 32) | objid::bigint) = hashtextextended($1, $2)
"""


async def test_a_run_whose_connection_is_terminated_commits_nothing_and_its_user_is_recovered(
    db: asyncpg.Pool, llm: FakeLlm, curators: Callable[..., Curators]
) -> None:
    llm.push(*[brain(lambda user, _: 2.0)] * 40)
    group = curators(concurrency=2, policy="llm", llm_base_url=llm.base_url)
    await group.start(2)
    await sweep(db, "victim", *PREFERENCES)
    run = await eventually(lambda: _running(db, "victim", llm), timeout=20, what="the run inside its model call")
    holder = group.by_name(run["worker"])
    pid = await db.fetchval(RUN_LOCK_HOLDER, "victim", run["lease_epoch"])
    assert pid is not None, "the run's advisory lock is held on its curator's liveness connection"
    assert pid == await _liveness_pid(db, holder.name)
    terminated_at = await db.fetchval("SELECT now()")
    assert await db.fetchval("SELECT pg_terminate_backend($1)", pid)

    async def lock_freed() -> bool:
        return await db.fetchval(RUN_LOCK_HOLDER, "victim", run["lease_epoch"]) is None

    await eventually(lock_freed, timeout=5, what="the advisory lock freed")
    final = await eventually(lambda: _committed(db, "victim"), timeout=30, what="the user recovered")

    first = await db.fetchrow("SELECT * FROM curation_runs WHERE run_id = $1", run["run_id"])
    # fenced: its heartbeat found the lease lost and stopped it; failed: its next statement found the
    # connection gone first; abandoned: the recovery claimed the user before either was recorded
    assert first["status"] in ("abandoned", "fenced", "failed") and first["watermark_to"] is None
    assert final["run_id"] != run["run_id"] and final["watermark_from"] == 0
    data = await _curated(db, "victim")
    assert data["run_ids"] == {final["run_id"]}  # the terminated run committed nothing
    assert len(data["memories"]) == len(PREFERENCES) and data["outbox"] == len(PREFERENCES)
    assert await holder.metric("memwright_curator_heartbeats_lost_total") == 1
    print(
        f"\n[test 5] terminated backend {pid} of {holder.name}'s run; lock freed; that run ended "
        f"{first['status']}; {final['worker']} recovered the user "
        f"{(final['started_at'] - terminated_at).total_seconds():.2f}s later; "
        f"{len(data['memories'])} memories, all from the recovery run"
    )


# ---- 6. the connections held, at concurrency 4, 16 and 64 --------------------------------------

CURATOR_CONNECTIONS = """
SELECT count(*) FILTER (WHERE application_name LIKE 'memwright-curator %') AS pool,
       count(*) FILTER (WHERE application_name LIKE 'memwright-curator-liveness %') AS liveness
FROM pg_stat_activity WHERE datname = current_database() AND application_name LIKE $1
"""


async def _liveness_pid(db: asyncpg.Pool, worker: str) -> int | None:
    return await db.fetchval(
        "SELECT pid FROM pg_stat_activity WHERE application_name = $1", f"memwright-curator-liveness {worker}"
    )


@pytest.mark.parametrize("concurrency", [4, 16, 64])
async def test_a_curator_holds_a_handful_of_connections_whatever_its_concurrency(
    db: asyncpg.Pool, llm: FakeLlm, curators: Callable[..., Curators], concurrency: int
) -> None:
    users = [f"c{concurrency}-{i:03d}" for i in range(2 * concurrency)]  # two waves of runs
    llm.push(*[brain(lambda _user, _n: 1.0)] * (2 * len(users) + 10))  # a 1 s model
    for i, user in enumerate(users):  # all waiting before the curator starts: claims race nothing
        await sweep(db, user, "Always answer in metric units.", ago=100 - i / 100)
    group = curators(concurrency=concurrency, policy="llm", llm_base_url=llm.base_url)
    (curator,) = await group.start(1)

    peak = {"pool": 0, "liveness": 0, "runs": 0}
    started = time.monotonic()
    while not await _drained(db) and time.monotonic() - started < 60:
        row = await db.fetchrow(CURATOR_CONNECTIONS, f"% {curator.name}")
        running = await db.fetchval("SELECT count(*) FROM curation_runs WHERE status = 'running'")
        peak = {
            "pool": max(peak["pool"], row["pool"]),
            "liveness": max(peak["liveness"], row["liveness"]),
            "runs": max(peak["runs"], running),
        }
        await asyncio.sleep(0.05)
    took = time.monotonic() - started

    assert await _drained(db), "every user curated"
    assert await db.fetchval("SELECT count(*) FROM curation_runs WHERE status <> 'committed'") == 0
    # runs really waited on the model together, several times more of them than connections (on a busy
    # machine a curator's CPU per run, not its connections, limits how many overlap at 64)
    assert peak["runs"] >= min(concurrency, 16), peak
    assert peak["liveness"] == 1 and peak["pool"] <= 4, peak  # a handful, not one per run
    print(
        f"\n[test 6] concurrency {concurrency}, 1 s model, {len(users)} users in {took:.1f}s: peak {peak['runs']} "
        f"runs at once on {peak['pool'] + peak['liveness']} PostgreSQL connections (pool {peak['pool']}, "
        f"liveness {peak['liveness']})"
    )


# ---- 7. the liveness connection terminated under several runs ------------------------------------


async def test_a_terminated_liveness_connection_stops_all_its_runs_and_the_curator_recovers_them(
    db: asyncpg.Pool, llm: FakeLlm, curators: Callable[..., Curators]
) -> None:
    llm.push(*[brain(lambda _user, _n: 2.0)] * 40)
    group = curators(concurrency=4, policy="llm", llm_base_url=llm.base_url)
    (curator,) = await group.start(1)
    users = ["ann", "ben", "cat"]
    for user in users:
        await sweep(db, user, *PREFERENCES)

    async def all_running() -> list[asyncpg.Record] | None:
        rows = [await _running(db, user, llm) for user in users]
        return None if None in rows else [r for r in rows if r is not None]

    runs = await eventually(all_running, timeout=20, what="three runs inside their model calls")
    pid = await _liveness_pid(db, curator.name)
    assert pid is not None
    assert [await db.fetchval(RUN_LOCK_HOLDER, r["user_id"], r["lease_epoch"]) for r in runs] == [pid] * 3
    terminated_at = await db.fetchval("SELECT now()")
    assert await db.fetchval("SELECT pg_terminate_backend($1)", pid)

    finals = [await eventually(lambda u=u: _committed(db, u), timeout=30, what=f"{u} recovered") for u in users]
    for run, final in zip(runs, finals, strict=True):
        first = await db.fetchrow("SELECT * FROM curation_runs WHERE run_id = $1", run["run_id"])
        assert first["status"] in ("fenced", "abandoned", "failed") and first["watermark_to"] is None
        assert final["worker"] == curator.name and final["watermark_from"] == 0
        data = await _curated(db, run["user_id"])
        assert data["run_ids"] == {final["run_id"]}  # the stopped run committed nothing
        assert len(data["memories"]) == len(PREFERENCES)
    new_pid = await _liveness_pid(db, curator.name)
    assert new_pid is not None and new_pid != pid  # connected again
    assert await curator.metric("memwright_curator_heartbeats_lost_total") == 3
    assert await curator.metric("memwright_curator_runs_total", outcome="committed") == 3
    waited = max((f["started_at"] - terminated_at).total_seconds() for f in finals)
    ended = [await db.fetchval("SELECT status FROM curation_runs WHERE run_id = $1", r["run_id"]) for r in runs]
    print(
        f"\n[test 7] terminated liveness backend {pid} under 3 runs; all stopped ({ended}); "
        f"reconnected as {new_pid}; the same curator reclaimed all 3 users within {waited:.2f}s"
    )
