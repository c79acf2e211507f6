"""The api's parts without services: the context block and its token estimate, the per-token
rate limiter, the OpenAPI document against the route table, RS256 with a JWKS file, and
`memwright token`."""

from __future__ import annotations

import asyncio
import json
import os
import time
import uuid
from pathlib import Path
from typing import Any

import jwt
import pytest
from aiohttp.test_utils import TestClient, TestServer
from memwright import metrics
from memwright.auth import AuthError, mint, new_rsa_keypair, verify
from memwright.cli import main as cli_main
from memwright.services.api import context
from memwright.services.api.app import build_app, route_access
from memwright.services.api.limits import RateLimiter
from memwright.services.api.openapi import document
from memwright.settings import ApiSettings, AuthSettings, SettingsError
from structlog.testing import capture_logs

from tests.conftest import raw_request

SETTINGS = ApiSettings(jwt_secret="k" * 40, pg_dsn="unused")


# ---- context block ---------------------------------------------------------------------


def _preview(text: str, author: str = "agent") -> dict[str, Any]:
    return {"id": str(uuid.uuid4()), "author": author, "kind": "preference", "preview": text}


def test_the_context_block_lists_every_preview_and_says_how_to_fetch_full_text() -> None:
    previews = [_preview("Always answer in metric units."), _preview("I am allergic to nuts", "user")]
    block = context.render_block("ana", previews)
    lines = block.splitlines()
    assert lines[0] == '<user_memories user="ana" count="2">' and lines[-1] == "</user_memories>"
    assert f"- [{previews[0]['id']}] (agent, preference) Always answer in metric units." in lines
    assert f"- [{previews[1]['id']}] (user, preference) I am allergic to nuts" in lines
    assert "GET /v1/users/ana/memories/{memory_id}" in block
    assert "Nothing is remembered" in context.render_block("ana", [])


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("", 0),
        ("Always answer in metric units", 5),  # five short words: one token each
        ("internationalization", 3),  # 20 letters: one per 8, rounded up
        ("2019-04-12", 6),  # 4 digits = 2, then "-", "04", "-", "12" one each
        ("回答は日本語", 6),  # one per non-ASCII letter
        ("a\nb", 3),  # a line break counts
    ],
)
def test_the_token_estimate_follows_its_stated_rule(text: str, expected: int) -> None:
    assert context.estimate_tokens(text) == expected


# ---- rate limiter ----------------------------------------------------------------------


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_a_token_gets_its_burst_then_the_rate_and_a_retry_after() -> None:
    clock = Clock()
    limiter = RateLimiter(rate_per_s=2.0, burst=3, clock=clock)
    assert [limiter.take("t1") for _ in range(3)] == [0.0, 0.0, 0.0]
    wait = limiter.take("t1")
    assert wait == pytest.approx(0.5) and limiter.retry_after(wait) == "1"
    assert limiter.take("t2") == 0.0  # another token has its own bucket
    clock.now += 0.5
    assert limiter.take("t1") == 0.0
    clock.now += 100
    assert [limiter.take("t1") for _ in range(4)][-1] > 0  # refilled to the burst, not beyond


def test_the_limiter_keeps_a_bounded_number_of_buckets_and_never_the_token() -> None:
    limiter = RateLimiter(rate_per_s=1.0, burst=1, max_tokens=10)
    for i in range(100):
        limiter.take(f"token-{i}")
    assert len(limiter._buckets) == 10
    assert not any(k.startswith("token-") for k in limiter._buckets)


# ---- OpenAPI document ------------------------------------------------------------------


def test_the_openapi_document_and_the_route_table_describe_the_same_operations() -> None:
    doc = document(SETTINGS)
    documented = {(m.upper(), p) for p, ops in doc["paths"].items() for m in ops}
    served = {k for k in route_access(build_app(SETTINGS, None)) if k[0] != "HEAD"}  # type: ignore[arg-type]
    assert documented == served


def test_the_openapi_document_is_valid_json_with_resolvable_refs_and_the_settings_limits() -> None:
    doc = json.loads(json.dumps(document(SETTINGS)))
    assert doc["openapi"].startswith("3.1")
    refs = set()

    def walk(node: Any) -> None:
        if isinstance(node, dict):
            if "$ref" in node:
                refs.add(node["$ref"].rsplit("/", 1)[-1])
            for v in node.values():
                walk(v)
        elif isinstance(node, list):
            for v in node:
                walk(v)

    walk(doc["paths"])
    assert refs and refs <= set(doc["components"]["schemas"])
    assert doc["components"]["schemas"]["NewMemory"]["properties"]["text"]["maxLength"] == SETTINGS.max_memory_chars
    for path, ops in doc["paths"].items():
        for method, op in ops.items():
            assert {"401", "429"} <= set(op["responses"]), (method, path)
            if "{user_id}" in path:
                assert {"400", "403"} <= set(op["responses"]), (method, path)


