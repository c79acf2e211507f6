"""The api's rate limits, keyed on the verified identity (never on the raw Authorization header, so
re-spelling the header does not open a fresh bucket), one token bucket per key, in this process.

- a user token: one bucket per user (`rate_limit_per_s`, `rate_limit_burst`);
- a service token, which serves many users: one bucket per (service, user in the path) at the same
  per-user rate, and one bucket for the service as a whole (`service_rate_limit_per_s`,
  `service_rate_limit_burst`), so one service cannot flood the process either.

With N api replicas a caller can send up to N times the rate; the limit protects each process and
the database from one runaway client, it is not a billing quota.
"""

from __future__ import annotations

import hashlib
import math
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass

from memwright.auth import Principal
from memwright.settings import ApiSettings


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
    def key(identity: str) -> str:
        return hashlib.sha256(identity.encode()).hexdigest()[:32]  # fixed size, whatever the identity

    def take(self, identity: str) -> float:
        """Spend one request of this identity's bucket: 0 if allowed, else seconds until it would be."""
        key = self.key(identity)
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

    def give_back(self, identity: str) -> None:
        """Return the request just taken (another limit refused it, so it was never served)."""
        key = self.key(identity)
        if key in self._buckets:
            level, at = self._buckets[key]
            self._buckets[key] = (min(float(self.burst), level + 1.0), at)

    @staticmethod
    def retry_after(wait: float) -> str:
        """The Retry-After header value: whole seconds, at least 1."""
        return str(max(1, math.ceil(wait)))


@dataclass(frozen=True)
class Refusal:
    wait: float
    reason: str


class RequestLimits:
    """Which buckets a request spends, by who sent it (see the module docstring)."""

    def __init__(self, settings: ApiSettings, clock: Callable[[], float] = time.monotonic) -> None:
        self.per_user = RateLimiter(settings.rate_limit_per_s, settings.rate_limit_burst, clock=clock)
        self.per_service = RateLimiter(
            settings.service_rate_limit_per_s, settings.service_rate_limit_burst, clock=clock
        )

    def take(self, principal: Principal, user_id: str | None) -> Refusal | None:
        """Spend one request; None if allowed, else how long to wait and why."""
        if principal.is_service:
            # the (service, user) bucket first: one hot user's refused requests must not drain the
            # service's bucket, which every other user it serves shares
            pair = f"{principal.subject}\x00{user_id}"
            if user_id is not None:
                wait = self.per_user.take(pair)
                if wait > 0:
                    return Refusal(
                        wait,
                        f"rate limit of {self.per_user.rate:g} requests/s for {principal.subject} on user {user_id}",
                    )
            wait = self.per_service.take(principal.subject)
            if wait > 0:
                if user_id is not None:
                    self.per_user.give_back(pair)
                return Refusal(wait, f"rate limit of {self.per_service.rate:g} requests/s for {principal.subject}")
            return None
        wait = self.per_user.take(principal.subject)
        if wait > 0:
            return Refusal(wait, f"rate limit of {self.per_user.rate:g} requests/s for this user")
        return None
