"""Requests per token: at most API_THROTTLE_RATE in any moving window, counted in Redis so every
web process shares the count.

DRF's SimpleRateThrottle reads a token's request history from the cache, appends to it and writes
it back: requests at the same moment read the same history and all get through (600/minute let
753 through from 8 threads). Here the limits library checks and records a request in one Lua
script inside Redis, so concurrent requests are counted one after the other.
"""

from __future__ import annotations

import math
import time
from functools import cache

from django.conf import settings
from limits import RateLimitItem, RateLimitItemPerSecond
from limits.storage import RedisStorage
from limits.strategies import MovingWindowRateLimiter
from rest_framework.throttling import BaseThrottle

from api.authentication import ApiClient

SECONDS_PER = {"s": 1, "m": 60, "h": 3600, "d": 86400}


class TokenRateThrottle(BaseThrottle):
    retry_after: int | None = None

    def allow_request(self, request, view) -> bool:
        if not isinstance(request.user, ApiClient):
            return True  # refused before it counts
        # Read per request, not at import, so the rate follows the settings (and tests' overrides).
        limit = rate_limit(settings.API_THROTTLE_RATE)
        limiter = _limiter(settings.REDIS_URL, settings.API_THROTTLE_PREFIX)
        if limiter.hit(limit, request.user.throttle_key):
            return True
        reset_at, _remaining = limiter.get_window_stats(limit, request.user.throttle_key)
        self.retry_after = max(1, math.ceil(reset_at - time.time()))
        return False

    def wait(self) -> int | None:
        return self.retry_after


def rate_limit(rate: str) -> RateLimitItem:
    """DRF's rate syntax (``600/minute``, ``10/s``; checked in settings) as a limit of the limits library."""
    count, period = rate.split("/")
    return RateLimitItemPerSecond(int(count), SECONDS_PER[period[0]])


@cache
def _limiter(redis_url: str, key_prefix: str) -> MovingWindowRateLimiter:
    """One connection pool per Redis and prefix, shared by the process's requests."""
    return MovingWindowRateLimiter(RedisStorage(redis_url, key_prefix=key_prefix))
