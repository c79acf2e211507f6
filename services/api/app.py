"""api: the memory API for working agents and users.

Every route is declared once, in the route table at the end of `build_app`, with the
access it needs (`Access`). One middleware (`guard`) authenticates the bearer JWT (401),
applies the rate limits of the verified identity (429, services/api/limits.py), checks the scope
(403), checks that the token may reach the {user_id} in the path (403) and the body size (413)
before any handler runs. A route without a declared access is refused at start (and with 403 if
added later), so no route can skip authentication. Handlers validate input (400) and call the store; the SQL
lives in memwright.store (memories.py, user_writes.py, erasure.py).
"""

from __future__ import annotations

import asyncio
import json
import re
import time
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import asyncpg
import structlog
from aiohttp import web
from memwright import logs, metrics
from memwright.auth import AuthError, Principal, is_user_id_reserved, verify
from memwright.ops import Readiness, ops_app, run_until_stopped, start_site
from memwright.services.api import console, context, context_cache, exports, openapi
from memwright.services.api.limits import RequestLimits
from memwright.settings import ApiSettings
from memwright.store import erasure, memories, user_writes
from memwright.store.db import create_pool

log = structlog.get_logger()
POOL = web.AppKey("pool", asyncpg.Pool)
ACCESS = web.AppKey("access", dict)  # handler -> Access, the route table's policy
PRINCIPAL = web.RequestKey("principal", Principal)
USER_ID = re.compile(openapi.USER_ID_PATTERN.removesuffix("$") + r"\Z")
IF_MATCH = re.compile(openapi.IF_MATCH_PATTERN.removesuffix("$") + r"\Z")
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


@dataclass(frozen=True)
class Access:
    """What a route needs. scope None: any valid token. A {user_id} in the path: the token must
    reach that user. service_scope: the scope a service token needs instead (admin for erasure)."""

    scope: str | None
    service_scope: str | None = None

    def required(self, principal: Principal) -> str | None:
        return self.service_scope if principal.is_service and self.service_scope else self.scope


class BadRequest(Exception):
    def __init__(self, reason: str, status: int = 400) -> None:
        super().__init__(reason)
        self.reason = reason
        self.status = status


class ClientGone(Exception):
    """The client hung up before its request body arrived: nobody is left to answer."""


CLIENT_GONE = "499"  # the code counted for it (nginx's "client closed request"); no answer is sent


def _error(status: int, reason: str, headers: dict[str, str] | None = None) -> web.Response:
    return web.json_response({"error": reason}, status=status, headers=headers)


# ---- input -----------------------------------------------------------------------------


def _memory_id(request: web.Request) -> uuid.UUID:
    try:
        return uuid.UUID(request.match_info["memory_id"])
    except ValueError:
        raise BadRequest("memory_id must be a UUID") from None


def _if_match(request: web.Request) -> int | None:
    raw = request.headers.get("If-Match")
    if raw is None:
        return None
    if not IF_MATCH.match(raw.strip()):
        raise BadRequest('If-Match must be the memory\'s ETag, its version in quotes (for example "3"), or *')
    digits = raw.strip().removeprefix("W/").strip('"')
    return None if digits == "*" else int(digits)


async def read_body(request: web.Request, timeout_s: float) -> bytes:
    """The whole body, or 408 when it does not arrive within `timeout_s` (a slow or stalled sender
    holds no handler for longer); ClientGone when the client hangs up mid-body. Over the app's
    client_max_size: HTTPRequestEntityTooLarge (413)."""
    try:
        return await asyncio.wait_for(request.read(), timeout_s)
    except TimeoutError:
        raise BadRequest(f"the request body did not arrive within {timeout_s:g} s; send it at once", 408) from None
    except ConnectionResetError:
        raise ClientGone() from None


def decode_json(raw: bytes) -> object:
    """JSON of any depth or size, or BadRequest with the reason (never RecursionError or ValueError)."""
    try:
        return json.loads(raw.decode("utf-8"))
    except RecursionError:
        raise BadRequest("body is not JSON this service reads: nested too deeply") from None
    except ValueError as exc:  # UnicodeDecodeError, JSONDecodeError, an integer over Python's 4,300 digits
        raise BadRequest(f"body is not JSON: {exc}") from None


async def _body(request: web.Request, fields: tuple[str, ...], timeout_s: float) -> dict[str, Any]:
    body = decode_json(await read_body(request, timeout_s))
    if not isinstance(body, dict):
        raise BadRequest("body must be a JSON object")
    unknown = sorted(set(body) - set(fields))
    if unknown:
        raise BadRequest(f"unknown field(s) {', '.join(unknown)}; allowed: {', '.join(fields)}")
    return body


