"""Sweepers join and leave their consumer group under load: three sweepers share the six
partitions of the signals topic, a fourth joins, then one is SIGKILLed. Every acknowledged signal
is swept exactly once (one evidence row, one backlog entry per user from its oldest signal), and
the drill prints the rebalance pauses: how long signals waited to be swept around each change.

Six chatty users post between the quiet ones, and for the few seconds before the kill PostgreSQL
refuses the quiet users' rows (as a lock held elsewhere would): the chatty users' windows are
written around unwritten quiet signals of the same partitions, the case where a sweeper that
acked out of offset order committed past a signal it had not stored, and lost it in the crash."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
import pytest

from tests.drills.conftest import Drill, PrivateStack, running
from tests.drills.helpers import Poster, assert_ready, assert_swept_exactly_once
from tests.integration.helpers import allow_messages_sql, refuse_messages_sql

pytestmark = [pytest.mark.drills, pytest.mark.timeout(300)]

SESSION_TIMEOUT_SECONDS = 6  # the broker's minimum: a SIGKILLed sweeper's partitions wait this long
SWEEPERS = ("sweeper:1", "sweeper:2", "sweeper:3")
REFUSE_QUIET = refuse_messages_sql("drill_refuse_quiet", "NEW.user_id LIKE 'g-%'")
ALLOW_QUIET = allow_messages_sql("drill_refuse_quiet")
REFUSED_SECONDS = 3.5  # long enough for a few offset commits while the quiet windows wait


@pytest.fixture
async def group(private_stack: PrivateStack, tmp_path: Path) -> AsyncIterator[Drill]:
    """Ingest and three sweepers in one consumer group (no curator: the backlog stays as written)."""
    extra = {"MEMWRIGHT_SWEEPER_SESSION_TIMEOUT_SECONDS": str(SESSION_TIMEOUT_SECONDS)}
    async with running(private_stack, tmp_path, ("ingest", *SWEEPERS), extra) as drill:
        yield drill


async def longest_wait(drill: Drill, users: list[str], since: float, until: float) -> float:
    """The longest a signal accepted between two wall-clock times waited to be swept, in seconds."""
    wait = await drill.pool.fetchval(
        """SELECT max(extract(epoch FROM swept_at - accepted_at)) FROM messages
           WHERE user_id = ANY($1::text[]) AND accepted_at BETWEEN to_timestamp($2) AND to_timestamp($3)""",
        users,
        since,
        until,
    )
    return round(float(wait or 0.0), 1)


async def replays(drill: Drill, names: list[str]) -> int:
    """Signals the running sweepers found already stored (delivered again after a rebalance)."""
    total = 0.0
    async with aiohttp.ClientSession() as http:
        for name in names:
            async with http.get(drill.procs.ops_url(name) + "/metrics") as r:
                for line in (await r.text()).splitlines():
                    if line.startswith("memwright_sweeper_signals_duplicate_total "):
                        total += float(line.split()[1])
    return int(total)


async def test_sweepers_joining_and_dying_under_load_sweep_every_acknowledged_signal_once(group: Drill) -> None:
    quiet = [f"g-{i}" for i in range(60)]
    chatty = [f"c-{i}" for i in range(6)]
    users = [u for i, q in enumerate(quiet) for u in (q, chatty[i % len(chatty)])]  # a chatty user every other post
    poster = Poster(group, users, rate=40)
    stop = asyncio.Event()
    posting = asyncio.create_task(poster.run(stop))
    try:
        await asyncio.sleep(6)
        joined = time.time()
        group.procs.start("sweeper:4", extra_env={"MEMWRIGHT_SWEEPER_DATA_DIR": str(group.procs.log_dir / "s4")})
        await asyncio.sleep(8)
        refused = time.time()
        await group.pool.execute(REFUSE_QUIET)  # the quiet users' windows wait for a retry...
        try:
            await asyncio.sleep(REFUSED_SECONDS)
            killed = time.time()
            group.procs.kill("sweeper:1")  # ...when this one is SIGKILLed: it never leaves the group
        finally:
            await group.pool.execute(ALLOW_QUIET)
        await asyncio.sleep(SESSION_TIMEOUT_SECONDS + 10)
        ended = time.time()
    finally:
        stop.set()
        await posting

    statuses = poster.statuses()
    assert set(statuses) == {202}, f"sweepers coming and going must not fail a request: {statuses}"
    await assert_swept_exactly_once(group.pool, poster)
    # one backlog entry per user, waiting since its oldest signal: a window written again changed nothing
    wrong = await group.pool.fetch(
        """SELECT b.user_id FROM backlog b
           JOIN (SELECT user_id, min(accepted_at) AS oldest FROM messages GROUP BY user_id) m USING (user_id)
           WHERE b.user_id = ANY($1::text[]) AND b.waiting_since <> m.oldest""",
        users,
    )
    assert not wrong, f"backlog entries not waiting since the user's oldest signal: {[r['user_id'] for r in wrong]}"
    assert await group.pool.fetchval("SELECT count(*) FROM backlog WHERE user_id = ANY($1::text[])", users) == len(
        set(poster.acked().values())
    )
    await assert_ready(group)

    steady = await longest_wait(group, users, joined - 4, joined - 1)
    join = await longest_wait(group, users, joined - 1, refused - 1)
    kill = await longest_wait(group, users, killed - 1, ended)
    again = await replays(group, ["sweeper:2", "sweeper:3", "sweeper:4"])
    print(
        f"\nsweeper group drill: {len(poster.acked())} signals acknowledged and swept once; longest wait to be swept: "
        f"steady {steady} s, around the join {join} s, around the SIGKILL {kill} s "
        f"(session timeout {SESSION_TIMEOUT_SECONDS} s, window 1 s, quiet users refused {REFUSED_SECONDS} s before "
        f"the kill); {again} re-delivered signals found stored"
    )
