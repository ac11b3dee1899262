"""Requests per token, counted in the ``api`` cache (Redis) so all web processes share the count."""

from __future__ import annotations

from django.conf import settings
from django.core.cache import caches
from rest_framework.throttling import SimpleRateThrottle

from api.authentication import ApiClient


class TokenRateThrottle(SimpleRateThrottle):
    scope = "token"

    def __init__(self) -> None:
        self.cache = caches["api"]
        # Read per request, not at import, so the rate follows the settings (and tests' overrides).
        self.rate = settings.API_THROTTLE_RATE
        self.num_requests, self.duration = self.parse_rate(self.rate)

    def get_cache_key(self, request, view) -> str | None:
        if not isinstance(request.user, ApiClient):
            return None  # refused before it counts
        return f"throttle:{request.user.throttle_key}"
