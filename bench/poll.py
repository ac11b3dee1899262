"""How the class-start benches see "running", the same way on both sides, and the machine's state beside it.

"Running" is read from outside, through each side's own REST API, by one poller thread at one
period (``POLL_PERIOD``, 0.1 s unless told), with a token that side issued:

- the portal: ``GET /api/v1/sessions/?course=<id>&page_size=500&page=N`` (the LMS API), a session
  running when its ``state`` is ``running``;
- JupyterHub: ``GET /hub/api/users?offset=N&limit=500``, a user running when its default
  server's ``ready`` is true.

Each poll reads the whole class, page by page (500 a page on both, each request on a fresh
connection), and a session's running time is when the first poll that showed it running
returned. Polls start on a fixed schedule (0, P, 2P, ...); one that takes longer than P is
followed at once by the next. Neither side's own timestamps (the portal's ``running_at``,
JupyterHub's log) are used for the figures.

``machine_state`` is what a reader needs beside a figure measured on a shared machine: the load
average and the time of small write + fsync calls in the run's temp dir (how slow the disk is for
a database that commits).
"""

from __future__ import annotations

import itertools
import os
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlencode

from bench.harness import Response, http_request

POLL_PERIOD = 0.1
PAGE_SIZE = 500  # the portal's API pages at most 500; JupyterHub is configured to the same
METHOD = "both sides polled from outside through their own REST API every {period:g} s, with a token each issued"

RUNNING = "running"
# A fetch: the class as one side's API gives it now, key (student) -> state ("running" once it runs);
# it raises PollFailed when a page could not be read.
Fetch = Callable[[], "dict[str, str]"]


class PollFailed(Exception):
    pass


@dataclass
class Polled:
    running_at: dict[str, float] = field(default_factory=dict)  # key -> time.time() the poll showing it returned
    polls: int = 0
    failed_polls: int = 0
    last_failure: str = ""
    last: dict[str, str] = field(default_factory=dict)  # what the last good poll saw
    poll_seconds: list[float] = field(default_factory=list)

    @property
    def poll_p50(self) -> float:
        return statistics.median(self.poll_seconds) if self.poll_seconds else float("nan")


def poll_until_running(
    fetch: Fetch,
    keys: set[str],
    *,
    deadline: float,
    period: float = POLL_PERIOD,
    settled: Callable[[dict[str, str]], bool] = lambda seen: False,
) -> Polled:
    """Call ``fetch`` every ``period`` s until every key in ``keys`` was seen running, ``deadline``
    (time.time()) passes, or ``settled(last seen)`` says nothing can change any more."""
    polled = Polled()
    began = time.monotonic()
    tick = 0
    while len(polled.running_at) < len(keys) and time.time() < deadline:
        sent = time.monotonic()
        try:
            seen = fetch()
        except PollFailed as exc:
            seen = None
            polled.failed_polls += 1
            polled.last_failure = str(exc)
        polled.polls += 1
        polled.poll_seconds.append(time.monotonic() - sent)
        now = time.time()
        if seen is not None:
            polled.last = seen
            for key, state in seen.items():
                if state == RUNNING and key in keys and key not in polled.running_at:
                    polled.running_at[key] = now
            if len(polled.running_at) < len(keys) and settled(seen):
                break
        tick = max(tick + 1, int((time.monotonic() - began) / period))
        time.sleep(max(0.0, began + tick * period - time.monotonic()))
    return polled


def pages(get_page: Callable[[int], list], page_size: int = PAGE_SIZE) -> list:
    """Every item of a paged list, ``get_page(n)`` for n = 0, 1, ... until a short page."""
    items: list = []
    n = 0
    while True:
        page = get_page(n)
        items.extend(page)
        if len(page) < page_size:
            return items
        n += 1


def ok_json(response: Response):
    if response.status != 200:
        raise PollFailed(f"HTTP {response.status or response.error}: {response.body[:200]!r}")
    return response.json()


