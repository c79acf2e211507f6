"""Route-table security: every route of the api and of ingest, found by walking app.router
(so a route added later is covered without touching this file), must answer
no token -> 401, expired or badly signed -> 401, missing scope -> 403, wrong user -> 403,
and let the right token through. The api runs in-process on the real PostgreSQL."""

from __future__ import annotations

import json
import re
import time
import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import asyncpg
import jwt
import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer
from memwright.auth import SCOPES, mint, new_rsa_keypair
from memwright.services.api import console
from memwright.services.api.app import build_app, route_access
from memwright.services.ingest.app import build_app as build_ingest
from memwright.settings import ApiSettings, AuthSettings, IngestSettings
from memwright.store import user_writes
from memwright.store.sweeps import write_window

from tests.conftest import JWT_SECRET
from tests.integration.helpers import sig

ALICE, MALLORY = "alice-sec", "mallory-sec"
PUBLIC_ROUTES = {"/v1/openapi.json"}  # any valid token, no scope: the API's own description
NON_ADMIN = [s for s in SCOPES if s != "admin"]


def _settings(tmp: Path) -> ApiSettings:
    pem, jwks = new_rsa_keypair("k1")
    (tmp / "jwks.json").write_text(json.dumps(jwks))
    (tmp / "k1.pem").write_bytes(pem)
    return ApiSettings(
        jwt_secret=JWT_SECRET,
        jwt_jwks_file=str(tmp / "jwks.json"),
        pg_dsn="unused",
        rate_limit_per_s=10_000,
        rate_limit_burst=10_000,
    )


def _bad_tokens(settings: AuthSettings, tmp: Path) -> dict[str, str]:
    """Tokens that must be refused with 401 on every route: right user, every scope, but broken."""
    now = int(time.time())
    good = {"sub": ALICE, "scope": " ".join(SCOPES), "iss": "memwright", "aud": "memwright", "exp": now + 600}
    other_pem, _ = new_rsa_keypair("k1")  # same kid, a key that is not in the JWKS
    (tmp / "other.pem").write_bytes(other_pem)
    return {
        "expired": mint(settings, ALICE, list(SCOPES), ttl_seconds=-5),
        "wrong secret": jwt.encode(good, "y" * 40, algorithm="HS256"),
        "wrong audience": jwt.encode({**good, "aud": "elsewhere"}, JWT_SECRET, algorithm="HS256"),
        "wrong issuer": jwt.encode({**good, "iss": "elsewhere"}, JWT_SECRET, algorithm="HS256"),
        "no expiry": jwt.encode({k: v for k, v in good.items() if k != "exp"}, JWT_SECRET, algorithm="HS256"),
        "alg none": jwt.encode(good, None, algorithm="none"),
        "HS512": jwt.encode(good, JWT_SECRET, algorithm="HS512"),
        "RS256 unknown key": jwt.encode(good, other_pem.decode(), algorithm="RS256", headers={"kid": "k1"}),
        "RS256 unknown kid": jwt.encode(good, (tmp / "k1.pem").read_text(), algorithm="RS256", headers={"kid": "k2"}),
        "tampered": _tamper(mint(settings, ALICE, list(SCOPES))),
        "exp as a string": jwt.encode({**good, "exp": str(now + 600)}, JWT_SECRET, algorithm="HS256"),
        "lives a year": jwt.encode({**good, "iat": now, "exp": now + 365 * 86_400}, JWT_SECRET, algorithm="HS256"),
        "garbage": "not-a-jwt",
    }


def _tamper(token: str) -> str:
    header, payload, signature = token.split(".")
    claims = json.loads(jwt.utils.base64url_decode(payload))
    claims["sub"] = MALLORY
    forged = jwt.utils.base64url_encode(json.dumps(claims).encode()).decode()
    return f"{header}.{forged}.{signature}"


