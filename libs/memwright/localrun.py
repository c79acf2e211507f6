"""Run the five services as local processes: used by `memwright demo` and the e2e tests."""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import aiohttp

SERVICES = ("ingest", "sweeper", "curator", "indexer", "api")


def free_ports(count: int) -> list[int]:
    """Ports the kernel just handed out as free on 127.0.0.1 (so parallel runs never collide)."""
    sockets = [socket.socket() for _ in range(count)]
    try:
        for s in sockets:
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in sockets]
    finally:
        for s in sockets:
            s.close()


class ServiceProcesses:
    """Start, probe and stop memwright services, each with its own ports and log file. A name
    `<service>:<n>` starts another instance of the service (e.g. `sweeper:2`), with ports of its own."""

    def __init__(self, env: dict[str, str], log_dir: Path) -> None:
        self.log_dir = log_dir
        ports = free_ports(2 * len(SERVICES))
        self._http = dict(zip(SERVICES, ports[: len(SERVICES)], strict=True))
        self._ops = dict(zip(SERVICES, ports[len(SERVICES) :], strict=True))
        self.procs: dict[str, subprocess.Popen[bytes]] = {}
        self.env = {**os.environ, **env}

    def ops_port(self, name: str) -> int:
        self._add_instance(name)
        return self._ops[name]

    def http_port(self, name: str) -> int:
        self._add_instance(name)
        return self._http[name]

    def _add_instance(self, name: str) -> None:
        if name not in self._ops:
            self._http[name], self._ops[name] = free_ports(2)

    def url(self, name: str) -> str:
        return f"http://127.0.0.1:{self.http_port(name)}"

    def ops_url(self, name: str) -> str:
        return f"http://127.0.0.1:{self.ops_port(name)}"

    def start(self, *names: str, extra_env: dict[str, str] | None = None) -> None:
        self.log_dir.mkdir(parents=True, exist_ok=True)
        for name in names or SERVICES:
            env = {
                **self.env,
                "MEMWRIGHT_OPS_PORT": str(self.ops_port(name)),
                "MEMWRIGHT_HTTP_PORT": str(self.http_port(name)),
                **(extra_env or {}),
            }
            log = open(self.log_dir / f"{name}.log", "ab")
            service = name.partition(":")[0]
            self.procs[name] = subprocess.Popen(
                [sys.executable, "-m", "memwright", service], env=env, stdout=log, stderr=subprocess.STDOUT
            )

    async def wait_ready(self, *names: str, timeout: float = 60.0) -> None:
        deadline = time.monotonic() + timeout
        pending = list(names or self.procs)
        async with aiohttp.ClientSession() as http:
            while pending:
                name = pending[0]
                proc = self.procs[name]
                if proc.poll() is not None:
                    raise RuntimeError(f"{name} exited with {proc.returncode}; see {self.log_dir / (name + '.log')}")
                try:
                    async with http.get(self.ops_url(name) + "/readyz", timeout=aiohttp.ClientTimeout(total=2)) as r:
                        if r.status == 200:
                            pending.pop(0)
                            continue
                except (aiohttp.ClientError, TimeoutError):
                    pass
                if time.monotonic() > deadline:
                    raise TimeoutError(f"{name} not ready after {timeout:.0f}s; see {self.log_dir / (name + '.log')}")
                await asyncio.sleep(0.2)

    def stop(self, *names: str, timeout: float = 30.0) -> dict[str, int | None]:
        """SIGTERM, wait, then SIGKILL; return each exit code."""
        targets = list(names or self.procs)
        for name in targets:
            if self.procs[name].poll() is None:
                self.procs[name].send_signal(signal.SIGTERM)
        codes: dict[str, int | None] = {}
        for name in targets:
            proc = self.procs.pop(name)
            try:
                codes[name] = proc.wait(timeout)
            except subprocess.TimeoutExpired:
                proc.kill()
                codes[name] = proc.wait()
        return codes

    def kill(self, name: str) -> None:
        proc = self.procs.pop(name)
        proc.kill()
        proc.wait()
