"""api: memory reads for working agents and users.

Every route requires a bearer JWT (memwright.auth); a user token reaches only its own user.
"""

from __future__ import annotations

import asyncio
import re
import time
import uuid
from collections.abc import Awaitable, Callable

import asyncpg
import structlog
from aiohttp import web

from memwright import logs, metrics
from memwright.auth import AuthError, authorize
from memwright.ops import Readiness, ops_app, run_until_stopped, start_site
from memwright.settings import ApiSettings
from memwright.store import memories
from memwright.store.db import create_pool

log = structlog.get_logger()
POOL = web.AppKey("pool", asyncpg.Pool)
USER_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.:@-]{0,127}$")
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def _error(status: int, reason: str) -> web.Response:
    return web.json_response({"error": reason}, status=status)


def _user_id(request: web.Request) -> str:
    user_id = request.match_info["user_id"]
    if not USER_ID.match(user_id):
        raise web.HTTPBadRequest(text='{"error": "user_id must be 1-128 letters, digits, _ . : @ -"}',
                                 content_type="application/json")
    return user_id


def _memory_id(request: web.Request) -> uuid.UUID:
    try:
        return uuid.UUID(request.match_info["memory_id"])
    except ValueError:
        raise web.HTTPBadRequest(text='{"error": "memory_id must be a UUID"}', content_type="application/json") from None


def build_app(settings: ApiSettings, pool: asyncpg.Pool) -> web.Application:
    @web.middleware
    async def observe(request: web.Request, handler: Handler) -> web.StreamResponse:
        started = time.monotonic()
        route = request.match_info.route.resource.canonical if request.match_info.route.resource else "unmatched"
        status = 500
        try:
            try:
                response = await handler(request)
            except AuthError as exc:
                response = exc.response()
            status = response.status
            return response
        except web.HTTPException as exc:
            status = exc.status
            raise
        finally:
            metrics.API_REQUESTS.labels(route, str(status)).inc()
            metrics.API_LATENCY.labels(route).observe(time.monotonic() - started)

    async def list_memories(request: web.Request) -> web.Response:
        user_id = _user_id(request)
        authorize(settings, request, "memories:read", user_id)
        items, etag = await memories.list_previews(pool, user_id)
        if request.headers.get("If-None-Match") == etag:
            return web.Response(status=304, headers={"ETag": etag})
        return web.json_response({"user_id": user_id, "memories": items}, headers={"ETag": etag})

    async def get_memory(request: web.Request) -> web.Response:
        user_id = _user_id(request)
        memory_id = _memory_id(request)
        authorize(settings, request, "memories:read", user_id)
        found = await memories.get_with_receipts(pool, user_id, memory_id)
        if found is None:
            return _error(404, f"no memory {memory_id} for this user")
        return web.json_response(found)

    async def memory_history(request: web.Request) -> web.Response:
        user_id = _user_id(request)
        memory_id = _memory_id(request)
        authorize(settings, request, "memories:read", user_id)
        return web.json_response({"memory_id": str(memory_id), "history": await memories.history(pool, user_id, memory_id)})

    async def list_hypotheses(request: web.Request) -> web.Response:
        user_id = _user_id(request)
        authorize(settings, request, "memories:read", user_id)
        return web.json_response({"user_id": user_id, "hypotheses": await memories.hypotheses(pool, user_id)})

    app = web.Application(middlewares=[observe], client_max_size=64 * 1024)
    app[POOL] = pool
    app.router.add_get("/v1/users/{user_id}/memories", list_memories)
    app.router.add_get("/v1/users/{user_id}/memories/{memory_id}", get_memory)
    app.router.add_get("/v1/users/{user_id}/memories/{memory_id}/history", memory_history)
    app.router.add_get("/v1/users/{user_id}/hypotheses", list_hypotheses)
    return app


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
