"""Load generators: an open-loop one for latency at a fixed offered load, a closed-loop one for ceilings.

Open loop: request i is DUE at t0 + i / rate, whatever happened to the requests before it.
Its latency is measured from that due time, not from when it was actually sent, so a
stalled server (or a generator that falls behind) shows up as latency instead of
silently lowering the load: no coordinated omission. In-flight requests are capped
(`max_in_flight`) to keep the load bounded; a request waiting for a slot is still timed
from its due time. Whatever is unanswered `drain_s` after the last due time counts as
a timeout.

Closed loop: `concurrency` workers send back to back for `duration_s`: the most the
target does on this machine, which is what a ceiling is.

Both pause the load generator's own cyclic garbage collector while they run (`quiet_gc`): a
full collection over the thousands of tasks and responses of a load stalled this process for
tens of milliseconds at a time, and every request due meanwhile counted the stall as latency of
the target (a context read at 1,000 req/s: p99 70 ms with the collector, 7-10 ms without;
the stall was one 80 ms pause). Reference counting still frees everything else; the cycles
are collected after the load.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import math
import time
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

# send(i) performs request i and returns how many signals it delivered (0 = refused).
Send = Callable[[int], Awaitable[int]]


def percentile(values: list[float], q: float) -> float:
    """Nearest-rank percentile (q in 0..100) of unsorted values; nan for no values."""
    if not values:
        return math.nan
    ordered = sorted(values)
    rank = max(1, math.ceil(q / 100 * len(ordered)))
    return ordered[rank - 1]


@dataclass
class LoadResult:
    offered_rps: float  # requests/s asked for (nan for a closed loop)
    duration_s: float  # length of the schedule (open) or of the run (closed)
    sent: int = 0
    ok: int = 0
    refused: int = 0  # answered, but not accepted (for example 503)
    errors: int = 0  # connection errors, exceptions
    timeouts: int = 0  # still unanswered at the drain deadline
    signals: int = 0  # signals delivered by the accepted requests
    elapsed_s: float = 0.0  # from the first due time to the last answer
    latencies_s: list[float] = field(default_factory=list, repr=False)  # accepted requests only

    @property
    def achieved_rps(self) -> float:
        return self.ok / self.elapsed_s if self.elapsed_s > 0 else 0.0

    @property
    def signals_per_s(self) -> float:
        return self.signals / self.elapsed_s if self.elapsed_s > 0 else 0.0

    def summary(self) -> dict[str, Any]:
        ms = [x * 1000 for x in self.latencies_s]
        return {
            "offered_rps": None if math.isnan(self.offered_rps) else round(self.offered_rps, 1),
            "achieved_rps": round(self.achieved_rps, 1),
            "signals_per_s": round(self.signals_per_s, 1),
            "p50_ms": _r(percentile(ms, 50)),
            "p99_ms": _r(percentile(ms, 99)),
            "max_ms": _r(max(ms) if ms else math.nan),
            "sent": self.sent,
            "ok": self.ok,
            "refused": self.refused,
            "errors": self.errors,
            "timeouts": self.timeouts,
        }


def _r(x: float) -> float | None:
    return None if math.isnan(x) else round(x, 2)


@contextlib.contextmanager
def quiet_gc() -> Iterator[None]:
    """No cyclic garbage collection in this process while a load runs (collected before and after)."""
    was_enabled = gc.isenabled()
    gc.collect()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()
        gc.collect()


async def open_loop(
    send: Send, rate: float, duration_s: float, max_in_flight: int = 512, drain_s: float = 15.0
) -> LoadResult:
    with quiet_gc():
        return await _open_loop(send, rate, duration_s, max_in_flight, drain_s)


async def _open_loop(send: Send, rate: float, duration_s: float, max_in_flight: int, drain_s: float) -> LoadResult:
    total = max(1, round(rate * duration_s))
    result = LoadResult(offered_rps=rate, duration_s=duration_s)
    slots = asyncio.Semaphore(max_in_flight)
    t0 = time.monotonic() + 0.05
    last_answer = t0

    async def one(i: int, due: float) -> None:
        nonlocal last_answer
        async with slots:
            try:
                delivered = await send(i)
            except Exception:
                delivered = -1
        now = time.monotonic()
        last_answer = max(last_answer, now)
        if delivered > 0:
            result.ok += 1
            result.signals += delivered
            result.latencies_s.append(now - due)  # from the DUE time: queueing is not hidden
        elif delivered == 0:
            result.refused += 1
        else:
            result.errors += 1

    tasks: list[asyncio.Task[None]] = []
    i = 0
    while i < total:
        now = time.monotonic()
        while i < total and t0 + i / rate <= now:  # launch everything that is due (bursts if we are late)
            tasks.append(asyncio.create_task(one(i, t0 + i / rate)))
            i += 1
        if i < total:
            await asyncio.sleep(max(0.0, t0 + i / rate - time.monotonic()))
    result.sent = total
    _, pending = await asyncio.wait(tasks, timeout=max(0.1, t0 + duration_s + drain_s - time.monotonic()))
    for task in pending:
        task.cancel()
    result.timeouts = len(pending)
    if pending:
        last_answer = time.monotonic()
        await asyncio.gather(*pending, return_exceptions=True)
    result.elapsed_s = max(last_answer - t0, duration_s)
    return result


async def closed_loop(send: Send, concurrency: int, duration_s: float) -> LoadResult:
    with quiet_gc():
        return await _closed_loop(send, concurrency, duration_s)


async def _closed_loop(send: Send, concurrency: int, duration_s: float) -> LoadResult:
    result = LoadResult(offered_rps=math.nan, duration_s=duration_s)
    start = time.monotonic()
    deadline = start + duration_s
    counter = iter(range(10**12))

    async def worker() -> None:
        while time.monotonic() < deadline:
            i = next(counter)
            began = time.monotonic()
            try:
                delivered = await send(i)
            except Exception:
                delivered = -1
            result.sent += 1
            if delivered > 0:
                result.ok += 1
                result.signals += delivered
                result.latencies_s.append(time.monotonic() - began)
            elif delivered == 0:
                result.refused += 1
            else:
                result.errors += 1

    await asyncio.gather(*(worker() for _ in range(concurrency)))
    result.elapsed_s = time.monotonic() - start
    return result