def _memory_etag(version: int) -> dict[str, str]:
    return {"ETag": f'"{version}"'}


# ---- the app ---------------------------------------------------------------------------


def build_app(settings: ApiSettings, pool: asyncpg.Pool, limits: RequestLimits | None = None) -> web.Application:
    limits = limits or RequestLimits(settings)
    access: dict[Handler, Access] = {}
    spec = openapi.document(settings)
    # the query parameters each operation declares; anything else is refused with a 400
    query_params = {
        (path, method.upper()): {p["name"] for p in op.get("parameters", []) if p.get("in") == "query"}
        for path, operations in spec["paths"].items()
        for method, op in operations.items()
    }

    @web.middleware
    async def guard(request: web.Request, handler: Handler) -> web.StreamResponse:
        if len(request.match_info.apps) > 1:  # the console (a sub-app) has its own guard: console.py
            return await handler(request)
        started = time.monotonic()
        resource = request.match_info.route.resource
        route = resource.canonical if resource else "unmatched"
        try:
            response = await _guarded(request, handler)
        except AuthError as exc:
            response = exc.response()
        except BadRequest as exc:
            response = _error(exc.status, exc.reason)
        except ClientGone:
            log.info("api_client_gone", route=route, method=request.method)
            metrics.API_REQUESTS.labels(route, CLIENT_GONE).inc()
            metrics.API_LATENCY.labels(route).observe(time.monotonic() - started)
            return _error(400, "the client closed the connection before sending the whole body")
        except user_writes.WriteRefused as exc:
            response = _error(exc.status, exc.reason)
        except web.HTTPException as exc:  # 404/405 from the router, 413 from reading the body
            if exc.status < 400:
                raise
            headers = {k: v for k, v in exc.headers.items() if k in ("Allow",)}
            reason = exc.reason if exc.status != 413 else f"body larger than {settings.max_body_bytes} bytes"
            response = _error(exc.status, reason, headers)
        except Exception:
            log.exception("api_request_failed", route=route, method=request.method)
            response = _error(500, "internal error; the api log has the details")
        metrics.API_REQUESTS.labels(route, str(response.status)).inc()
        metrics.API_LATENCY.labels(route).observe(time.monotonic() - started)
        return response

    async def _guarded(request: web.Request, handler: Handler) -> web.StreamResponse:
        match = request.match_info
        if match.http_exception is not None:
            raise match.http_exception
        principal = verify(settings, request.headers.get("Authorization"))  # 401: missing, expired, bad, ...
        needs = access.get(match.handler)
        if needs is None:  # fail closed: never serve a route without a declared access
            raise AuthError(403, "this route has no access policy")
        refused = limits.take(principal, match.get("user_id"))  # keyed on who the token verified as
        if refused is not None:
            retry_after = limits.per_user.retry_after(refused.wait)
            return _error(429, f"{refused.reason}; retry in {retry_after} s", {"Retry-After": retry_after})
        scope = needs.required(principal)
        if scope is not None and not principal.has_scope(scope):
            raise AuthError(403, f"token lacks scope {scope}")
        if "user_id" in match:
            user_id = match["user_id"]
            if not USER_ID.match(user_id):
                raise BadRequest("user_id must be 1-128 letters, digits, _ . : @ -, starting with a letter or digit")
            if is_user_id_reserved(user_id):
                raise BadRequest("user_id must not start with 'service:', the prefix of service tokens' subjects")
            if not principal.may_access(user_id):  # tenant isolation
                raise AuthError(403, "token may not access this user's data")
        declared = query_params.get((match.route.resource.canonical, request.method), set())  # type: ignore[union-attr]
        unknown = sorted(set(request.query) - declared)
        if unknown:
            accepted = ", ".join(sorted(declared)) or "none"
            raise BadRequest(
                f"unknown query parameter(s) {', '.join(map(repr, unknown))}; this route accepts: {accepted}"
            )
        if request.content_length is not None and request.content_length > settings.max_body_bytes:
            return _error(413, f"body larger than {settings.max_body_bytes} bytes")
        request[PRINCIPAL] = principal
        return await handler(request)

    # ---- reads -------------------------------------------------------------------------

    async def get_openapi(request: web.Request) -> web.Response:
        return web.json_response(spec)

    async def list_memories(request: web.Request) -> web.Response:
        user_id = request.match_info["user_id"]
        items, etag = await memories.list_previews(pool, user_id)
        if request.headers.get("If-None-Match") == etag:
            return web.Response(status=304, headers={"ETag": etag})
        return web.json_response({"user_id": user_id, "memories": items}, headers={"ETag": etag})

    async def get_context(request: web.Request) -> web.Response:
        user_id = request.match_info["user_id"]
        fmt = request.query.get("format", "json")
        if fmt not in ("json", "text"):
            raise BadRequest("format must be json or text")
        if_none_match = request.headers.get("If-None-Match")
        entry = None
        if if_none_match or reads.cache.holds(user_id):
            # the cheap check: the user's memory-set version, one primary-key probe (coalesced with the
            # checks of concurrent requests into one statement); no preview is read or rendered
            version = await reads.checks.version(user_id)
            entry = reads.cache.get(user_id, version)
            etag = entry.etag if entry else context_cache.etag(user_id, version)
            if context_cache.not_modified(if_none_match, etag):
                metrics.API_CONTEXT_READS.labels("not_modified").inc()
                return web.Response(status=304, headers={"ETag": etag})
        if entry is None:
            version, items = await memories.previews_at_version(pool, user_id)  # one statement, one snapshot
            entry = reads.cache.put(context_cache.render(user_id, version, items))
            metrics.API_CONTEXT_READS.labels("miss").inc()
        else:
            metrics.API_CONTEXT_READS.labels("hit").inc()
        return entry.response(fmt)

    async def get_memory(request: web.Request) -> web.Response:
        user_id, memory_id = request.match_info["user_id"], _memory_id(request)
        found = await memories.get_with_receipts(pool, user_id, memory_id)
        if found is None:
            return _error(404, f"no memory {memory_id} for this user")
        return web.json_response(found, headers=_memory_etag(found["version"]))

    async def memory_history(request: web.Request) -> web.Response:
        user_id, memory_id = request.match_info["user_id"], _memory_id(request)
        entries = await memories.history(pool, user_id, memory_id)
        if not entries and await memories.get_with_receipts(pool, user_id, memory_id) is None:
            return _error(404, f"no memory and no history {memory_id} for this user")
        return web.json_response({"memory_id": str(memory_id), "history": entries})

    async def list_hypotheses(request: web.Request) -> web.Response:
        user_id = request.match_info["user_id"]
        return web.json_response({"user_id": user_id, "hypotheses": await memories.hypotheses(pool, user_id)})

    async def message_status(request: web.Request) -> web.Response:
        """Where a signal is (swept -> curated) and what came of it (libs/memwright/store/status.py)."""
        from memwright.store import status

        user_id, message_id = request.match_info["user_id"], request.match_info["message_id"]
        if not re.fullmatch(openapi.MESSAGE_ID_PATTERN.removesuffix("$"), message_id):
            raise BadRequest("message_id must be 1-128 letters, digits, _ . : @ -, starting with a letter or digit")
        async with pool.acquire() as conn:
            found = await status.status_or_reason(conn, user_id, message_id)
        if isinstance(found, str):
            return _error(404, found)
        return web.json_response(found)

    async def export_user(request: web.Request) -> web.Response:
        return await exports.download(pool, request.match_info["user_id"])

    # ---- writes by the user ------------------------------------------------------------

    async def create_memory(request: web.Request) -> web.Response:
        user_id = request.match_info["user_id"]
        body = await _body(request, ("text", "kind", "reason"), settings.body_read_timeout_s)
        if "text" not in body:
            raise BadRequest("text is required")
        text = user_writes.check_string(body["text"], "text", settings.max_memory_chars)
        kind = user_writes.check_kind(body.get("kind", "preference"))
        reason = user_writes.check_string(body.get("reason", ""), "reason", openapi.REASON_MAX, allow_empty=True)
        async with pool.acquire() as conn:
            created = await user_writes.create(
                conn,
                user_id,
                text,
                kind,
                request[PRINCIPAL].subject,
                reason or "written by the user",
                settings.user_memory_limit,
            )
        location = context.memory_path(user_id, created["id"])
        return web.json_response(
            created, status=201, headers={"Location": location, **_memory_etag(created["version"])}
        )

    async def patch_memory(request: web.Request) -> web.Response:
        user_id, memory_id = request.match_info["user_id"], _memory_id(request)
        expected = _if_match(request)
        body = await _body(request, ("text", "kind", "reason"), settings.body_read_timeout_s)
        if "text" not in body and "kind" not in body:
            raise BadRequest("send text, kind or both")
        text = user_writes.check_string(body["text"], "text", settings.max_memory_chars) if "text" in body else None
        kind = user_writes.check_kind(body["kind"]) if "kind" in body else None
        reason = user_writes.check_string(body.get("reason", ""), "reason", openapi.REASON_MAX, allow_empty=True)
        async with pool.acquire() as conn:
            updated = await user_writes.update(
                conn,
                user_id,
                memory_id,
                text,
                kind,
                expected,
                request[PRINCIPAL].subject,
                reason or "edited by the user",
            )
        return web.json_response(updated, headers=_memory_etag(updated["version"]))  # user-written: no receipts

    async def delete_memory(request: web.Request) -> web.Response:
        user_id, memory_id = request.match_info["user_id"], _memory_id(request)
        expected = _if_match(request)
        reason = user_writes.check_string(
            request.query.get("reason", ""), "reason", openapi.REASON_MAX, allow_empty=True
        )
        async with pool.acquire() as conn:
            deleted = await user_writes.delete(
                conn, user_id, memory_id, expected, request[PRINCIPAL].subject, reason or "deleted by the user"
            )
        return web.json_response(deleted)

    async def erase_user(request: web.Request) -> web.Response:
        user_id = request.match_info["user_id"]
        async with pool.acquire() as conn:
            record = await erasure.erase(conn, user_id, request[PRINCIPAL].subject)
        log.info("user_erased", erasure_id=record["erasure_id"], requested_by=record["requested_by"])
        return web.json_response(record)

    # ---- the route table: every route with its access ---------------------------------

    read, write = Access("memories:read"), Access("memories:write")
    routes: list[tuple[str, str, Handler, Access]] = [
        ("GET", "/v1/openapi.json", get_openapi, Access(None)),
        ("GET", "/v1/users/{user_id}/memories", list_memories, read),
        ("POST", "/v1/users/{user_id}/memories", create_memory, write),
        ("GET", "/v1/users/{user_id}/context", get_context, read),
        ("GET", "/v1/users/{user_id}/memories/{memory_id}", get_memory, read),
        ("PATCH", "/v1/users/{user_id}/memories/{memory_id}", patch_memory, write),
        ("DELETE", "/v1/users/{user_id}/memories/{memory_id}", delete_memory, write),
        ("GET", "/v1/users/{user_id}/memories/{memory_id}/history", memory_history, read),
        ("GET", "/v1/users/{user_id}/hypotheses", list_hypotheses, read),
        ("GET", "/v1/users/{user_id}/messages/{message_id}", message_status, read),
        ("GET", "/v1/users/{user_id}/export", export_user, Access("memories:read", service_scope="admin")),
        ("DELETE", "/v1/users/{user_id}", erase_user, Access("memories:write", service_scope="admin")),
    ]
    app = web.Application(middlewares=[guard], client_max_size=settings.max_body_bytes)
    app[POOL] = pool
    app[context_cache.CONTEXT_READS] = reads = context_cache.ContextReads(pool, settings.context_cache_users)
    app[ACCESS] = access
    for method, path, handler, needs in routes:
        access[handler] = needs
        if method == "GET":
            app.router.add_get(path, handler)  # and HEAD
        else:
            app.router.add_route(method, path, handler)
    undeclared = [r for r in app.router.routes() if r.handler not in access]
    if undeclared:
        raise RuntimeError(f"routes without an access policy: {undeclared}")
    console.mount(app, settings, pool, limits)
    return app


def route_access(app: web.Application) -> dict[tuple[str, str], Access]:
    """(method, path) -> Access of every route, for the route-table security test."""
    table = app[ACCESS]
    own = [r for res in app.router.resources() if not isinstance(res, web.PrefixedSubAppResource) for r in res]
    return {(r.method, r.resource.canonical): table[r.handler] for r in own if r.resource}


async def serve(settings: ApiSettings, stop: asyncio.Event) -> None:
    pool = await create_pool(settings.pg_dsn, settings.pg_pool_min, settings.pg_pool_max)
    readiness = Readiness()
    readiness.add("postgres", lambda: pool.fetchval("SELECT true"))
    ops = await start_site(ops_app(readiness), settings.ops_host, settings.ops_port)
    site = await start_site(build_app(settings, pool), settings.http_host, settings.http_port)
    log.info("api_started", port=settings.http_port)
    await stop.wait()
    await site.cleanup()
    await ops.cleanup()
    await pool.close()
    log.info("api_stopped")


def main() -> None:
    settings = ApiSettings.from_env()
    logs.configure("api", settings.log_level, settings.log_json)
    run_until_stopped(lambda stop: serve(settings, stop))