def _path(canonical: str, memory_id: uuid.UUID) -> str:
    path = canonical.replace("{user_id}", ALICE).replace("{memory_id}", str(memory_id))
    path = path.replace("{message_id}", f"{ALICE}-m1")  # swept below: the right token reads its status
    assert "{" not in path, f"the walk does not know a parameter of {canonical}; teach _path its value"
    return path


@pytest.fixture
async def api(db: asyncpg.Pool, tmp_path: Path) -> AsyncIterator[tuple[TestClient, web.Application, ApiSettings]]:
    await db.execute("TRUNCATE user_erasures")
    settings = _settings(tmp_path)
    app = build_app(settings, db)
    async with TestClient(TestServer(app)) as client:
        yield client, app, settings
    await db.execute("TRUNCATE user_erasures")  # leave no erasure behind for other tests


async def _status(client: TestClient, method: str, path: str, token: str | None, body: object = None) -> int:
    headers = {"Authorization": f"Bearer {token}"} if token is not None else {}
    async with client.request(method, path, headers=headers, json=body) as r:
        if r.status == 401:
            assert r.headers.get("WWW-Authenticate", "").startswith("Bearer"), (method, path)
        return r.status


async def test_every_api_route_refuses_missing_bad_and_foreign_tokens_and_admits_the_right_one(
    api: tuple[TestClient, web.Application, ApiSettings], db: asyncpg.Pool, tmp_path: Path
) -> None:
    client, app, settings = api
    table = route_access(app)
    assert len(table) >= 18, "the walk found fewer routes than the api has"
    assert {path for (_, path), a in table.items() if a.scope is None} == PUBLIC_ROUTES
    async with db.acquire() as conn:
        memory = await user_writes.create(conn, ALICE, "I am allergic to nuts", "fact", ALICE, "", 100)
    memory_id = uuid.UUID(memory["id"])
    async with db.acquire() as conn:
        await write_window(conn, ALICE, [sig(ALICE, f"{ALICE}-m1", "I prefer tea")])
    bad = _bad_tokens(settings, tmp_path)
    # erasure last: it removes what the other routes read
    for (method, canonical), needs in sorted(table.items(), key=lambda kv: kv[0][1] == "/v1/users/{user_id}"):
        path = _path(canonical, memory_id)
        body = {"text": "I prefer tea"} if method in ("POST", "PATCH") else None
        where = f"{method} {canonical}"

        assert await _status(client, method, path, None, body) == 401, f"{where}: no token"
        async with client.request(method, path, headers={"Authorization": "Basic YTpi"}) as r:
            assert r.status == 401, f"{where}: not a bearer token"
        for name, token in bad.items():
            assert await _status(client, method, path, token, body) == 401, f"{where}: {name} token"

        if needs.scope is not None:
            no_scope = mint(settings, ALICE, [])
            assert await _status(client, method, path, no_scope, body) == 403, f"{where}: no scope"
            others = mint(settings, ALICE, [s for s in NON_ADMIN if s != needs.scope])
            assert await _status(client, method, path, others, body) == 403, f"{where}: lacks {needs.scope}"
        if needs.service_scope is not None:
            service = mint(settings, "service:chat", NON_ADMIN)
            assert await _status(client, method, path, service, body) == 403, f"{where}: service without admin"
        if "{user_id}" in canonical:
            mallory = mint(settings, MALLORY, NON_ADMIN)
            assert await _status(client, method, path, mallory, body) == 403, f"{where}: another user's token"
            mallory_admin = mint(settings, MALLORY, ["admin"])  # admin is honoured for service tokens only
            assert await _status(client, method, path, mallory_admin, body) == 403, f"{where}: a user's admin token"

        right = mint(settings, ALICE, NON_ADMIN)
        status = await _status(client, method, path, right, body)
        assert status not in (401, 403) and status < 500, f"{where}: the right token got {status}"


