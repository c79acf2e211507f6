"""The per-process cache of rendered context blocks: bounded (LRU), one user's block never
another's, an entry used only at the exact memory-set version it was rendered at, and ETags that
depend on the user and the version alone."""

from __future__ import annotations

import json

from memwright.services.api import context
from memwright.services.api.context_cache import ContextCache, etag, not_modified, render

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
