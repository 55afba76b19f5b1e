"""Rate limits per API key: a token bucket each, refilled continuously.

A key with its own ``rate_limit`` (requests per second) gets a bucket of that rate holding two
seconds' worth; other keys that are not admins get the workspace's default
(``CORRAL_KEY_RATE_LIMIT``); admin keys without a limit of their own are not limited. A request
with an empty bucket is refused with 429 and ``Retry-After`` (``RateLimited.retry_after``).
In memory, event-loop only: a restart refills every bucket.
"""

from __future__ import annotations

import math
import time

from corral.service.errors import CorralError
from corral.storage import ApiKeyRecord

BURST_SECONDS = 2.0
MAX_KEYS = 10_000


class RateLimited(CorralError):
    code = "rate_limited"

    def __init__(self, message: str, retry_after: float) -> None:
        super().__init__(message)
        self.retry_after = retry_after


class RateLimiter:
    def __init__(self, default_rate: float) -> None:
        self.default_rate = default_rate
        self._buckets: dict[str, tuple[float, float]] = {}  # key id -> (tokens, at)

    def rate_of(self, key: ApiKeyRecord) -> float | None:
        if key.rate_limit is not None:
            return key.rate_limit
        if key.role == "admin" or self.default_rate <= 0:
            return None
        return self.default_rate

    def take(self, key: ApiKeyRecord) -> None:
        """Spend one token of ``key``'s bucket, or raise RateLimited."""
        rate = self.rate_of(key)
        if rate is None:
            return
        capacity = max(1.0, rate * BURST_SECONDS)
        now = time.monotonic()
        tokens, at = self._buckets.get(key.id, (capacity, now))
        tokens = min(capacity, tokens + (now - at) * rate)
        if tokens < 1.0:
            wait = (1.0 - tokens) / rate
            self._buckets[key.id] = (tokens, now)
            raise RateLimited(
                f"API key {key.name!r} is over its rate limit of {rate:g} requests per second; "
                f"retry in {wait:.2f} s",
                retry_after=max(1.0, math.ceil(wait)),
            )
        if len(self._buckets) > MAX_KEYS:
            self._buckets.clear()
        self._buckets[key.id] = (tokens - 1.0, now)