# ---- RS256 and the JWKS file -----------------------------------------------------------


def _keys(tmp: Path, *kids: str) -> tuple[Path, dict[str, Path]]:
    pems, keys = {}, []
    for kid in kids:
        pem, jwks = new_rsa_keypair(kid)
        pems[kid] = tmp / f"{kid}.pem"
        pems[kid].write_bytes(pem)
        keys += jwks["keys"]
    jwks_file = tmp / "jwks.json"
    jwks_file.write_text(json.dumps({"keys": keys}))
    return jwks_file, pems


def test_rs256_tokens_verify_by_kid_and_a_rotated_jwks_file_is_picked_up(tmp_path: Path) -> None:
    jwks_file, pems = _keys(tmp_path, "old", "new")
    verifier = AuthSettings(jwt_jwks_file=str(jwks_file))
    for kid in ("old", "new"):
        token = mint(AuthSettings(jwt_private_key_file=str(pems[kid]), jwt_kid=kid), "ana", ["memories:read"])
        assert verify(verifier, f"Bearer {token}").subject == "ana"
    no_kid = mint(AuthSettings(jwt_private_key_file=str(pems["old"])), "ana", ["memories:read"])
    with pytest.raises(AuthError, match="no kid"):
        verify(verifier, f"Bearer {no_kid}")
    # rotate: the file now holds only "next"; "old" tokens stop working without a restart
    (tmp_path / "rotated").mkdir()
    rotated, fresh = _keys(tmp_path / "rotated", "next")
    jwks_file.write_text(rotated.read_text())
    os.utime(jwks_file, (time.time() + 5, time.time() + 5))
    old = mint(AuthSettings(jwt_private_key_file=str(pems["old"]), jwt_kid="old"), "ana", [])
    with pytest.raises(AuthError, match="no key 'old'"):
        verify(verifier, f"Bearer {old}")
    nxt = mint(AuthSettings(jwt_private_key_file=str(fresh["next"]), jwt_kid="next"), "ana", [])
    assert verify(verifier, f"Bearer {nxt}").subject == "ana"
    # a single-key set accepts a token without kid
    assert verify(verifier, f"Bearer {mint(AuthSettings(jwt_private_key_file=str(fresh['next'])), 'ana', [])}")


def test_each_algorithm_is_checked_only_with_its_own_key(tmp_path: Path) -> None:
    jwks_file, pems = _keys(tmp_path, "k1")
    public_pem = jwt.PyJWKSet.from_dict(json.loads(jwks_file.read_text())).keys[0].key
    claims = {"sub": "ana", "iss": "memwright", "aud": "memwright", "exp": int(time.time()) + 60}
    rs_only = AuthSettings(jwt_jwks_file=str(jwks_file))
    with pytest.raises(AuthError, match="'HS256' is not accepted"):  # the classic confusion attack
        verify(rs_only, "Bearer " + jwt.encode(claims, "x" * 40, algorithm="HS256"))
    hs_only = AuthSettings(jwt_secret="k" * 40)
    rs_token = mint(AuthSettings(jwt_private_key_file=str(pems["k1"]), jwt_kid="k1"), "ana", [])
    with pytest.raises(AuthError, match="'RS256' is not accepted"):
        verify(hs_only, f"Bearer {rs_token}")
    both = AuthSettings(jwt_secret="k" * 40, jwt_jwks_file=str(jwks_file))
    assert verify(both, f"Bearer {rs_token}").subject == "ana"
    assert verify(both, "Bearer " + mint(hs_only, "ana", [])).subject == "ana"
    assert public_pem is not None


def test_auth_settings_need_a_secret_or_a_jwks_file_and_name_them(tmp_path: Path) -> None:
    with pytest.raises(SettingsError, match="MEMWRIGHT_JWT_SECRET is not set \\(nor MEMWRIGHT_JWT_JWKS_FILE\\)"):
        ApiSettings.from_env({"MEMWRIGHT_PG_DSN": "x"})
    with pytest.raises(SettingsError, match=r"MEMWRIGHT_JWT_JWKS_FILE=.* is not a readable file"):
        ApiSettings.from_env({"MEMWRIGHT_PG_DSN": "x", "MEMWRIGHT_JWT_JWKS_FILE": str(tmp_path / "missing")})
    jwks_file, _ = _keys(tmp_path, "k1")
    s = ApiSettings.from_env({"MEMWRIGHT_PG_DSN": "x", "MEMWRIGHT_JWT_JWKS_FILE": str(jwks_file)})
    assert s.jwt_secret == ""
    with pytest.raises(SettingsError, match="MEMWRIGHT_RATE_LIMIT_PER_S"):
        ApiSettings.from_env(
            {"MEMWRIGHT_PG_DSN": "x", "MEMWRIGHT_JWT_SECRET": "k" * 40, "MEMWRIGHT_RATE_LIMIT_PER_S": "0"}
        )