def portal_fetch(base_url: str | Sequence[str], token: str, course_id: int, *, page_size: int = PAGE_SIZE) -> Fetch:
    """The class's sessions from the portal's LMS API: student -> the session's state. Several URLs
    (web processes of their own): each request goes to the next, as a Service spreads connections."""
    headers = {"Authorization": f"Bearer {token}", "Accept": "application/json"}
    urls = itertools.cycle([base_url] if isinstance(base_url, str) else base_url)

    def get_page(n: int) -> list:
        query = urlencode({"course": course_id, "page_size": page_size, "page": n + 1})
        return ok_json(http_request("GET", f"{next(urls)}/api/v1/sessions/?{query}", headers=headers, timeout=30))["results"]

    def fetch() -> dict[str, str]:
        return {s["student"]: s["state"] for s in pages(get_page, page_size)}

    return fetch


def hub_fetch(api_url: str, token: str, *, page_size: int = PAGE_SIZE) -> Fetch:
    """The users from JupyterHub's REST API (``api_url`` ends in /hub/api): name -> "running" when its
    default server is ready, "pending" while it has one that is not, "none" without one."""
    headers = {"Authorization": f"token {token}", "Accept": "application/json"}

    def get_page(n: int) -> list:
        query = urlencode({"offset": n * page_size, "limit": page_size})
        return ok_json(http_request("GET", f"{api_url}/users?{query}", headers=headers, timeout=30))

    def fetch() -> dict[str, str]:
        return {u["name"]: hub_state(u) for u in pages(get_page, page_size)}

    return fetch


def hub_state(user: dict) -> str:
    server = (user.get("servers") or {}).get("")
    if server is None:
        return "none"
    return RUNNING if server.get("ready") else "pending"


# --- the machine's state ------------------------------------------------------------------------

FSYNC_CALLS = 32
FSYNC_BYTES = 512


def fsync_ms(directory: Path, calls: int = FSYNC_CALLS, size: int = FSYNC_BYTES) -> float:
    """Median ms of one small write + fsync in ``directory`` (``calls`` of them, one file, removed after)."""
    path = Path(directory) / f".fsync-probe-{os.getpid()}"
    block = os.urandom(size)
    times = []
    descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        for _ in range(calls):
            began = time.perf_counter()
            os.write(descriptor, block)
            os.fsync(descriptor)
            times.append(time.perf_counter() - began)
    finally:
        os.close(descriptor)
        path.unlink(missing_ok=True)
    return statistics.median(times) * 1000


def machine_state(directory: Path) -> dict:
    """The load average now and the fsync figure of ``directory``."""
    return {"load_average": list(os.getloadavg()), "fsync_ms": fsync_ms(directory)}


def fmt_load(values) -> str:
    return " ".join(f"{v:.2f}" for v in values) if values else "n/a"


def fmt_machine(before: dict | None, after: dict | None) -> str:
    """'load average 1.20 0.90 0.80 -> 2.10 1.00 0.85, fsync 2.1 ms (median of 32 x 512 B write + fsync)'."""
    before, after = before or {}, after or {}
    fsync = after.get("fsync_ms", before.get("fsync_ms"))
    fsync_text = "n/a" if fsync is None else f"{fsync:.2f} ms"
    return (
        f"load average {fmt_load(before.get('load_average'))} -> {fmt_load(after.get('load_average'))} "
        f"on {os.cpu_count()} CPUs, fsync {fsync_text} (median of {FSYNC_CALLS} x {FSYNC_BYTES} B write + fsync)"
    )


def fmt_polling(f: dict) -> str:
    """How "running" was seen, and what the polls cost: the same line for both sides."""
    return (
        f"{METHOD.format(period=f['poll_period'])}; {f['polls']} polls ({f['failed_polls']} failed"
        + (f", the last with {f['poll_failure']}" if f.get("poll_failure") else "")
        + f"), a poll took p50 {f['poll_p50'] * 1000:.0f} ms"
    )
