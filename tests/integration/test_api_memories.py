"""The memory API on the real PostgreSQL (in-process aiohttp): reads with receipts and ETags,
the context block, user-written memories, a user deleting an agent memory, export, erasure
with content-free tombstones, and the limits (400, 409, 412, 413, 429)."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from typing import Any

import asyncpg
import pytest
from aiohttp.test_utils import TestClient, TestServer
from memwright.agent.rules import RulesPolicy
from memwright.agent.run import Fenced, commit_run, load_snapshot, run_agent, start_run
from memwright.agent.tools import MemoryTools
from memwright.auth import mint
from memwright.services.api.app import build_app
from memwright.services.api.context import estimate_tokens
from memwright.settings import ApiSettings
from memwright.store import leases
from memwright.store.sweeps import write_window

from tests.conftest import JWT_SECRET
from tests.integration.helpers import sig, sweep

SETTINGS = ApiSettings(jwt_secret=JWT_SECRET, pg_dsn="unused", rate_limit_per_s=10_000, rate_limit_burst=10_000)


class Api:
    def __init__(self, client: TestClient, settings: ApiSettings) -> None:
        self.client = client
        self.settings = settings

    def auth(self, user: str, *scopes: str) -> dict[str, str]:
        token = mint(self.settings, user, list(scopes or ("memories:read", "memories:write")))
        return {"Authorization": f"Bearer {token}"}

    async def call(
        self,
        method: str,
        path: str,
        user: str = "alice",
        body: Any = None,
        headers: dict[str, str] | None = None,
        expect: int = 200,
    ) -> Any:
        async with self.client.request(method, path, json=body, headers={**self.auth(user), **(headers or {})}) as r:
            payload = await r.json() if r.content_type == "application/json" else await r.text()
            assert r.status == expect, (method, path, r.status, payload)
            return payload


async def curate(db: asyncpg.Pool) -> None:
    """One run of the rules policy for the longest-waiting user, committed."""
    async with db.acquire() as conn:
        lease = await leases.claim_next(conn, "test", 60)
        assert lease is not None
        try:
            await run_agent(conn, lease, RulesPolicy(), await start_run(conn, lease, "rules"))
        finally:
            await leases.release(conn, lease)


async def agent_memory(db: asyncpg.Pool, user: str, text: str = "Always answer in metric units") -> tuple[str, str]:
    [message_id] = await sweep(db, user, text)
    await curate(db)
    memory_id = await db.fetchval("SELECT memory_id::text FROM memories WHERE user_id = $1 AND author = 'agent'", user)
    assert memory_id, "the rules policy should have remembered the explicit preference"
    return memory_id, message_id


# ---- reads -----------------------------------------------------------------------------


async def test_previews_poll_cheaply_with_etag_and_a_change_moves_the_etag(api: Api, db: asyncpg.Pool) -> None:
    await agent_memory(db, "alice")
    async with api.client.get("/v1/users/alice/memories", headers=api.auth("alice", "memories:read")) as r:
        assert r.status == 200
        etag, first = r.headers["ETag"], await r.json()
    [preview] = first["memories"]
    assert preview["author"] == "agent" and preview["version"] == 1 and len(preview["preview"]) <= 120
    headers = {**api.auth("alice", "memories:read"), "If-None-Match": etag}
    async with api.client.get("/v1/users/alice/memories", headers=headers) as r:
        assert r.status == 304 and await r.read() == b""
    await api.call("POST", "/v1/users/alice/memories", body={"text": "x" * 300}, expect=201)
    async with api.client.get("/v1/users/alice/memories", headers=headers) as r:
        assert r.status == 200 and r.headers["ETag"] != etag
        items = (await r.json())["memories"]
    assert [i["author"] for i in items] == ["agent", "user"]  # stable order: oldest first
    assert items[1]["preview"] == "x" * 119 + "…"


async def test_a_memory_comes_with_its_receipts_and_its_history(api: Api, db: asyncpg.Pool) -> None:
    memory_id, message_id = await agent_memory(db, "alice")
    detail = await api.call("GET", f"/v1/users/alice/memories/{memory_id}")
    assert "metric units" in detail["text"] and detail["author"] == "agent"
    assert [(r["message_id"], r["conversation_id"], r["text"]) for r in detail["receipts"]] == [
        (message_id, "c1", "Always answer in metric units")
    ]
    history = (await api.call("GET", f"/v1/users/alice/memories/{memory_id}/history"))["history"]
    assert [(h["action"], h["actor"], h["evidence"]) for h in history] == [("create", "agent", [message_id])]
    assert history[0]["run_id"] and history[0]["after"]["text"] == detail["text"]
    # another user's memory id is simply not found for this user
    await api.call("GET", f"/v1/users/bob/memories/{memory_id}", user="bob", expect=404)
    await api.call("GET", f"/v1/users/bob/memories/{memory_id}/history", user="bob", expect=404)


async def test_the_context_block_has_every_preview_how_to_fetch_and_a_token_estimate(
    api: Api, db: asyncpg.Pool
) -> None:
    memory_id, _ = await agent_memory(db, "alice")
    mine = await api.call("POST", "/v1/users/alice/memories", body={"text": "I am allergic to peanuts"}, expect=201)
    async with api.client.get("/v1/users/alice/context", headers=api.auth("alice", "memories:read")) as r:
        assert r.status == 200
        ctx, etag = await r.json(), r.headers["ETag"]
        assert int(r.headers["X-Token-Estimate"]) == ctx["token_estimate"]
    block = ctx["block"]
    assert ctx["memory_count"] == 2
    agent_preview = (await api.call("GET", "/v1/users/alice/memories"))["memories"][0]
    assert f"[{memory_id}] (agent, {agent_preview['kind']}) {agent_preview['preview']}" in block
    assert f"[{mine['id']}] (user, preference) I am allergic to peanuts" in block
    assert "GET /v1/users/alice/memories/{memory_id}" in block
    assert ctx["fetch"]["memory"] == "/v1/users/alice/memories/{memory_id}"
    assert ctx["token_estimate"] == estimate_tokens(block) > len(block) // 8
    assert "o200k_base" in ctx["token_estimate_method"]
    text = await api.call("GET", "/v1/users/alice/context?format=text")
    assert text == block
    headers = {**api.auth("alice", "memories:read"), "If-None-Match": etag}
    async with api.client.get("/v1/users/alice/context", headers=headers) as r:
        assert r.status == 304
    empty = await api.call("GET", "/v1/users/nobody/context", user="nobody")
    assert empty["memory_count"] == 0 and "Nothing is remembered" in empty["block"]
    await api.call("GET", "/v1/users/alice/context?format=xml", expect=400)


async def test_hypotheses_are_readable_and_read_only(api: Api, db: asyncpg.Pool) -> None:
    await sweep(db, "alice", "I'm a vegetarian, so which restaurants would work?")
    await curate(db)
    hypotheses = (await api.call("GET", "/v1/users/alice/hypotheses"))["hypotheses"]
    assert len(hypotheses) == 1 and "vegetarian" in hypotheses[0]["statement"].lower()
    assert hypotheses[0]["count"] == 1 and hypotheses[0]["message_ids"]
    for method in ("POST", "PATCH", "DELETE", "PUT"):
        await api.call(method, "/v1/users/alice/hypotheses", body={}, expect=405)


# ---- writes by the user ----------------------------------------------------------------


async def test_a_user_written_memory_is_audited_indexed_and_the_agent_cannot_change_it(
    api: Api, db: asyncpg.Pool
) -> None:
    async with api.client.post(
        "/v1/users/alice/memories", json={"text": "  I am allergic to nuts ", "kind": "fact"}, headers=api.auth("alice")
    ) as r:
        assert r.status == 201
        created = await r.json()
        assert r.headers["Location"] == f"/v1/users/alice/memories/{created['id']}" and r.headers["ETag"] == '"1"'
    assert (created["text"], created["author"], created["kind"], created["version"]) == (
        "I am allergic to nuts",
        "user",
        "fact",
        1,
    )
    mid = uuid.UUID(created["id"])
    audit = await db.fetch("SELECT action, actor, principal, after FROM memory_audit WHERE memory_id = $1", mid)
    assert [(a["action"], a["actor"], a["principal"], a["after"]["text"]) for a in audit] == [
        ("create", "user", "alice", "I am allergic to nuts")
    ]
    assert await db.fetchval("SELECT count(*) FROM index_outbox WHERE memory_id = $1", mid) == 1
    # the agent's next run sees it and cannot change it (tool layer), nor can its transaction (database)
    await sweep(db, "alice", "Always answer in metric units")
    async with db.acquire() as conn:
        lease = await leases.claim_next(conn, "test", 60)
        assert lease is not None
        snapshot = await load_snapshot(conn, lease)
        tools = MemoryTools("alice", snapshot.memories, snapshot.shown, lease.budget, snapshot.working)
        assert "written by the user" in tools.delete_memory(str(mid), "stale")
        async with conn.transaction():
            await conn.execute("SET LOCAL memwright.actor = 'agent'")
            with pytest.raises(asyncpg.InsufficientPrivilegeError):
                await conn.execute("DELETE FROM memories WHERE memory_id = $1", mid)
        await leases.release(conn, lease)


async def test_patch_edits_only_the_users_own_memories_and_honours_if_match(api: Api, db: asyncpg.Pool) -> None:
    agent_id, _ = await agent_memory(db, "alice")
    mine = await api.call("POST", "/v1/users/alice/memories", body={"text": "I like tea"}, expect=201)
    path = f"/v1/users/alice/memories/{mine['id']}"
    edited = await api.call(
        "PATCH", path, body={"text": "I like green tea", "reason": "more precise"}, headers={"If-Match": '"1"'}
    )
    assert (edited["text"], edited["version"], edited["kind"]) == ("I like green tea", 2, "preference")
    await api.call("PATCH", path, body={"text": "I like black tea"}, headers={"If-Match": '"1"'}, expect=412)
    assert (await api.call("PATCH", path, body={"kind": "taste"}))["version"] == 3
    history = (await api.call("GET", path + "/history"))["history"]
    assert [(h["action"], h["reason"]) for h in history] == [
        ("create", "written by the user"),
        ("update", "more precise"),
        ("update", "edited by the user"),
    ]
    assert history[1]["before"]["text"] == "I like tea" and history[1]["after"]["text"] == "I like green tea"
    assert await db.fetchval("SELECT count(*) FROM index_outbox WHERE memory_id = $1", uuid.UUID(mine["id"])) == 3
    refused = await api.call("PATCH", f"/v1/users/alice/memories/{agent_id}", body={"text": "x"}, expect=409)
    assert "written by the agent" in refused["error"]
    await api.call("PATCH", f"/v1/users/alice/memories/{uuid.uuid4()}", body={"text": "x"}, expect=404)


async def test_a_user_may_delete_an_agent_memory_and_the_audit_trail_says_who(api: Api, db: asyncpg.Pool) -> None:
    memory_id, message_id = await agent_memory(db, "alice")
    outbox_before = await db.fetchval("SELECT count(*) FROM index_outbox WHERE memory_id = $1::uuid", memory_id)
    deleted = await api.call("DELETE", f"/v1/users/alice/memories/{memory_id}?reason=no%20longer%20true")
    assert deleted == {"id": memory_id, "deleted": True, "author": "agent", "version": 1}
    await api.call("GET", f"/v1/users/alice/memories/{memory_id}", expect=404)
    history = (await api.call("GET", f"/v1/users/alice/memories/{memory_id}/history"))["history"]
    assert [(h["action"], h["actor"], h["principal"], h["reason"]) for h in history][1:] == [
        ("delete", "user", "alice", "no longer true")
    ]
    assert "metric units" in history[1]["before"]["text"]
    outbox_after = await db.fetchval("SELECT count(*) FROM index_outbox WHERE memory_id = $1::uuid", memory_id)
    assert outbox_after == outbox_before + 1
    # receipts are permanent: the evidence link stays
    assert (
        await db.fetchval("SELECT message_id FROM memory_evidence WHERE memory_id = $1::uuid", memory_id) == message_id
    )


async def test_the_users_own_memories_are_limited_with_a_clear_409(db: asyncpg.Pool) -> None:
    settings = ApiSettings(jwt_secret=JWT_SECRET, pg_dsn="unused", user_memory_limit=2)
    async with TestClient(TestServer(build_app(settings, db))) as client:
        api = Api(client, settings)
        for i in range(2):
            await api.call("POST", "/v1/users/alice/memories", body={"text": f"fact {i}"}, expect=201)
        refused = await api.call("POST", "/v1/users/alice/memories", body={"text": "one more"}, expect=409)
        assert "limit" in refused["error"]


# ---- limits ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("method", "path", "body", "headers", "expected"),
    [
        ("POST", "/v1/users/alice/memories", "not json", {}, "not JSON"),
        ("POST", "/v1/users/alice/memories", ["a list"], {}, "JSON object"),
        ("POST", "/v1/users/alice/memories", {}, {}, "text is required"),
        ("POST", "/v1/users/alice/memories", {"text": "   "}, {}, "must not be empty"),
        ("POST", "/v1/users/alice/memories", {"text": "x" * 501}, {}, "at most 500"),
        ("POST", "/v1/users/alice/memories", {"text": 42}, {}, "must be a string"),
        ("POST", "/v1/users/alice/memories", {"text": "a\x00b"}, {}, "NUL"),
        ("POST", "/v1/users/alice/memories", {"text": "\ud800"}, {}, "surrogate"),
        ("POST", "/v1/users/alice/memories", {"text": "ok", "kind": "Not A Kind"}, {}, "kind must be"),
        ("POST", "/v1/users/alice/memories", {"text": "ok", "author": "agent"}, {}, "unknown field(s) author"),
        ("PATCH", "/v1/users/alice/memories/not-a-uuid", {"text": "ok"}, {}, "memory_id must be a UUID"),
        ("PATCH", f"/v1/users/alice/memories/{uuid.UUID(int=1)}", {"reason": "r"}, {}, "send text, kind or both"),
        ("DELETE", f"/v1/users/alice/memories/{uuid.UUID(int=1)}", None, {"If-Match": "yesterday"}, "If-Match"),
        ("GET", "/v1/users/al%20ice/memories", None, {}, "user_id must be"),
        ("GET", "/v1/users/" + "a" * 129 + "/memories", None, {}, "user_id must be"),
        ("GET", "/v1/users/alice%0A/memories", None, {}, "user_id must be"),
        ("GET", "/v1/users/service:chat/memories", None, {}, "must not start with 'service:'"),
        ("POST", "/v1/users/alice/memories", '{"text": ' + "1" * 4301 + "}", {}, "body is not JSON"),
        ("POST", "/v1/users/alice/memories", '{"text": "x", "kind": ' + "1" * 4301 + "}", {}, "body is not JSON"),
        ("PATCH", f"/v1/users/alice/memories/{uuid.uuid4()}", '{"text": ' + "1" * 4301 + "}", {}, "not JSON"),
        ("PATCH", f"/v1/users/alice/memories/{uuid.uuid4()}", '{"kind": ' + "1" * 4301 + "}", {}, "not JSON"),
    ],
)
async def test_bad_input_is_a_400_that_says_what_to_fix(
    api: Api, method: str, path: str, body: Any, headers: dict[str, str], expected: str
) -> None:
    raw = body if isinstance(body, str) else None
    async with api.client.request(
        method,
        path,
        json=None if raw is not None else body,
        data=raw,
        headers={**api.auth("service:tests", "admin"), "Content-Type": "application/json", **headers},
    ) as r:
        answer = await r.json()
        assert r.status == 400, answer
    assert expected in answer["error"]


async def test_a_body_over_the_limit_is_a_413(api: Api) -> None:
    big = {"text": "x" * (SETTINGS.max_body_bytes + 10)}
    answer = await api.call("POST", "/v1/users/alice/memories", body=big, expect=413)
    assert str(SETTINGS.max_body_bytes) in answer["error"]

    async def chunks() -> AsyncIterator[bytes]:  # no Content-Length: the limit applies while reading
        for _ in range(40):
            yield b"x" * 1024

    async with api.client.post("/v1/users/alice/memories", data=chunks(), headers=api.auth("alice")) as r:
        assert r.status == 413


async def test_each_user_has_one_rate_limit_whatever_its_tokens_and_429_says_when_to_retry(db: asyncpg.Pool) -> None:
    settings = ApiSettings(jwt_secret=JWT_SECRET, pg_dsn="unused", rate_limit_per_s=0.5, rate_limit_burst=3)
    async with TestClient(TestServer(build_app(settings, db))) as client:
        api = Api(client, settings)
        first = api.auth("alice", "memories:read")
        statuses = []
        for _ in range(4):
            async with client.get("/v1/users/alice/memories", headers=first) as r:
                statuses.append(r.status)
                retry = r.headers.get("Retry-After")
        assert statuses == [200, 200, 200, 429]
        assert retry == "2"  # one request refills in 1 / 0.5 s
        respelled = {"Authorization": first["Authorization"].replace("Bearer ", "Bearer     ")}
        second = api.auth("alice", "memories:read", "memories:write")
        for headers in (respelled, second):  # a new spelling of the header or another token: the same user
            async with client.get("/v1/users/alice/memories", headers=headers) as r:
                assert r.status == 429 and "for this user" in (await r.json())["error"]
        async with client.get("/v1/users/bob/memories", headers=api.auth("bob", "memories:read")) as r:
            assert r.status == 200  # another user has their own bucket


async def test_a_service_serving_many_users_is_limited_per_user_not_as_one_token(db: asyncpg.Pool) -> None:
    settings = ApiSettings(jwt_secret=JWT_SECRET, pg_dsn="unused", rate_limit_per_s=0.5, rate_limit_burst=3)
    service = {"Authorization": "Bearer " + mint(settings, "service:chat", ["memories:read"])}
    async with TestClient(TestServer(build_app(settings, db))) as client:
        statuses = []
        for i in range(40):  # 40 users, once each: far beyond one token's 3, within each user's
            async with client.get(f"/v1/users/user{i}/context", headers=service) as r:
                statuses.append(r.status)
        assert statuses == [200] * 40


# ---- export and erasure ----------------------------------------------------------------


async def _everything(db: asyncpg.Pool, user: str) -> dict[str, int]:
    counts = {}
    for table in ("memories", "messages", "memory_evidence", "agent_state", "backlog", "curation_runs"):
        counts[table] = await db.fetchval(f"SELECT count(*) FROM {table} WHERE user_id = $1", user)
    return counts


async def test_export_holds_everything_about_the_user_and_nothing_else(api: Api, db: asyncpg.Pool) -> None:
    await agent_memory(db, "bob", "Never use emoji")
    memory_id, message_id = await agent_memory(db, "alice")
    await sweep(db, "alice", "I'm a vegetarian", conv="c2")
    await api.call("POST", "/v1/users/alice/memories", body={"text": "I am allergic to nuts"}, expect=201)
    doc = await api.call("GET", "/v1/users/alice/export")
    assert doc["user_id"] == "alice"
    assert {m["id"] for m in doc["memories"]} >= {memory_id}
    assert [m["author"] for m in doc["memories"]] == ["agent", "user"]
    assert doc["memories"][0]["evidence"] == [message_id]
    assert [m["text"] for m in doc["messages"]] == ["Always answer in metric units", "I'm a vegetarian"]
    assert [a["action"] for a in doc["audit"]] == ["create", "create"]
    assert doc["working_memory"]["transcript"] and doc["backlog"]["waiting_since"]
    assert [r["status"] for r in doc["runs"]] == ["committed"]
    assert "bob" not in str(doc) and "emoji" not in str(doc)
    assert (await api.call("GET", "/v1/users/bob/export", user="alice", expect=403))["error"]


async def test_erasure_removes_everything_keeps_tombstones_and_a_later_signal_starts_fresh(
    api: Api, db: asyncpg.Pool
) -> None:
    await agent_memory(db, "bob", "Never use emoji")
    memory_id, _ = await agent_memory(db, "alice")
    await sweep(db, "alice", "I'm a vegetarian", conv="c2")
    await curate(db)
    assert (await api.call("GET", "/v1/users/alice/hypotheses"))["hypotheses"], "a hypothesis to erase"
    mine = await api.call("POST", "/v1/users/alice/memories", body={"text": "I am allergic to nuts"}, expect=201)
    await api.call("DELETE", f"/v1/users/alice/memories/{mine['id']}")
    kept = await api.call("POST", "/v1/users/alice/memories", body={"text": "My cat is Miso"}, expect=201)
    before_erasure = datetime.now(UTC)
    await sweep(db, "alice", "What is the weather?", conv="c3")  # waiting in the backlog
    bob_before = await _everything(db, "bob")

    record = await api.call("DELETE", "/v1/users/alice")
    assert record["requested_by"] == "alice" and record["erasure_id"]
    assert record["counts"]["memories"] == 2 and record["counts"]["messages"] == 3
    assert await _everything(db, "alice") == dict.fromkeys(bob_before, 0)
    assert await _everything(db, "bob") == bob_before
    # vectors: one outbox row per memory id the user ever had, so the indexer deletes each point
    queued = {
        r["memory_id"] for r in await db.fetch("SELECT memory_id::text FROM index_outbox WHERE user_id = 'alice'")
    }
    assert queued == {memory_id, mine["id"], kept["id"]}
    # the audit trail keeps content-free tombstones
    audit = await db.fetch("SELECT * FROM memory_audit WHERE user_id = 'alice' ORDER BY audit_id")
    assert all(a["erased_at"] and a["before"] is None and a["after"] is None for a in audit)
    assert all(a["evidence"] == [] and a["reason"] == "" for a in audit)
    assert [a["action"] for a in audit if a["action"] == "erase"] == ["erase", "erase"]
    assert "nuts" not in str([dict(a) for a in audit]) and "metric" not in str([dict(a) for a in audit])
    history = (await api.call("GET", f"/v1/users/alice/memories/{memory_id}/history"))["history"]
    assert [h["action"] for h in history] == ["create", "erase"] and all(h["erased_at"] for h in history)
    after = await api.call("GET", "/v1/users/alice/export")
    assert after["memories"] == after["messages"] == after["runs"] == [] and after["working_memory"] is None
    assert [e["requested_by"] for e in after["erasures"]] == ["alice"]
    assert (await api.call("GET", "/v1/users/alice/hypotheses"))["hypotheses"] == []

    # a signal accepted before the erasure (still in a sweep window, or replayed) never comes back
    async with db.acquire() as conn:
        assert await write_window(conn, "alice", [sig("alice", "late", "I'm a vegetarian", at=before_erasure)]) == 0
    # a later signal starts fresh
    await sweep(db, "alice", "Never use emoji in replies.", conv="c9")
    await curate(db)
    previews = (await api.call("GET", "/v1/users/alice/memories"))["memories"]
    assert len(previews) == 1 and "emoji" in previews[0]["preview"]
    assert (await api.call("GET", "/v1/users/alice/hypotheses"))["hypotheses"] == []


async def test_the_audit_trail_can_be_scrubbed_only_by_an_erasure_and_only_of_content(
    api: Api, db: asyncpg.Pool
) -> None:
    await agent_memory(db, "alice")
    scrub = (
        "UPDATE memory_audit SET before = NULL, after = NULL, evidence = '{}', reason = '', erased_at = now() "
        "WHERE user_id = 'alice'"
    )
    with pytest.raises(asyncpg.InsufficientPrivilegeError):  # no erasure recorded in this transaction
        await db.execute(scrub)
    async with db.acquire() as conn:
        # an erasure of ANOTHER user does not open alice's rows
        async with conn.transaction():
            await conn.execute("INSERT INTO user_erasures (user_id, requested_by) VALUES ('bob', 'test')")
            with pytest.raises(asyncpg.InsufficientPrivilegeError):
                await conn.execute(scrub)
        for rewrite in (
            "UPDATE memory_audit SET reason = 'rewritten' WHERE user_id = 'alice'",
            "UPDATE memory_audit SET before = NULL, after = NULL, evidence = '{}', reason = '', erased_at = now(), "
            "action = 'delete' WHERE user_id = 'alice'",
            "UPDATE memory_audit SET after = NULL, erased_at = now() WHERE user_id = 'alice'",
            "DELETE FROM memory_audit WHERE user_id = 'alice'",
        ):
            async with conn.transaction():  # even inside alice's erasure: only the exact scrub passes
                await conn.execute("INSERT INTO user_erasures (user_id, requested_by) VALUES ('alice', 'test')")
                with pytest.raises(asyncpg.InsufficientPrivilegeError):
                    await conn.execute(rewrite)
    await api.call("DELETE", "/v1/users/alice")
    with pytest.raises(asyncpg.InsufficientPrivilegeError):  # a tombstone stays a tombstone
        await db.execute("UPDATE memory_audit SET reason = 'back' WHERE user_id = 'alice'")
    for statement in ("DELETE FROM user_erasures", "UPDATE user_erasures SET requested_by = 'nobody'"):
        with pytest.raises(asyncpg.InsufficientPrivilegeError):  # the erasure record is append-only too
            await db.execute(statement)


async def test_erasure_fences_a_run_in_flight_which_then_commits_nothing(api: Api, db: asyncpg.Pool) -> None:
    await sweep(db, "alice", "Always answer in metric units")
    async with db.acquire() as conn:
        lease = await leases.claim_next(conn, "test", 60)
        assert lease is not None
        run_id = await start_run(conn, lease, "rules")
        snapshot = await load_snapshot(conn, lease)
        tools = MemoryTools("alice", snapshot.memories, snapshot.shown, lease.budget, snapshot.working)
        await RulesPolicy().run(tools, snapshot.new_messages)
        assert tools.changes

        await api.call("DELETE", "/v1/users/alice")  # while the run works

        with pytest.raises(Fenced):
            await commit_run(conn, lease, run_id, tools, snapshot)
        await leases.release(conn, lease)
    assert await _everything(db, "alice") == dict.fromkeys(await _everything(db, "alice"), 0)
    assert await db.fetchval("SELECT count(*) FROM agents WHERE user_id = 'alice' AND lease_owner IS NULL") == 1


async def test_a_service_needs_admin_to_export_or_erase_and_a_user_erases_only_themself(api: Api) -> None:
    service = {"Authorization": "Bearer " + mint(SETTINGS, "service:chat", ["memories:read", "memories:write"])}
    for method, path in (("GET", "/v1/users/alice/export"), ("DELETE", "/v1/users/alice")):
        async with api.client.request(method, path, headers=service) as r:
            assert r.status == 403 and "admin" in (await r.json())["error"]
    await api.call("DELETE", "/v1/users/bob", user="alice", expect=403)
    admin = {"Authorization": "Bearer " + mint(SETTINGS, "service:privacy", ["admin"])}
    async with api.client.delete("/v1/users/alice", headers=admin) as r:
        assert r.status == 200 and (await r.json())["requested_by"] == "service:privacy"


async def test_unknown_query_parameters_are_refused_with_what_the_route_accepts(api: Api) -> None:
    answer = await api.call("GET", "/v1/users/alice/context?format=text&verbose=1", expect=400)
    assert answer["error"] == "unknown query parameter(s) 'verbose'; this route accepts: format"
    answer = await api.call("GET", "/v1/users/alice/memories?page=2", expect=400)
    assert answer["error"].endswith("this route accepts: none")
