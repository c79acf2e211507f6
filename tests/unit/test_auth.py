"""Bearer JWTs: issuer, audience, expiry and scopes; a user token reaches only its user."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import jwt
import pytest
from memwright.auth import VERIFIED_TOKENS, AuthError, is_user_id_reserved, mint, new_rsa_keypair, verify
from memwright.settings import AuthSettings

SETTINGS = AuthSettings(jwt_secret="k" * 40)


def test_a_minted_token_verifies_with_its_scopes() -> None:
    p = verify(SETTINGS, "Bearer " + mint(SETTINGS, "alice", ["memories:read"]))
    assert p.subject == "alice" and p.scopes == {"memories:read"}
    assert p.may_access("alice") and not p.may_access("bob")
    service = verify(SETTINGS, "Bearer " + mint(SETTINGS, "service:chat", ["signals:write"]))
    assert service.may_access("bob")


@pytest.mark.parametrize(
    ("header", "expected"),
    [
        (None, "missing bearer token"),
        ("Basic abc", "missing bearer token"),
        ("Bearer " + mint(SETTINGS, "alice", ["admin"], ttl_seconds=-10), "token expired"),
        ("Bearer " + mint(AuthSettings(jwt_secret="z" * 40), "alice", ["admin"]), "invalid token"),
        (
            "Bearer " + mint(AuthSettings(jwt_secret="k" * 40, jwt_audience="other"), "alice", ["admin"]),
            "invalid token",
        ),
        ("Bearer " + jwt.encode({"sub": "a", "iss": "memwright", "aud": "memwright"}, "k" * 40), "invalid token"),
        (
            "Bearer "
            + jwt.encode(
                {"sub": "a", "exp": time.time() + 60, "iss": "memwright", "aud": "memwright"},
                "k" * 40,
                algorithm="HS512",
            ),
            "invalid token",
        ),
    ],
)
def test_bad_tokens_are_401_with_a_reason(header: str | None, expected: str) -> None:
    with pytest.raises(AuthError) as exc:
        verify(SETTINGS, header)
    assert exc.value.status == 401 and expected in exc.value.reason


def test_unknown_scopes_cannot_be_minted() -> None:
    with pytest.raises(ValueError, match="unknown scope"):
        mint(SETTINGS, "alice", ["everything"])


# ---- verified tokens are remembered, within limits ---------------------------------------


def test_a_remembered_token_still_expires_on_time() -> None:
    token = jwt.encode(
        {"sub": "a", "scope": "", "iss": "memwright", "aud": "memwright", "exp": int(time.time()) + 2}, "k" * 40
    )
    assert verify(SETTINGS, f"Bearer {token}").subject == "a"
    time.sleep(max(0.0, jwt.decode(token, options={"verify_signature": False})["exp"] - time.time()) + 0.05)
    with pytest.raises(AuthError, match="token expired"):
        verify(SETTINGS, f"Bearer {token}")


def test_a_token_remembered_under_one_secret_does_not_pass_under_another() -> None:
    token = mint(SETTINGS, "alice", ["admin"])
    assert verify(SETTINGS, f"Bearer {token}").subject == "alice"
    with pytest.raises(AuthError, match="invalid token"):
        verify(AuthSettings(jwt_secret="z" * 40), f"Bearer {token}")


def test_a_key_taken_out_of_the_jwks_file_stops_verifying_within_the_ttl(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    old_pem, old_jwks = new_rsa_keypair("old")
    _, new_jwks = new_rsa_keypair("new")
    (tmp_path / "old.pem").write_bytes(old_pem)
    jwks_file = tmp_path / "jwks.json"
    jwks_file.write_text(json.dumps(old_jwks))
    verifier = AuthSettings(jwt_jwks_file=str(jwks_file))
    token = mint(AuthSettings(jwt_private_key_file=str(tmp_path / "old.pem"), jwt_kid="old"), "ana", [])
    assert verify(verifier, f"Bearer {token}").subject == "ana"
    jwks_file.write_text(json.dumps(new_jwks))
    os.utime(jwks_file, (time.time() + 5, time.time() + 5))
    assert verify(verifier, f"Bearer {token}").subject == "ana"  # remembered for a while
    later = time.time() + VERIFIED_TOKENS.ttl_s + 1
    monkeypatch.setattr(VERIFIED_TOKENS, "clock", lambda: later)
    with pytest.raises(AuthError, match="no key 'old'"):
        verify(verifier, f"Bearer {token}")


def test_the_remembered_tokens_are_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(VERIFIED_TOKENS, "max_entries", 5)
    VERIFIED_TOKENS.clear()
    for i in range(20):
        verify(SETTINGS, "Bearer " + mint(SETTINGS, f"user{i}", []))
    assert len(VERIFIED_TOKENS._entries) == 5


# ---- what a token may do and how long it may live ----------------------------------------


def _signed(**claims: object) -> str:
    base = {"sub": "alice", "scope": "admin", "iss": "memwright", "aud": "memwright", "exp": int(time.time()) + 60}
    return "Bearer " + jwt.encode({**base, **claims}, "k" * 40, algorithm="HS256")


def test_a_user_token_with_the_admin_scope_reaches_only_its_own_user() -> None:
    admin_user = verify(SETTINGS, "Bearer " + mint(SETTINGS, "alice", ["admin"]))
    assert admin_user.may_access("alice") and not admin_user.may_access("bob")
    assert admin_user.has_scope("memories:read")  # admin stands for every scope, on its own data
    assert verify(SETTINGS, "Bearer " + mint(SETTINGS, "service:ops", ["admin"])).may_access("bob")


@pytest.mark.parametrize("claim", ["exp", "iat", "nbf"])
def test_a_time_claim_as_a_numeric_string_is_refused(claim: str) -> None:
    value = int(time.time()) + (60 if claim == "exp" else -60)
    with pytest.raises(AuthError, match=f"{claim} must be a number"):
        verify(SETTINGS, _signed(**{claim: str(value)}))


def test_a_token_living_longer_than_the_cap_is_refused_and_cannot_be_minted() -> None:
    capped = AuthSettings(jwt_secret="k" * 40, jwt_max_ttl_s=3600)
    now = int(time.time())
    assert verify(capped, _signed(iat=now, exp=now + 3600)).subject == "alice"
    with pytest.raises(AuthError, match="MEMWRIGHT_JWT_MAX_TTL_S"):
        verify(capped, _signed(iat=now - 10, exp=now + 3600 * 2))  # exp - iat over the cap
    with pytest.raises(AuthError, match="MEMWRIGHT_JWT_MAX_TTL_S"):
        verify(capped, _signed(exp=now + 365 * 86_400))  # no iat: exp - now over the cap
    with pytest.raises(ValueError, match="MEMWRIGHT_JWT_MAX_TTL_S"):
        mint(capped, "alice", [], ttl_seconds=3601)
    assert (
        AuthSettings.from_env({"MEMWRIGHT_JWT_SECRET": "k" * 40, "MEMWRIGHT_JWT_MAX_TTL_S": "600"}).jwt_max_ttl_s == 600
    )


def test_user_ids_starting_with_the_service_prefix_are_reserved() -> None:
    assert (
        is_user_id_reserved("service:chat")
        and not is_user_id_reserved("servicedesk")
        and not is_user_id_reserved("ana")
    )
