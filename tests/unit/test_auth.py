"""Bearer JWTs: issuer, audience, expiry and scopes; a user token reaches only its user."""

from __future__ import annotations

import time

import jwt
import pytest
from memwright.auth import AuthError, mint, verify
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