async def test_rs256_tokens_from_the_jwks_file_are_accepted(
    api: tuple[TestClient, web.Application, ApiSettings], tmp_path: Path
) -> None:
    client, _, settings = api
    signer = AuthSettings(
        jwt_private_key_file=str(tmp_path / "k1.pem"), jwt_kid="k1", jwt_jwks_file=settings.jwt_jwks_file
    )
    token = mint(signer, ALICE, ["memories:read"])
    assert jwt.get_unverified_header(token)["alg"] == "RS256"
    assert await _status(client, "GET", f"/v1/users/{ALICE}/memories", token) == 200
    assert await _status(client, "GET", f"/v1/users/{MALLORY}/memories", token) == 403


async def test_a_route_added_without_an_access_policy_is_refused_even_with_an_admin_token(
    db: asyncpg.Pool, tmp_path: Path
) -> None:
    settings = _settings(tmp_path)
    app = build_app(settings, db)

    async def sneaky(_: web.Request) -> web.Response:
        return web.json_response({"secret": True})

    app.router.add_get("/v1/users/{user_id}/sneaky", sneaky)
    async with TestClient(TestServer(app)) as client:
        admin = mint(settings, "service:ops", ["admin"])
        assert await _status(client, "GET", f"/v1/users/{ALICE}/sneaky", admin) == 403
        assert await _status(client, "GET", f"/v1/users/{ALICE}/sneaky", None) == 401


class _NoKafka:
    ready = False  # SignalProducer.ready: Kafka is not reachable


async def test_every_ingest_route_refuses_missing_bad_and_foreign_tokens(tmp_path: Path) -> None:
    settings = IngestSettings(kafka_bootstrap="127.0.0.1:1", jwt_secret=JWT_SECRET)
    app = build_ingest(settings, _NoKafka())  # type: ignore[arg-type]
    routes = [(r.method, r.resource.canonical) for r in app.router.routes() if r.resource and r.method != "HEAD"]
    assert ("POST", "/v1/signals") in routes
    bad = _bad_tokens(_settings(tmp_path), tmp_path)
    signal = {"schema_version": 1, "user_id": ALICE, "message_id": "m1", "conversation_id": "c1", "text": "hi"}
    async with TestClient(TestServer(app)) as client:
        for method, path in routes:
            assert re.fullmatch(r"/v1/[a-z/]+", path), path
            assert await _status(client, method, path, None, signal) == 401
            for name, token in bad.items():
                if name.startswith("RS256"):
                    continue  # ingest here has no JWKS file: covered by "alg not accepted" below
                assert await _status(client, method, path, token, signal) == 401, f"{method} {path}: {name}"
            rs = mint(AuthSettings(jwt_private_key_file=str(tmp_path / "k1.pem"), jwt_kid="k1"), ALICE, list(SCOPES))
            assert await _status(client, method, path, rs, signal) == 401, "RS256 without a JWKS file"
            reader = mint(settings, ALICE, ["memories:read", "memories:write"])
            assert await _status(client, method, path, reader, signal) == 403, "lacks signals:write"
            mallory = mint(settings, MALLORY, ["signals:write"])
            assert await _status(client, method, path, mallory, signal) == 403, "another user's signal"
            mallory_admin = mint(settings, MALLORY, ["admin"])
            assert await _status(client, method, path, mallory_admin, signal) == 403, "a user's admin token"
            right = mint(settings, ALICE, ["signals:write"])
            assert await _status(client, method, path, right, signal) == 503  # past auth; Kafka is absent here


# ---- the console (/console): the same walk, with the session cookie instead of the bearer header ----

CONSOLE_PUBLIC = {
    "/console",
    "/console/",
    "/console/sign-in",
    "/console/static/console.css",
    "/console/static/console.js",
}


async def _page_status(
    client: TestClient,
    method: str,
    path: str,
    token: str | None,
    form: dict[str, str] | None = None,
    origin: str | None = None,
) -> int:
    headers = {"Cookie": f"{console.COOKIE}={token}"} if token is not None else {}
    if origin is not None:
        headers["Origin"] = origin
    async with client.request(method, path, headers=headers, data=form, allow_redirects=False) as r:
        assert r.headers.get("Content-Security-Policy") == console.CSP, f"{method} {path}: no CSP"
        return r.status


