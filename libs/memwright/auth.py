"""Bearer JWT authentication and authorization for the public HTTP endpoints.

Tokens are HS256 with a shared secret (MEMWRIGHT_JWT_SECRET), issuer and audience
checked, expiry required. Scopes: signals:write, memories:read, memories:write, admin.
A user token (sub = the user id) reaches only that user's data; a service token
(sub = "service:<name>") reaches any user's data when it carries the scope.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import jwt
from aiohttp import web

from memwright.settings import AuthSettings

SCOPES = ("signals:write", "memories:read", "memories:write", "admin")
SERVICE_PREFIX = "service:"


@dataclass(frozen=True)
class Principal:
    subject: str
    scopes: frozenset[str]

    @property
    def is_service(self) -> bool:
        return self.subject.startswith(SERVICE_PREFIX)

    def may_access(self, user_id: str) -> bool:
        return self.is_service or "admin" in self.scopes or self.subject == user_id


class AuthError(Exception):
    """401 (who are you?) or 403 (you may not); `response()` renders it for aiohttp."""

    def __init__(self, status: int, reason: str) -> None:
        super().__init__(reason)
        self.status = status
        self.reason = reason

    def response(self) -> web.Response:
        headers = {"WWW-Authenticate": 'Bearer realm="memwright"'} if self.status == 401 else None
        return web.json_response({"error": self.reason}, status=self.status, headers=headers)


def mint(settings: AuthSettings, subject: str, scopes: list[str], ttl_seconds: int = 3600) -> str:
    unknown = [s for s in scopes if s not in SCOPES]
    if unknown:
        raise ValueError(f"unknown scope(s) {', '.join(unknown)}; choose from {', '.join(SCOPES)}")
    now = int(time.time())
    claims = {
        "sub": subject,
        "scope": " ".join(scopes),
        "iss": settings.jwt_issuer,
        "aud": settings.jwt_audience,
        "iat": now,
        "exp": now + ttl_seconds,
    }
    return jwt.encode(claims, settings.jwt_secret, algorithm="HS256")


def verify(settings: AuthSettings, header: str | None) -> Principal:
    if not header or not header.startswith("Bearer "):
        raise AuthError(401, "missing bearer token (Authorization: Bearer <jwt>)")
    try:
        claims = jwt.decode(
            header.removeprefix("Bearer ").strip(),
            settings.jwt_secret,
            algorithms=["HS256"],
            audience=settings.jwt_audience,
            issuer=settings.jwt_issuer,
            options={"require": ["exp", "sub", "iss", "aud"]},
        )
    except jwt.ExpiredSignatureError:
        raise AuthError(401, "token expired") from None
    except jwt.InvalidTokenError as exc:
        raise AuthError(401, f"invalid token: {exc}") from None
    return Principal(str(claims["sub"]), frozenset(str(claims.get("scope", "")).split()))


def authorize(settings: AuthSettings, request: web.Request, scope: str, user_id: str | None = None) -> Principal:
    principal = verify(settings, request.headers.get("Authorization"))
    if scope not in principal.scopes and "admin" not in principal.scopes:
        raise AuthError(403, f"token lacks scope {scope}")
    if user_id is not None and not principal.may_access(user_id):
        raise AuthError(403, "token may not access this user's data")
    return principal
