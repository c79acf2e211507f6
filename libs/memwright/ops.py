"""Operational HTTP endpoints (/healthz, /readyz, /metrics) and the service lifecycle.

Ops endpoints run on their own port (MEMWRIGHT_OPS_PORT), apart from the public
API, so probes and Prometheus need no token and network policy can fence them.
"""

from __future__ import annotations

import asyncio
import signal
from collections.abc import Awaitable, Callable

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

ReadyCheck = Callable[[], Awaitable[bool] | bool]


class Readiness:
    """Named readiness checks; /readyz is 200 only when all of them pass."""

    def __init__(self) -> None:
        self._checks: dict[str, ReadyCheck] = {}

    def add(self, name: str, check: ReadyCheck) -> None:
        self._checks[name] = check

    async def report(self) -> dict[str, bool]:
        results: dict[str, bool] = {}
        for name, check in self._checks.items():
            try:
                outcome = check()
                results[name] = bool(await outcome if asyncio.iscoroutine(outcome) else outcome)
            except Exception:
                results[name] = False
        return results


def ops_app(readiness: Readiness) -> web.Application:
    async def healthz(_: web.Request) -> web.Response:
        return web.json_response({"status": "ok"})

    async def readyz(_: web.Request) -> web.Response:
        checks = await readiness.report()
        ok = all(checks.values())
        return web.json_response({"ready": ok, "checks": checks}, status=200 if ok else 503)

    async def metrics(_: web.Request) -> web.Response:
        resp = web.Response(body=generate_latest())
        resp.headers["Content-Type"] = CONTENT_TYPE_LATEST
        return resp

    app = web.Application()
    app.router.add_get("/healthz", healthz)
    app.router.add_get("/readyz", readyz)
    app.router.add_get("/metrics", metrics)
    return app


async def start_site(app: web.Application, host: str, port: int) -> web.AppRunner:
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    await web.TCPSite(runner, host, port).start()
    return runner


def run_until_stopped(main: Callable[[asyncio.Event], Awaitable[None]]) -> None:
    """Run `main(stop)` with SIGTERM/SIGINT setting `stop`; main must return after cleanup."""

    async def runner() -> None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        await main(stop)

    asyncio.run(runner())