async def test_every_console_route_refuses_missing_bad_and_foreign_sessions_and_forged_changes(
    api: tuple[TestClient, web.Application, ApiSettings], db: asyncpg.Pool, tmp_path: Path
) -> None:
    client, app, settings = api
    table = console.route_access(app)
    every = {(r.method, r.resource.canonical) for r in app.router.routes() if r.resource}
    assert every == set(route_access(app)) | set(table), "a route is in neither route table"
    assert len(table) >= 20, "the walk found fewer console routes than the console has"
    assert {path for (_, path), n in table.items() if n.public} == CONSOLE_PUBLIC
    async with db.acquire() as conn:
        memory = await user_writes.create(conn, ALICE, "I am allergic to nuts", "fact", ALICE, "", 100)
        await write_window(conn, ALICE, [sig(ALICE, f"{ALICE}-m1", "I prefer tea")])
    memory_id = uuid.UUID(memory["id"])
    bad = _bad_tokens(settings, tmp_path)
    host = f"http://{client.host}:{client.port}"
    erase_last = sorted(table.items(), key=lambda kv: kv[0][1].endswith("/erase") and kv[0][0] == "POST")
    for (method, canonical), needs in erase_last:
        if needs.public:
            continue
        path = _path(canonical, memory_id)
        if path.endswith("/messages"):
            path += f"?message_id={ALICE}-m1"
        where = f"{method} {canonical}"
        right = mint(settings, ALICE, NON_ADMIN)
        form = {"text": "I prefer tea", "kind": "fact", "version": "", "confirm": ALICE}
        signed = {**form, "csrf": console.csrf_token(right)} if method == "POST" else None

        assert await _page_status(client, method, path, None, signed) == 401, f"{where}: no session"
        for name, token in bad.items():
            assert await _page_status(client, method, path, token, signed) == 401, f"{where}: {name} session"
        if needs.scope is not None:
            no_scope = mint(settings, ALICE, [])
            assert await _page_status(client, method, path, no_scope, signed) == 403, f"{where}: no scope"
            others = mint(settings, ALICE, [s for s in NON_ADMIN if s != needs.scope])
            assert await _page_status(client, method, path, others, signed) == 403, f"{where}: lacks {needs.scope}"
        if needs.operator or needs.service_scope:
            service = mint(settings, "service:chat", NON_ADMIN)
            assert await _page_status(client, method, path, service, signed) == 403, f"{where}: service without admin"
        if needs.operator:
            user_admin = mint(settings, ALICE, list(SCOPES))
            assert await _page_status(client, method, path, user_admin, signed) == 403, f"{where}: a user token"
            right = mint(settings, "service:ops", ["admin"])
        if "{user_id}" in canonical and not needs.operator:
            mallory = mint(settings, MALLORY, NON_ADMIN)
            assert await _page_status(client, method, path, mallory, signed) == 403, f"{where}: another user"
            mallory_admin = mint(settings, MALLORY, ["admin"])
            assert await _page_status(client, method, path, mallory_admin, signed) == 403, f"{where}: user's admin"
        if method == "POST":
            assert await _page_status(client, method, path, right, form) == 403, f"{where}: no CSRF token"
            forged = {**form, "csrf": console.csrf_token(mint(settings, ALICE, NON_ADMIN, ttl_seconds=1800))}
            assert await _page_status(client, method, path, right, forged) == 403, f"{where}: another session's CSRF"
            signed = {**form, "csrf": console.csrf_token(right)}
            cross = await _page_status(client, method, path, right, signed, origin="https://evil.example")
            assert cross == 403, f"{where}: cross-site"
        status = await _page_status(client, method, path, right, signed, origin=host if method == "POST" else None)
        assert status not in (401, 403) and status < 500, f"{where}: the right session got {status}"
