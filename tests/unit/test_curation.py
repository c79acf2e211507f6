"""The Curator's heartbeat and its reaction to a lost liveness connection, without PostgreSQL.

A fake liveness connection stands in for memwright.store.leases.Liveness; the real one, and
curator processes under kill -9, SIGSTOP and pg_terminate_backend, are tested in
tests/integration (test_leases.py, test_curator_processes.py).
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from memwright.curation import Curator, Run
from memwright.settings import CuratorSettings, SettingsError
from memwright.store.leases import Lease

LEASE = 0.3


class FakeLiveness:
    def __init__(self, pid: int = 100) -> None:
        self.pid: int | None = pid
        self.on_lost: Any = None
        self.renewals: list[list[tuple[str, int]]] = []
        self.keep: set[tuple[str, int]] | None = None  # what a renewal returns; None: everything held
        self.fail: Exception | None = None
        self.dropped = 0

    async def renew(self, owner: str, held: list[Lease], lease_seconds: float, timeout: float) -> set[tuple[str, int]]:
        self.renewals.append(sorted((x.user_id, x.epoch) for x in held))
        if self.fail is not None:
            raise self.fail
        mine = {(x.user_id, x.epoch) for x in held if x.pid == self.pid}
        return mine if self.keep is None else mine & self.keep

    def drop(self) -> None:
        self.dropped += 1
        lost, self.pid = self.pid, None
        if self.on_lost is not None and lost is not None:
            self.on_lost(lost)


def curator(live: FakeLiveness) -> Curator:
    settings = CuratorSettings(pg_dsn="postgresql://unused", lease_seconds=LEASE)
    return Curator(settings, pool=None, liveness=live, policy=None, worker="c1")  # type: ignore[arg-type]


def claimed(c: Curator, user: str, epoch: int = 1, pid: int = 100) -> Run:
    run = Run(Lease(user, "c1", epoch, 0, 40, pid))
    c.runs[(user, epoch)] = run
    return run


async def beat(c: Curator, beats: int) -> None:
    task = asyncio.create_task(c.heartbeat())
    await asyncio.sleep(LEASE / 3 * beats + LEASE / 6)
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)


async def test_one_heartbeat_renews_every_run_and_stops_only_those_whose_lease_was_not_renewed() -> None:
    live = FakeLiveness()
    c = curator(live)
    ann, ben, cat = claimed(c, "ann"), claimed(c, "ben", 3), claimed(c, "cat")
    live.keep = {("ann", 1), ("cat", 1)}  # ben's lease was taken over
    await beat(c, 1)
    assert live.renewals == [[("ann", 1), ("ben", 3), ("cat", 1)]]  # one statement for all runs
    assert ben.lease_lost.is_set() and not ann.lease_lost.is_set() and not cat.lease_lost.is_set()


async def test_a_lost_liveness_connection_stops_every_run_it_held_and_no_other() -> None:
    live = FakeLiveness(pid=100)
    c = curator(live)
    old = [claimed(c, u, pid=100) for u in ("ann", "ben")]
    new = claimed(c, "cat", pid=200)  # claimed on the connection made after a loss
    c.liveness_lost(100)
    assert all(r.lease_lost.is_set() for r in old) and not new.lease_lost.is_set()


async def test_a_liveness_connection_that_answers_no_heartbeat_for_a_lease_is_given_up() -> None:
    live = FakeLiveness()
    c = curator(live)
    run = claimed(c, "ann")
    live.fail = TimeoutError()
    await beat(c, 1)  # a failure within a lease length: retried, the run goes on
    assert live.dropped == 0 and not run.lease_lost.is_set()
    await beat(c, 5)
    assert live.dropped == 1 and run.lease_lost.is_set()  # given up: its runs stop


async def test_a_run_released_during_a_heartbeat_is_not_counted_lost() -> None:
    live = FakeLiveness()
    c = curator(live)
    run = claimed(c, "ann")
    live.keep = set()

    async def renew_then_release(*args: Any, **kwargs: Any) -> set[tuple[str, int]]:
        c.runs.pop(("ann", 1))  # the run ended and released its lease while the renewal ran
        return set()

    live.renew = renew_then_release  # type: ignore[method-assign]
    await beat(c, 1)
    assert not run.lease_lost.is_set()


def test_a_curators_pool_is_a_handful_by_default_whatever_its_concurrency() -> None:
    env = {"MEMWRIGHT_PG_DSN": "postgresql://unused", "MEMWRIGHT_CONCURRENCY": "64"}
    assert CuratorSettings.from_env(env).pg_pool_max == 4
    with pytest.raises(SettingsError, match="MEMWRIGHT_PG_POOL_MAX"):
        CuratorSettings.from_env({**env, "MEMWRIGHT_PG_POOL_MAX": "0"})
