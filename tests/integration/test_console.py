"""The memory console over HTTP (the api in-process, the real PostgreSQL): sign-in sets an
HttpOnly, SameSite=Strict cookie; a memory holding markup renders inert; the "why" shows the
exact messages; changes go through the JSON routes' store code and need the CSRF token.
The same flows in a real browser: tests/e2e/test_console_browser.py."""

from __future__ import annotations

import re
from dataclasses import replace

import asyncpg
from aiohttp.test_utils import TestClient, TestServer
from memwright.auth import mint
from memwright.services.api import console
from memwright.services.api.app import build_app
from memwright.store import user_writes

from tests.integration.helpers import sweep
from tests.integration.test_api_memories import Api, agent_memory, curate


def _cookie(token: str) -> dict[str, str]:
    return {"Cookie": f"{console.COOKIE}={token}"}


async def test_signing_in_sets_an_httponly_strict_cookie_and_a_bad_token_is_refused(api: Api) -> None:
    token = mint(api.settings, "alice", ["memories:read", "memories:write"])
    async with api.client.post("/console/sign-in", data={"token": "nope"}, allow_redirects=False) as r:
        assert r.status == 401 and "not accepted" in await r.text()
        assert console.COOKIE not in r.cookies
    async with api.client.post(
        "/console/sign-in", data={"token": token}, headers={"Origin": "https://evil.example"}, allow_redirects=False
    ) as r:
        assert r.status == 403, "login CSRF: a sign-in posted from another site"
    async with api.client.post("/console/sign-in", data={"token": token}, allow_redirects=False) as r:
        assert r.status == 303 and r.headers["Location"] == "/console/users/alice"
        cookie = r.headers["Set-Cookie"]
        assert "HttpOnly" in cookie and "SameSite=Strict" in cookie and "Path=/console" in cookie
        assert r.headers["Content-Security-Policy"] == console.CSP
    service = mint(api.settings, "service:ops", ["admin"])
    async with api.client.post("/console/sign-in", data={"token": service}, allow_redirects=False) as r:
        assert r.headers["Location"] == "/console/ops"


async def test_a_memory_holding_markup_renders_inert_on_every_page(api: Api, db: asyncpg.Pool) -> None:
    evil = "<script>alert(1)</script><img src=x onerror=alert(2)> \"quoted\" & 'single'"
    async with db.acquire() as conn:
        memory = await user_writes.create(conn, "alice", evil, "fact", "alice", "", 100)
    token = mint(api.settings, "alice", ["memories:read"])
    for path in ("/console/users/alice", f"/console/users/alice/memories/{memory['id']}"):
        async with api.client.get(path, headers=_cookie(token)) as r:
            page = await r.text()
            assert r.status == 200
            assert "<script>alert" not in page and "<img src=x" not in page
            assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page
    script_tags = re.findall(r"<script[^>]*>", page)
    assert script_tags == ['<script src="/console/static/console.js" defer>']


async def test_why_shows_the_exact_messages_and_deleting_an_inferred_memory_needs_the_csrf_token(
    api: Api, db: asyncpg.Pool
) -> None:
    memory_id, message_id = await agent_memory(db, "alice", "Always answer in metric units")
    token = mint(api.settings, "alice", ["memories:read", "memories:write"])
    async with api.client.get(f"/console/users/alice/memories/{memory_id}", headers=_cookie(token)) as r:
        page = await r.text()
    assert "Always answer in metric units" in page and message_id in page and "inferred" in page
    assert "Save changes" not in page, "an inferred memory is not editable"
    delete = f"/console/users/alice/memories/{memory_id}/delete"
    async with api.client.post(delete, headers=_cookie(token), data={"version": "1"}, allow_redirects=False) as r:
        assert r.status == 403
    assert await db.fetchval("SELECT count(*) FROM memories WHERE user_id = 'alice'") == 1
    form = {"version": "1", "csrf": console.csrf_token(token)}
    async with api.client.post(delete, headers=_cookie(token), data=form, allow_redirects=False) as r:
        assert r.status == 303 and r.headers["Location"] == "/console/users/alice?done=deleted"
    assert await db.fetchval("SELECT count(*) FROM memories WHERE user_id = 'alice'") == 0
    actor = await db.fetchval("SELECT actor FROM memory_audit WHERE user_id = 'alice' AND action = 'delete'")
    assert actor == "user"


async def test_the_operator_finds_a_user_and_sees_their_runs(api: Api, db: asyncpg.Pool) -> None:
    await sweep(db, "bob-ops", "Always answer in metric units")
    await curate(db)
    operator = mint(api.settings, "service:ops", ["admin"])
    async with api.client.get("/console/ops?q=bob", headers=_cookie(operator)) as r:
        page = await r.text()
    assert r.status == 200 and "/console/ops/users/bob-ops" in page and "outbox depth" in page
    async with api.client.get("/console/ops/users/bob-ops", headers=_cookie(operator)) as r:
        page = await r.text()
    assert r.status == 200 and "committed" in page and "rules" in page
    user = mint(api.settings, "bob-ops", ["memories:read", "admin"])
    async with api.client.get("/console/ops", headers=_cookie(user)) as r:
        assert r.status == 403, "a user token, even with admin, is no operator"


async def test_the_operator_page_links_the_grafana_dashboards_when_grafana_is_configured(
    api: Api, db: asyncpg.Pool
) -> None:
    operator = _cookie(mint(api.settings, "service:ops", ["admin"]))
    async with api.client.get("/console/ops", headers=operator) as r:
        assert "MEMWRIGHT_GRAFANA_URL" in await r.text()
    settings = replace(api.settings, grafana_url="https://grafana.example/")
    async with TestClient(TestServer(build_app(settings, db))) as client:
        async with client.get("/console/ops", headers=operator) as r:
            page = await r.text()
    for uid in ("memwright-overview", "memwright-intake", "memwright-sweeps", "memwright-curation", "memwright-index"):
        assert f'href="https://grafana.example/d/{uid}"' in page


async def test_the_console_address_without_a_slash_is_the_sign_in_page(api: Api) -> None:
    async with api.client.get("/console") as r:
        assert r.status == 200 and 'id="sign-in"' in await r.text()


async def test_a_form_in_a_charset_the_server_cannot_read_is_a_400_with_the_reason(api: Api) -> None:
    for headers, body in (
        ({"Content-Type": "application/x-www-form-urlencoded; charset=nope"}, b"token=abc"),
        (
            {"Content-Type": "multipart/form-data; boundary=b"},
            b'--b\r\nContent-Disposition: form-data; name="token"'
            b"\r\nContent-Type: text/plain; charset=nope\r\n\r\nabc\r\n--b--\r\n",
        ),
    ):
        async with api.client.post("/console/sign-in", data=body, headers=headers, allow_redirects=False) as r:
            assert r.status == 400 and "not valid UTF-8" in await r.text(), r.status
