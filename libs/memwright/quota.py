"""Ingest's per-user quota: signals and bytes of signal text per user in fixed windows, per process.

One user (or a service speaking for one) cannot fill the topic and the evidence store: beyond
`signals` or `bytes` in a window of `window_s` seconds, a request is refused whole (429, with the
reason and when the window ends) and nothing of it is counted.
"""

from __future__ import annotations

import math
import time
from collections import OrderedDict
from collections.abc import Callable, Iterable
from dataclasses import dataclass


@dataclass(frozen=True)
class QuotaExceeded:
    user_id: str
    retry_after_s: int
    reason: str


class IngestQuota:
    def __init__(
        self,
        window_s: float,
        signals: int,
        bytes_: int,
        max_users: int = 100_000,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.window_s = window_s
        self.signals = signals
        self.bytes = bytes_
        self.max_users = max_users  # users kept at most; the least recently seen go first
        self.clock = clock
        self._used: OrderedDict[str, tuple[float, int, int]] = OrderedDict()  # user -> (window start, signals, bytes)

    def take(self, usage: Iterable[tuple[str, int]]) -> QuotaExceeded | None:
        """Charge (user_id, text bytes) per signal, all or nothing: None if within every user's quota."""
        wanted: dict[str, tuple[int, int]] = {}
        for user_id, size in usage:
            count, total = wanted.get(user_id, (0, 0))
            wanted[user_id] = (count + 1, total + size)
        now = self.clock()
        current: dict[str, tuple[float, int, int]] = {}
        for user_id, (count, total) in wanted.items():
            start, used_signals, used_bytes = self._used.get(user_id, (now, 0, 0))
            if now - start >= self.window_s:
                start, used_signals, used_bytes = now, 0, 0
            retry = max(1, math.ceil(start + self.window_s - now))
            if used_signals + count > self.signals:
                return QuotaExceeded(
                    user_id,
                    retry,
                    f"user {user_id} reached the ingest quota of {self.signals} signals per {self.window_s:g} s; "
                    f"retry in {retry} s",
                )
            if used_bytes + total > self.bytes:
                return QuotaExceeded(
                    user_id,
                    retry,
                    f"user {user_id} reached the ingest quota of {self.bytes} bytes of text per {self.window_s:g} s; "
                    f"retry in {retry} s",
                )
            current[user_id] = (start, used_signals + count, used_bytes + total)
        for user_id, used in current.items():
            self._used.pop(user_id, None)
            self._used[user_id] = used
        while len(self._used) > self.max_users:
            self._used.popitem(last=False)
        return None

    def refund(self, usage: Iterable[tuple[str, int]]) -> None:
        """Give back what `take` charged for signals that were not sent after all (in the same window)."""
        for user_id, size in usage:
            used = self._used.get(user_id)
            if used is not None:
                self._used[user_id] = (used[0], max(0, used[1] - 1), max(0, used[2] - size))
