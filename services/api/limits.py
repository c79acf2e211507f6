"""A per-token rate limit: one token bucket per bearer token, in this api process.

With N api replicas a token can send up to N times the rate; the limit protects each
process and the database from one runaway client, it is not a billing quota.
"""

from __future__ import annotations

import hashlib
import math
import time
from collections import OrderedDict
from collections.abc import Callable


class RateLimiter:
    def __init__(
        self, rate_per_s: float, burst: int, max_tokens: int = 10_000, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.rate = rate_per_s
        self.burst = burst
        self.max_tokens = max_tokens  # buckets kept at most; the least recently used go first
        self.clock = clock
        self._buckets: OrderedDict[str, tuple[float, float]] = OrderedDict()  # key -> (level, at)

    @staticmethod
    def key(token: str) -> str:
        return hashlib.sha256(token.encode()).hexdigest()[:32]  # the bearer token itself is never kept

    def take(self, token: str) -> float:
        """Spend one request of this token's bucket: 0 if allowed, else seconds until it would be."""
        key = self.key(token)
        now = self.clock()
        level, at = self._buckets.pop(key, (float(self.burst), now))
        level = min(float(self.burst), level + (now - at) * self.rate)
        if level >= 1.0:
            level -= 1.0
            wait = 0.0
        else:
            wait = (1.0 - level) / self.rate
        self._buckets[key] = (level, now)
        while len(self._buckets) > self.max_tokens:
            self._buckets.popitem(last=False)  # a forgotten bucket comes back full: the lenient side
        return wait

    @staticmethod
    def retry_after(wait: float) -> str:
        """The Retry-After header value: whole seconds, at least 1."""
        return str(max(1, math.ceil(wait)))
