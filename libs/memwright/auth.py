"""Bearer JWT authentication and authorization for the public HTTP endpoints.

Tokens are HS256 with a shared secret (MEMWRIGHT_JWT_SECRET) or RS256 with public keys
from a JWKS file (MEMWRIGHT_JWT_JWKS_FILE), or either when both are configured. Each
algorithm is checked only with its own key material (an HS256 token is never checked
against a public key), issuer and audience are checked, expiry is required.
Scopes: signals:write, memories:read, memories:write, admin.
A user token (sub = the user id) reaches only that user's data, whatever its scopes (admin
included); a service token (sub = "service:<name>") reaches any user's data when it carries the
scope. So no user id may start with "service:" (`is_user_id_reserved`). A token may live at most
MEMWRIGHT_JWT_MAX_TTL_S; exp, iat and nbf must be JSON numbers.
"""

from __future__ import annotations

import json
import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import jwt
from aiohttp import web
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa

from memwright.events import RESERVED_USER_PREFIX
from memwright.settings import AuthSettings

SCOPES = ("signals:write", "memories:read", "memories:write", "admin")
SERVICE_PREFIX = RESERVED_USER_PREFIX  # "service:", from the signal schema: one source for both
_LEEWAY_S = 60  # clock skew between the minting host and this one, for the lifetime cap


@dataclass(frozen=True)
class Principal:
    subject: str
    scopes: frozenset[str]

    @property
    def is_service(self) -> bool:
        return self.subject.startswith(SERVICE_PREFIX)

    def may_access(self, user_id: str) -> bool:
        # tenant isolation: a user token reaches its own user only, even with the admin scope
        return self.is_service or self.subject == user_id

    def has_scope(self, scope: str) -> bool:
        return scope in self.scopes or "admin" in self.scopes


def is_user_id_reserved(user_id: str) -> bool:
    """Whether a user id would read as a service subject (refused as a user id everywhere)."""
    return user_id.startswith(SERVICE_PREFIX)


class AuthError(Exception):
    """401 (who are you?) or 403 (you may not); `response()` renders it for aiohttp."""

    def __init__(self, status: int, reason: str) -> None:
        super().__init__(reason)
        self.status = status
        self.reason = reason

    def response(self) -> web.Response:
        headers = {"WWW-Authenticate": 'Bearer realm="memwright"'} if self.status == 401 else None
        return web.json_response({"error": self.reason}, status=self.status, headers=headers)


# ---- keys ------------------------------------------------------------------------------


