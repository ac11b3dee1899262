"""The per-token rate limit counts atomically in Redis: eight threads at once, against the real
server (Daphne), get exactly the limit through, however their requests interleave."""

from __future__ import annotations

import threading
import urllib.error
import urllib.request
from collections import Counter
from concurrent.futures import ThreadPoolExecutor

import pytest

from api.scopes import SCOPES
from api.services import token_create

pytestmark = [pytest.mark.slow]

LIMIT = 40
THREADS = 8
REQUESTS_PER_THREAD = 15


@pytest.fixture
def small_limit(monkeypatch):
    """Read by the server at start: requested before portal_server."""
    monkeypatch.setenv("API_THROTTLE_RATE", f"{LIMIT}/minute")


def test_eight_threads_at_once_get_exactly_the_limit_through(small_limit, world, portal_server):
    _token, secret = token_create(institution=world["course"].institution, name="lms", scopes=list(SCOPES))
    request = urllib.request.Request(f"{portal_server}/api/v1/templates/", headers={"Authorization": f"Bearer {secret}"})
    start = threading.Barrier(THREADS)

    def hammer() -> list[int]:
        start.wait()
        statuses = []
        for _ in range(REQUESTS_PER_THREAD):
            try:
                with urllib.request.urlopen(request, timeout=30) as response:
                    statuses.append(response.status)
            except urllib.error.HTTPError as refused:
                statuses.append(refused.code)
                assert refused.code != 429 or int(refused.headers["Retry-After"]) >= 1
        return statuses

    with ThreadPoolExecutor(THREADS) as pool:
        runs = [pool.submit(hammer) for _ in range(THREADS)]
        statuses = Counter(status for run in runs for status in run.result())
    assert statuses == {200: LIMIT, 429: THREADS * REQUESTS_PER_THREAD - LIMIT}
