"""The per-process cache of rendered context blocks: bounded (LRU), one user's block never
another's, an entry used only at the exact memory-set version it was rendered at, and ETags that
depend on the user and the version alone."""

from __future__ import annotations

import asyncio
import contextlib
import json
import random
from collections.abc import AsyncIterator
from typing import Any

import pytest
from memwright.services.api import context
from memwright.services.api.context_cache import ContextCache, VersionChecks, etag, not_modified, render
from memwright.settings import ApiSettings, SettingsError

PREVIEW = {"id": "m1", "preview": "Always answer in metric units", "author": "agent", "kind": "preference"}


def test_the_cache_holds_at_most_its_capacity_and_drops_the_least_recently_used() -> None:
    cache = ContextCache(2)
    for user in ("alice", "bob"):
        cache.put(render(user, 1, []))
    assert cache.get("alice", 1) is not None  # alice is now the most recently used
    cache.put(render("carol", 1, []))
    assert len(cache) == 2
    assert cache.get("bob", 1) is None
    assert cache.get("alice", 1) is not None and cache.get("carol", 1) is not None


def test_an_entry_is_used_only_at_its_own_version_and_an_older_one_never_replaces_it() -> None:
    cache = ContextCache(8)
    cache.put(render("alice", 7, [PREVIEW]))
    assert cache.get("alice", 7) is not None
    assert cache.get("alice", 8) is None and cache.get("alice", 6) is None
    cache.put(render("alice", 5, []))  # a slow reader that read an older version
    assert cache.get("alice", 7) is not None and cache.get("alice", 5) is None


def test_one_users_block_is_never_served_for_another() -> None:
    cache = ContextCache(8)
    cache.put(render("alice", 3, [PREVIEW]))
    assert cache.get("bob", 3) is None
    assert etag("alice", 3) != etag("bob", 3)  # alice's ETag never gets a 304 on bob's context
    assert not_modified(etag("alice", 3), etag("bob", 3)) is False


def test_the_cache_size_is_a_setting_and_a_negative_one_is_refused() -> None:
    env = {"MEMWRIGHT_PG_DSN": "x", "MEMWRIGHT_JWT_SECRET": "k" * 40}
    assert ApiSettings.from_env(env).context_cache_users == 2048
    assert ApiSettings.from_env({**env, "MEMWRIGHT_CONTEXT_CACHE_USERS": "0"}).context_cache_users == 0
    with pytest.raises(SettingsError, match="MEMWRIGHT_CONTEXT_CACHE_USERS"):
        ApiSettings.from_env({**env, "MEMWRIGHT_CONTEXT_CACHE_USERS": "-1"})


def test_a_zero_capacity_cache_holds_nothing() -> None:
    cache = ContextCache(0)
    cache.put(render("alice", 1, []))
    assert len(cache) == 0 and not cache.holds("alice")


def test_the_etag_moves_with_the_version_and_the_block_format(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    first = etag("alice", 1)
    assert etag("alice", 2) != first and etag("alice", 1) == first
    monkeypatch.setattr(context, "BLOCK_FORMAT", context.BLOCK_FORMAT + 1)
    assert etag("alice", 1) != first


def test_if_none_match_accepts_lists_weak_tags_and_star() -> None:
    current = etag("alice", 4)
    assert not_modified(current, current)
    assert not_modified(f'"other", W/{current}', current)
    assert not_modified("*", current)
    assert not not_modified(None, current) and not not_modified('"other"', current)


def test_the_rendered_answer_carries_the_block_its_token_estimate_and_how_to_fetch() -> None:
    entry = render("alice", 9, [PREVIEW])
    document = json.loads(entry.json_body)
    assert document["block"] == context.render_block("alice", [PREVIEW]) == entry.text_body.decode()
    assert document["token_estimate"] == context.estimate_tokens(document["block"]) == entry.token_estimate
    assert document["memory_count"] == 1 and document["user_id"] == "alice"
    assert document["fetch"]["memory"] == "/v1/users/alice/memories/{memory_id}"
    response = entry.response("text")
    assert response.headers["ETag"] == etag("alice", 9) and response.content_type == "text/plain"
    assert entry.response("json").headers["X-Token-Estimate"] == str(entry.token_estimate)


# ---- the coalesced version check -------------------------------------------------------


class FakeConnection:
    def __init__(self, pool: FakePool) -> None:
        self.pool = pool

    async def fetch(self, sql: str, user_ids: list[str]) -> list[dict[str, Any]]:
        self.pool.statements.append(list(user_ids))
        await asyncio.sleep(self.pool.rng.uniform(0, self.pool.latency_s))
        if self.pool.fail_next:
            self.pool.fail_next = False
            raise ConnectionError("PostgreSQL went away")
        return [{"user_id": u, "version": self.pool.versions[u]} for u in user_ids if u in self.pool.versions]


class FakePool:
    """Stands in for asyncpg.Pool: counts statements and connections taken out."""

    def __init__(self, versions: dict[str, int], latency_s: float = 0.0) -> None:
        self.versions = versions
        self.latency_s = latency_s
        self.rng = random.Random(13)
        self.statements: list[list[str]] = []
        self.acquired = 0
        self.fail_next = False

    @contextlib.asynccontextmanager
    async def acquire(self) -> AsyncIterator[FakeConnection]:
        self.acquired += 1
        await asyncio.sleep(0)
        yield FakeConnection(self)
        await asyncio.sleep(self.rng.uniform(0, self.latency_s))  # the reset query on release


async def test_checks_that_arrive_together_are_one_statement_each_with_its_own_users_version() -> None:
    pool = FakePool({"alice": 7, "bob": 9})
    checks = VersionChecks(pool)  # type: ignore[arg-type]
    got = await asyncio.gather(*(checks.version(u) for u in ("alice", "bob", "alice", "nobody")))
    assert got == [7, 9, 7, 0]
    assert pool.statements == [["alice", "bob", "nobody"]]


async def test_no_check_is_ever_left_waiting_and_busy_readers_keep_their_connection() -> None:
    users = {f"u{i}": i + 1 for i in range(40)}
    pool = FakePool(users, latency_s=0.002)
    checks = VersionChecks(pool, readers=2)  # type: ignore[arg-type]
    rng = random.Random(7)

    async def one() -> tuple[str, int]:
        await asyncio.sleep(rng.uniform(0, 0.004))
        user = f"u{rng.randrange(45)}"  # some users have no version row: 0
        return user, await checks.version(user)

    # bursts, each ending in quiet: a check that comes while every reader is giving its connection
    # back must still be read (the last ones of a burst have no later check to start a reader)
    for _ in range(100):
        answers = await asyncio.wait_for(asyncio.gather(*(one() for _ in range(rng.randrange(1, 40)))), 5)
        assert all(version == users.get(user, 0) for user, version in answers)
    answers = await asyncio.wait_for(asyncio.gather(*(one() for _ in range(1000))), 10)
    assert all(version == users.get(user, 0) for user, version in answers)
    assert len(pool.statements) < 0.5 * (1000 + 100 * 20), "under load a statement answers several checks"
    assert pool.acquired < len(pool.statements), "a busy reader keeps its connection between batches"


async def test_a_failed_read_fails_the_checks_it_held_and_the_next_check_reads_again() -> None:
    pool = FakePool({"alice": 3})
    checks = VersionChecks(pool)  # type: ignore[arg-type]
    pool.fail_next = True
    failed = await asyncio.gather(checks.version("alice"), checks.version("bob"), return_exceptions=True)
    assert all(isinstance(x, ConnectionError) for x in failed)
    assert await asyncio.wait_for(checks.version("alice"), 5) == 3