class _JwksCache:
    """The JWKS file's keys by kid, re-read when the file changes (key rotation without a restart)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._loaded: dict[str, tuple[float, dict[str, Any]]] = {}

    def keys(self, path: str) -> dict[str, Any]:
        try:
            mtime = os.stat(path).st_mtime
        except OSError as exc:
            raise AuthError(401, f"cannot verify RS256 tokens: JWKS file unreadable ({exc.strerror})") from None
        with self._lock:
            cached = self._loaded.get(path)
            if cached and cached[0] == mtime:
                return cached[1]
        try:
            with open(path) as f:
                keyset = jwt.PyJWKSet.from_dict(json.load(f))
        except (OSError, ValueError, jwt.PyJWKSetError) as exc:
            raise AuthError(401, f"cannot verify RS256 tokens: JWKS file is not a valid key set ({exc})") from None
        keys = {k.key_id or "": k.key for k in keyset.keys if k.key_type == "RSA"}
        with self._lock:
            self._loaded[path] = (mtime, keys)
        return keys


_JWKS = _JwksCache()


def _rs256_key(settings: AuthSettings, kid: str | None) -> Any:
    keys = _JWKS.keys(settings.jwt_jwks_file)
    if kid is None:
        if len(keys) == 1:
            return next(iter(keys.values()))
        raise AuthError(401, "invalid token: RS256 token has no kid and the key set holds several keys")
    if kid not in keys:
        raise AuthError(401, f"invalid token: no key {kid!r} in the key set")
    return keys[kid]


def _private_key(settings: AuthSettings) -> Any:
    try:
        with open(settings.jwt_private_key_file, "rb") as f:
            return serialization.load_pem_private_key(f.read(), password=None)
    except (OSError, ValueError, TypeError) as exc:
        raise ValueError(
            f"cannot use {settings.jwt_private_key_file!r} as an RS256 private key (unencrypted PEM): {exc}"
        ) from None


def new_rsa_keypair(kid: str) -> tuple[bytes, dict[str, Any]]:
    """A fresh RSA key: its PEM (PKCS8, for MEMWRIGHT_JWT_PRIVATE_KEY_FILE) and a JWKS holding
    its public half (for MEMWRIGHT_JWT_JWKS_FILE). For local use and tests."""
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    pem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    jwk = json.loads(jwt.algorithms.RSAAlgorithm.to_jwk(key.public_key()))
    return pem, {"keys": [{**jwk, "kid": kid, "use": "sig", "alg": "RS256"}]}


# ---- tokens ----------------------------------------------------------------------------


def mint(settings: AuthSettings, subject: str, scopes: list[str], ttl_seconds: int = 3600) -> str:
    """A signed token: RS256 with the private key file when configured, else HS256 with the secret."""
    unknown = [s for s in scopes if s not in SCOPES]
    if unknown:
        raise ValueError(f"unknown scope(s) {', '.join(unknown)}; choose from {', '.join(SCOPES)}")
    if ttl_seconds > settings.jwt_max_ttl_s:
        raise ValueError(
            f"a token may live at most {settings.jwt_max_ttl_s} s (MEMWRIGHT_JWT_MAX_TTL_S); asked for {ttl_seconds}"
        )
    now = int(time.time())
    claims = {
        "sub": subject,
        "scope": " ".join(scopes),
        "iss": settings.jwt_issuer,
        "aud": settings.jwt_audience,
        "iat": now,
        "exp": now + ttl_seconds,
    }
    if settings.jwt_private_key_file:
        headers = {"kid": settings.jwt_kid} if settings.jwt_kid else None
        return jwt.encode(claims, _private_key(settings), algorithm="RS256", headers=headers)
    if not settings.jwt_secret:
        raise ValueError("set MEMWRIGHT_JWT_SECRET (HS256) or MEMWRIGHT_JWT_PRIVATE_KEY_FILE (RS256) to mint tokens")
    return jwt.encode(claims, settings.jwt_secret, algorithm="HS256")


class _VerifiedTokens:
    """Tokens that verified a moment ago, so a caller that sends the same token with every request
    (a service posting signals) pays for the signature check once, not per request: on ingest the
    check was half of a request's CPU. An entry is kept until the token expires but at most `ttl_s`,
    so a key taken out of the JWKS file stops verifying within that time; only successes are kept,
    under the verifying settings as well as the token, and at most `max_entries` of them."""

    def __init__(self, ttl_s: float = 30.0, max_entries: int = 10_000, clock: Callable[[], float] = time.time) -> None:
        self.ttl_s = ttl_s
        self.max_entries = max_entries
        self.clock = clock
        self._entries: dict[tuple[str, tuple[str, ...]], tuple[float, Principal]] = {}

    @staticmethod
    def _key(settings: AuthSettings, token: str) -> tuple[str, tuple[str, ...]]:
        verifying = (settings.jwt_secret, settings.jwt_jwks_file, settings.jwt_issuer, settings.jwt_audience)
        return token, (*verifying, str(settings.jwt_max_ttl_s))

    def get(self, settings: AuthSettings, token: str) -> Principal | None:
        key = self._key(settings, token)
        entry = self._entries.get(key)
        if entry is None:
            return None
        if self.clock() >= entry[0]:
            self._entries.pop(key, None)
            return None
        return entry[1]

    def put(self, settings: AuthSettings, token: str, principal: Principal, expires_at: float) -> None:
        if len(self._entries) >= self.max_entries:
            self._entries.pop(next(iter(self._entries)), None)  # the oldest
        self._entries[self._key(settings, token)] = (min(expires_at, self.clock() + self.ttl_s), principal)

    def clear(self) -> None:
        self._entries.clear()


VERIFIED_TOKENS = _VerifiedTokens()


def verify(settings: AuthSettings, header: str | None) -> Principal:
    if not header or not header.startswith("Bearer "):
        raise AuthError(401, "missing bearer token (Authorization: Bearer <jwt>)")
    token = header.removeprefix("Bearer ").strip()
    principal = VERIFIED_TOKENS.get(settings, token)
    if principal is None:
        principal, expires_at = _verify_signed(settings, token)
        VERIFIED_TOKENS.put(settings, token, principal, expires_at)
    return principal


def _verify_signed(settings: AuthSettings, token: str) -> tuple[Principal, float]:
    """Check the token's signature and claims: its principal and when it expires."""
    try:
        unverified = jwt.get_unverified_header(token)
    except jwt.InvalidTokenError as exc:
        raise AuthError(401, f"invalid token: {exc}") from None
    alg = unverified.get("alg")
    # each algorithm only with its own key material: no HS256 token is ever checked against a public key
    if alg == "HS256" and settings.jwt_secret:
        key: Any = settings.jwt_secret
    elif alg == "RS256" and settings.jwt_jwks_file:
        kid = unverified.get("kid")
        key = _rs256_key(settings, kid if isinstance(kid, str) else None)
    else:
        accepted = [a for a, on in (("HS256", settings.jwt_secret), ("RS256", settings.jwt_jwks_file)) if on]
        raise AuthError(401, f"invalid token: algorithm {alg!r} is not accepted (accepted: {', '.join(accepted)})")
    try:
        claims = jwt.decode(
            token,
            key,
            algorithms=[alg],
            audience=settings.jwt_audience,
            issuer=settings.jwt_issuer,
            options={"require": ["exp", "sub", "iss", "aud"]},
        )
    except jwt.ExpiredSignatureError:
        raise AuthError(401, "token expired") from None
    except jwt.InvalidTokenError as exc:
        raise AuthError(401, f"invalid token: {exc}") from None
    if not isinstance(claims["sub"], str) or not claims["sub"]:
        raise AuthError(401, "invalid token: sub must be a non-empty string")
    for name in ("exp", "iat", "nbf"):  # PyJWT also takes "1700000000" (a string) and converts it
        if name in claims and (isinstance(claims[name], bool) or not isinstance(claims[name], int | float)):
            raise AuthError(401, f"invalid token: {name} must be a number (seconds since the epoch), not a string")
    expires_at = float(claims["exp"])
    lifetime = expires_at - float(claims.get("iat", time.time()))
    remaining = expires_at - time.time()
    if max(lifetime, remaining) > settings.jwt_max_ttl_s + _LEEWAY_S:
        raise AuthError(
            401,
            f"invalid token: it lives {max(lifetime, remaining):.0f} s; at most {settings.jwt_max_ttl_s} s are "
            "accepted (MEMWRIGHT_JWT_MAX_TTL_S): mint a shorter-lived token",
        )
    return Principal(claims["sub"], frozenset(str(claims.get("scope", "")).split())), expires_at


def authorize(settings: AuthSettings, request: web.Request, scope: str, user_id: str | None = None) -> Principal:
    principal = verify(settings, request.headers.get("Authorization"))
    if not principal.has_scope(scope):
        raise AuthError(403, f"token lacks scope {scope}")
    if user_id is not None and not principal.may_access(user_id):
        raise AuthError(403, "token may not access this user's data")
    return principal
