"""Black-box probes: process memory and sockets from /proc, PostgreSQL statistics, Prometheus scrapes.

How "the ingest path makes zero database and LLM calls" is counted, not assumed:

1. Sockets. Every TCP connection a process holds is a `socket:[inode]` under /proc/<pid>/fd;
   /proc/<pid>/net/tcp{,6} maps inodes to peers. Sampled through the ingest load, the ingest
   process must hold no connection to the PostgreSQL port nor to the LLM endpoint's port, even
   though its environment names both. A positive control (a service that does use PostgreSQL)
   proves the probe sees connections when there are some.
2. PostgreSQL. pg_stat_database.sessions of the bench database (client sessions; read from
   ANOTHER database, so the probe does not count itself) must not move while only ingest runs
   against it. (xact_commit would move anyway: autovacuum workers visit every database.)
3. LLM. A fake OpenAI-compatible endpoint counts every request it gets; its counter must stay
   at zero through the ingest load.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import select
import socket
import sys
import time
from typing import Any

import aiohttp
import asyncpg

TCP_LISTEN = "0A"


def rss_bytes(pid: int) -> int:
    """Resident set size of a process (VmRSS), 0 if it is gone."""
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


def cpu_seconds(pid: int) -> float:
    """User + system CPU time a process has used so far (/proc/<pid>/stat), 0 if it is gone."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _hex_address(field_: str) -> tuple[str, int]:
    addr, port = field_.split(":")
    raw = bytes.fromhex(addr)
    if len(raw) == 4:
        host = socket.inet_ntop(socket.AF_INET, raw[::-1])
    else:  # /proc stores IPv6 as four little-endian 32-bit words
        host = socket.inet_ntop(socket.AF_INET6, b"".join(raw[i : i + 4][::-1] for i in range(0, 16, 4)))
    return host, int(port, 16)


def tcp_peers(pid: int) -> list[tuple[str, int]]:
    """(host, port) of every non-listening TCP socket the process holds."""
    inodes = set()
    try:
        for fd in os.listdir(f"/proc/{pid}/fd"):
            try:
                link = os.readlink(f"/proc/{pid}/fd/{fd}")
            except OSError:
                continue
            if link.startswith("socket:["):
                inodes.add(link[8:-1])
    except OSError:
        return []
    peers = []
    for table in ("tcp", "tcp6"):
        try:
            with open(f"/proc/{pid}/net/{table}") as f:
                lines = f.read().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            cols = line.split()
            if cols[9] in inodes and cols[3] != TCP_LISTEN:
                peers.append(_hex_address(cols[2]))
    return peers


def connections_to(pid: int, port: int) -> int:
    return sum(1 for _, p in tcp_peers(pid) if p == port)


class Watch:
    """Peak RSS of some processes and peak connection counts of some (pid, port) pairs, sampled
    every `interval_s` while a load runs, in a CHILD process: one sample reads /proc/<pid>/fd and
    the whole /proc/net/tcp table (~10 ms under load), and done in the bench's event loop it
    stalled the load generator and put that stall into the measured latencies.

        async with Watch(rss={"ingest": pid}, sockets={"postgres": (pid, 5432)}) as watch:
            ...load...
        watch.rss_peak["ingest"], watch.sockets_peak["postgres"], watch.samples
    """

    def __init__(
        self, rss: dict[str, int], sockets: dict[str, tuple[int, int]] | None = None, interval_s: float = 0.25
    ) -> None:
        self.spec = {"rss": rss, "sockets": sockets or {}, "interval_s": interval_s}
        self.rss_peak: dict[str, int] = dict.fromkeys(rss, 0)
        self.sockets_peak: dict[str, int] = dict.fromkeys(sockets or {}, 0)
        self.samples = 0
        self._child: asyncio.subprocess.Process | None = None

    async def __aenter__(self) -> Watch:
        self._child = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "bench.probes", json.dumps(self.spec),
            stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
        )  # fmt: skip
        assert self._child.stdout
        await self._child.stdout.readline()  # the first sample is taken: the load may start
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self._child and self._child.stdin
        self._child.stdin.close()  # end of the load: the child prints its peaks and exits
        out, _ = await self._child.communicate()
        result = json.loads(out)
        self.rss_peak, self.sockets_peak, self.samples = result["rss"], result["sockets"], result["samples"]


def _watch(spec: dict[str, Any]) -> None:
    """The child of Watch: sample until stdin closes, then print the peaks as one JSON line."""
    rss = dict.fromkeys(spec["rss"], 0)
    sockets = dict.fromkeys(spec["sockets"], 0)
    samples = 0
    while True:
        for name, pid in spec["rss"].items():
            rss[name] = max(rss[name], rss_bytes(pid))
        for name, (pid, port) in spec["sockets"].items():
            sockets[name] = max(sockets[name], connections_to(pid, port))
        samples += 1
        if samples == 1:
            print("sampling", flush=True)
        ready, _, _ = select.select([sys.stdin], [], [], spec["interval_s"])
        if ready and not os.read(sys.stdin.fileno(), 1024):
            break
    print(json.dumps({"rss": rss, "sockets": sockets, "samples": samples}), flush=True)


async def client_sessions(admin_dsn: str, database: str) -> int:
    """Client sessions ever opened to `database` (pg_stat_database.sessions counts client backends
    only, not autovacuum), read over a connection to another database so the probe is not counted."""
    conn = await asyncpg.connect(admin_dsn)
    try:
        value = await conn.fetchval("SELECT sessions FROM pg_stat_database WHERE datname = $1", database)
        return int(value or 0)
    finally:
        await conn.close()


async def backends_on(admin_dsn: str, database: str) -> int:
    conn = await asyncpg.connect(admin_dsn)
    try:
        return int(await conn.fetchval("SELECT count(*) FROM pg_stat_activity WHERE datname = $1", database))
    finally:
        await conn.close()


_SAMPLE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[^}]*\})?\s+([-+0-9.eEinfNa]+)$")


async def scrape(http: aiohttp.ClientSession, url: str, metric: str) -> float:
    """Sum of every sample of `metric` (all label sets) on a Prometheus /metrics page: 0 if the metric
    is absent, nan if the page cannot be fetched."""
    try:
        async with http.get(url, timeout=aiohttp.ClientTimeout(total=5)) as r:
            text = await r.text()
    except (aiohttp.ClientError, TimeoutError):
        return float("nan")
    total = 0.0
    for line in text.splitlines():
        m = _SAMPLE.match(line)
        if m and m.group(1) == metric:
            total += float(m.group(3))
    return total


async def wait_for(probe, timeout_s: float, interval_s: float = 0.2):  # type: ignore[no-untyped-def]
    """Poll an async probe until it returns something truthy; return it, or None at the deadline."""
    deadline = time.monotonic() + timeout_s
    while True:
        value = await probe()
        if value:
            return value
        if time.monotonic() > deadline:
            return None
        await asyncio.sleep(interval_s)


if __name__ == "__main__":
    _watch(json.loads(sys.argv[1]))