# ---- memwright token -------------------------------------------------------------------


def _cli(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    with pytest.raises(SystemExit) as done:
        cli_main(argv)
    out, err = capsys.readouterr()
    return int(done.value.code or 0), out.strip(), err


def test_memwright_token_mints_hs256_and_rs256_tokens(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MEMWRIGHT_JWT_SECRET", "k" * 40)
    code, token, _ = _cli(["token", "ana", "--scope", "memories:read", "memories:write", "--ttl", "60"], capsys)
    assert code == 0
    principal = verify(AuthSettings(jwt_secret="k" * 40), f"Bearer {token}")
    assert principal.subject == "ana" and principal.scopes == {"memories:read", "memories:write"}

    jwks_file, pems = _keys(tmp_path, "k1")
    code, token, _ = _cli(
        ["token", "service:chat", "--scope", "admin", "--private-key", str(pems["k1"]), "--kid", "k1"], capsys
    )
    assert code == 0 and jwt.get_unverified_header(token) == {"alg": "RS256", "kid": "k1", "typ": "JWT"}
    assert verify(AuthSettings(jwt_jwks_file=str(jwks_file)), f"Bearer {token}").is_service

    code, _, err = _cli(["token", "ana", "--private-key", str(tmp_path / "missing.pem")], capsys)
    assert code == 2 and "cannot use" in err and "RS256 private key" in err
    code, _, err = _cli(["token", "ana", "--scope", "everything"], capsys)
    assert code == 2 and "unknown scope" in err


# ---- limits keyed on who the token verified as -----------------------------------------


def _limited(**overrides: Any) -> ApiSettings:
    return ApiSettings(jwt_secret="k" * 40, pg_dsn="unused", rate_limit_per_s=0.01, rate_limit_burst=3, **overrides)


async def _statuses(client: TestClient, requests: list[tuple[str, str, dict[str, str]]]) -> list[int]:
    out = []
    for method, path, headers in requests:
        async with client.request(method, path, headers=headers, json={}) as r:
            out.append(r.status)
            if r.status == 429:
                assert int(r.headers["Retry-After"]) >= 1 and "retry in" in (await r.json())["error"]
    return out


async def test_a_user_has_one_rate_limit_however_the_header_is_spelled_or_how_many_tokens_it_holds() -> None:
    settings = _limited()
    token = mint(settings, "alice", ["memories:read"])
    spellings = [f"Bearer {token}", f"Bearer  {token}", f"Bearer {token}   ", f"Bearer \t{token}"]
    other_token = mint(settings, "alice", ["memories:read", "memories:write"], ttl_seconds=1800)
    async with TestClient(TestServer(build_app(settings, None))) as client:  # type: ignore[arg-type]
        got = await _statuses(client, [("GET", "/v1/openapi.json", {"Authorization": h}) for h in spellings])
        assert got == [200, 200, 200, 429]
        got = await _statuses(client, [("GET", "/v1/openapi.json", {"Authorization": f"Bearer {other_token}"})])
        assert got == [429]  # the same user with another token: the same bucket
        bob = {"Authorization": "Bearer " + mint(settings, "bob", ["memories:read"])}
        assert await _statuses(client, [("GET", "/v1/openapi.json", bob)]) == [200]


async def test_a_service_token_is_limited_per_user_it_serves_and_in_all() -> None:
    settings = _limited(service_rate_limit_per_s=0.01, service_rate_limit_burst=8)
    service = {"Authorization": "Bearer " + mint(settings, "service:chat", ["memories:write"])}
    async with TestClient(TestServer(build_app(settings, None))) as client:  # type: ignore[arg-type]
        # POST with an empty body: past the limits it is a 400 (text is required), before any database call
        alice = [("POST", "/v1/users/alice/memories", service)] * 20
        assert await _statuses(client, alice) == [400] * 3 + [429] * 17  # the per-user rate, for this service
        # alice's 17 refused requests cost the service nothing: 5 of its 8 are left for everyone else
        others = [("POST", f"/v1/users/user{i}/memories", service) for i in range(6)]
        assert await _statuses(client, others) == [400, 400, 400, 400, 400, 429]  # the service's own budget
        async with client.post("/v1/users/user9/memories", headers=service, json={}) as r:
            assert r.status == 429 and "service:chat" in (await r.json())["error"]


async def test_a_user_id_with_the_service_prefix_is_refused_and_an_admin_user_token_reaches_only_its_user() -> None:
    admin_user = {"Authorization": "Bearer " + mint(SETTINGS, "alice", ["admin"])}
    service = {"Authorization": "Bearer " + mint(SETTINGS, "service:chat", ["admin"])}
    async with TestClient(TestServer(build_app(SETTINGS, None))) as client:  # type: ignore[arg-type]
        async with client.post("/v1/users/service:billing/memories", headers=service, json={}) as r:
            assert r.status == 400 and "must not start with 'service:'" in (await r.json())["error"]
        for method, path in [("POST", "/v1/users/bob/memories"), ("GET", "/v1/users/bob/export")]:
            async with client.request(method, path, headers=admin_user, json={}) as r:
                assert r.status == 403, (method, path)
        async with client.post("/v1/users/alice/memories", headers=admin_user, json={}) as r:
            assert r.status == 400  # its own user: through to the handler


# ---- bodies: never a 5xx -----------------------------------------------------------------


def _api_counted(route: str) -> dict[str, float]:
    samples = {}
    for metric in metrics.API_REQUESTS.collect():
        for s in metric.samples:
            if s.name.endswith("_total") and s.labels["route"] == route:
                samples[s.labels["code"]] = s.value
    return samples


@pytest.mark.parametrize(
    ("method", "path", "body", "expected"),
    [
        ("POST", "/v1/users/alice/memories", b'{"text": ' + b"1" * 5000 + b"}", "body is not JSON"),
        ("POST", "/v1/users/alice/memories", b'{"text": "x", "kind": ' + b"7" * 4301 + b"}", "body is not JSON"),
        ("PATCH", f"/v1/users/alice/memories/{uuid.uuid4()}", b'{"kind": ' + b"9" * 10_000 + b"}", "body is not JSON"),
        ("POST", "/v1/users/alice/memories", b"[" * 15_000 + b"]" * 15_000, "nested too deeply"),
        ("PATCH", f"/v1/users/alice/memories/{uuid.uuid4()}", b'{"text": ' * 5000 + b"1" + b"}" * 5000, "nested"),
    ],
)
async def test_over_long_integers_and_deep_nesting_in_a_body_are_a_400(
    method: str, path: str, body: bytes, expected: str
) -> None:
    settings = ApiSettings(jwt_secret="k" * 40, pg_dsn="unused", max_body_bytes=100_000)
    auth = {
        "Authorization": "Bearer " + mint(settings, "alice", ["memories:write"]),
        "Content-Type": "application/json",
    }
    async with TestClient(TestServer(build_app(settings, None))) as client:  # type: ignore[arg-type]
        async with client.request(method, path, data=body, headers=auth) as r:
            assert r.status == 400 and expected in (await r.json())["error"]


def _post_head(token: str, length: int) -> bytes:
    return (
        f"POST /v1/users/alice/memories HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {token}\r\n"
        f"Content-Type: application/json\r\nContent-Length: {length}\r\nConnection: close\r\n\r\n"
    ).encode()


async def test_a_client_that_hangs_up_mid_body_is_counted_as_499_and_not_logged_as_an_error() -> None:
    route = "/v1/users/{user_id}/memories"
    token = mint(SETTINGS, "alice", ["memories:write"])
    async with TestClient(TestServer(build_app(SETTINGS, None))) as client:  # type: ignore[arg-type]
        before = _api_counted(route)
        with capture_logs() as logged:
            await raw_request(client, _post_head(token, 1000), b'{"text": "I pre', hang_up=True)
            for _ in range(100):
                if _api_counted(route) != before:
                    break
                await asyncio.sleep(0.02)
        after = _api_counted(route)
    assert after.get("499", 0) - before.get("499", 0) == 1
    assert after.get("500", 0) == before.get("500", 0)
    assert [e["event"] for e in logged] == ["api_client_gone"] and logged[0]["log_level"] == "info"


async def test_a_body_that_does_not_arrive_in_time_is_a_408() -> None:
    settings = ApiSettings(jwt_secret="k" * 40, pg_dsn="unused", body_read_timeout_s=0.3)
    token = mint(settings, "alice", ["memories:write"])
    async with TestClient(TestServer(build_app(settings, None))) as client:  # type: ignore[arg-type]
        answer = await raw_request(client, _post_head(token, 1000), b'{"text": "I pre', hang_up=False)
        assert answer.startswith(b"HTTP/1.1 408") and b"did not arrive within 0.3 s" in answer, answer
