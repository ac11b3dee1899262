"""Locust's results read back, aggregated per endpoint, judged against the targets and printed."""

from __future__ import annotations

import argparse
import json
import math
import os
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path

from bench.harness import percentile
from bench.load.plan import (
    ACTIONS,
    FLOOR,
    LOGINS,
    PAGE_P99_TARGET_MS,
    PAGES,
    RATE_MET,
    SATURATION_THINK,
    WS_CONNECT,
    pacing_text,
    target_rate,
)


@dataclass(frozen=True)
class Sample:
    """One request or socket delay as the locustfile recorded it."""

    kind: str  # the Locust request type: GET, POST or WS
    name: str
    start: float  # time.time() when it was sent
    ms: float
    ok: bool
    status: int = 0  # HTTP status, 0 for a socket delay or a request that got no answer
    thread_cpu_ms: float | None = None  # the request thread's CPU in the web process (bench.load.cpu), when answered


@dataclass
class Results:
    """What the locustfile wrote: the measured window, every sample, socket and login facts."""

    window: tuple[float, float] | None
    samples: list[Sample]
    users: dict[str, int]
    logged_in: int
    login_failed: int
    login_seconds: float | None  # from Locust's start until every user was ready
    ready: int  # users logged in with their socket open when the window opened
    ws_messages: int
    ws_missed: dict[str, int]
    stopped_before_running: int = 0  # launched in the window and stopped before the socket showed it running
    errors: dict[str, int] = field(default_factory=dict)
    saturation_window: tuple[float, float] | None = None  # unpaced, after the window


def results_read(path: Path) -> Results:
    """Parse the locustfile's JSON (samples as ``[kind, name, start, ms, ok, status, thread CPU µs or None]`` rows)."""
    data = json.loads(path.read_text())
    window = tuple(data["window"]) if data.get("window") else None
    saturation = tuple(data["saturation_window"]) if data.get("saturation_window") else None
    return Results(
        window=window,
        saturation_window=saturation,
        samples=[
            Sample(kind, name, float(start), float(ms), bool(ok), int(status), None if cpu_us is None else cpu_us / 1000)
            for kind, name, start, ms, ok, status, cpu_us in (row if len(row) == 7 else [*row, None] for row in data["samples"])
        ],
        users={k: int(v) for k, v in data["users"].items()},
        logged_in=int(data["logged_in"]),
        login_failed=int(data["login_failed"]),
        login_seconds=data.get("login_seconds"),
        ready=int(data.get("ready", 0)),
        ws_messages=int(data.get("ws_messages", 0)),
        ws_missed={k: int(v) for k, v in data.get("ws_missed", {}).items()},
        stopped_before_running=int(data.get("stopped_before_running", 0)),
        errors={k: int(v) for k, v in data.get("errors", {}).items()},
    )


@dataclass(frozen=True)
class EndpointStats:
    name: str
    kind: str
    count: int
    rps: float
    p50_ms: float
    p99_ms: float
    failures: int
    statuses: dict[int, int]

    @property
    def missing(self) -> bool:
        """Every answer was 404: the endpoint does not exist in this build."""
        return self.count > 0 and self.statuses.get(404, 0) == self.count


def endpoint_stats(samples: Iterable[Sample], window: tuple[float, float] | None = None) -> list[EndpointStats]:
    """Per endpoint (kind and name): count, requests/s over the window, p50/p99 and failures.

    With a window, only samples sent inside ``[start, end)`` count and rates are per second of
    it; without one, over the span from the first to the last sample sent. Percentiles include
    failed requests (they took that long too) but not socket messages that never came.
    """
    samples = [s for s in samples if window is None or window[0] <= s.start < window[1]]
    if not samples:
        return []
    span = (window[1] - window[0]) if window else max(s.start for s in samples) - min(s.start for s in samples)
    grouped: dict[tuple[str, str], list[Sample]] = defaultdict(list)
    for sample in samples:
        grouped[(sample.kind, sample.name)].append(sample)
    stats = []
    for (kind, name), group in grouped.items():
        # A failed request took its time like any other; a socket message that never came has no delay.
        times = [s.ms for s in group if s.ok or kind != "WS"]
        statuses: dict[int, int] = defaultdict(int)
        for s in group:
            statuses[s.status] += 1
        stats.append(
            EndpointStats(
                name=name,
                kind=kind,
                count=len(group),
                rps=len(group) / span if span > 0 else math.nan,
                p50_ms=percentile(times, 50),
                p99_ms=percentile(times, 99),
                failures=sum(1 for s in group if not s.ok),
                statuses=dict(sorted(statuses.items())),
            )
        )
    return sorted(stats, key=lambda s: (s.kind == "WS", s.name not in LOGINS, s.name))


def total_rps(stats: Sequence[EndpointStats], *, names: Iterable[str] | None = None) -> float:
    """Requests/s of the HTTP endpoints (or of ``names`` only); socket delays are not requests."""
    chosen = set(names) if names is not None else None
    return sum(s.rps for s in stats if s.kind != "WS" and (chosen is None or s.name in chosen))


@dataclass(frozen=True)
class Check:
    what: str
    passed: bool
    detail: str


def verdict(stats: Sequence[EndpointStats], rate_aimed_at: float) -> list[Check]:
    """The targets: p99 <= 300 ms for each page load and for launch and stop, launch + stop at least
    95 % of the rate aimed at (``target_rate``: of the default, 100, when unpaced).

    An endpoint that answered nothing but 404 is missing, not failing; one never requested fails.
    """
    by_name = {s.name: s for s in stats if s.kind != "WS"}
    checks = []
    for name in (*PAGES, *ACTIONS):
        s = by_name.get(name)
        if s is None:
            checks.append(Check(f"{name} p99 <= {PAGE_P99_TARGET_MS:.0f} ms", False, "no request in the window"))
        elif s.missing:
            checks.append(
                Check(f"{name} p99 <= {PAGE_P99_TARGET_MS:.0f} ms", True, "missing: answered 404 in this build, not counted")
            )
        else:
            ok = s.p99_ms <= PAGE_P99_TARGET_MS and s.failures == 0
            detail = f"p99 {s.p99_ms:.0f} ms"
            if s.p99_ms > PAGE_P99_TARGET_MS:
                detail += f", {s.p99_ms / PAGE_P99_TARGET_MS:.1f}x the target"
            if s.failures:
                detail += f", {s.failures} failed"
            checks.append(Check(f"{name} p99 <= {PAGE_P99_TARGET_MS:.0f} ms", ok, detail))
    rate = total_rps(stats, names=ACTIONS)
    aimed = target_rate(rate_aimed_at)
    needed = RATE_MET * aimed
    detail = f"{rate:.1f} requests/s ({rate / aimed:.0%} of {aimed:g})"
    if rate < needed:
        detail += f", {needed - rate:.1f} short"
    what = f"launch + stop >= {needed:g} requests/s ({RATE_MET:.0%} of {aimed:g})"
    checks.append(Check(what, rate >= needed, detail))
    return checks


@dataclass(frozen=True)
class EndpointCpu:
    """What one request of an endpoint cost the web processes in CPU, over a window."""

    name: str
    count: int
    thread_ms: float  # mean CPU of its request thread (the middleware chain and the view), from the response header
    shared_ms: float  # its even share of the rest of the web processes' CPU (event loop: server, sockets, publish)

    @property
    def total_ms(self) -> float:
        return self.thread_ms + self.shared_ms


def cpu_per_request(samples: Iterable[Sample], window: tuple[float, float], web_cpu_ms: float) -> tuple[list[EndpointCpu], float]:
    """Per HTTP endpoint, the web processes' CPU per request over ``window``; and the rest per request.

    A request's own thread CPU comes from its response header (the mean over the endpoint's
    answered requests). The web processes' CPU over the window (``/proc``, ``web_cpu_ms``) less
    the sum of every request's thread CPU is what ran on the event loops: the ASGI server, the
    websocket consumers and handshakes, the publish after a launch or stop commits. That rest is
    shared evenly over the window's HTTP requests (it is not attributable per request from
    outside), so the totals add up to the processes' CPU.
    """
    http = [s for s in samples if s.kind != "WS" and window[0] <= s.start < window[1]]
    if not http:
        return [], math.nan
    grouped: dict[str, list[Sample]] = defaultdict(list)
    for sample in http:
        grouped[sample.name].append(sample)
    means = {}
    for name, group in grouped.items():
        measured = [s.thread_cpu_ms for s in group if s.thread_cpu_ms is not None]
        means[name] = sum(measured) / len(measured) if measured else math.nan
    in_threads = sum(s.thread_cpu_ms for s in http if s.thread_cpu_ms is not None)
    rest = max(0.0, web_cpu_ms - in_threads) / len(http)
    rows = [EndpointCpu(name, len(group), means[name], rest) for name, group in grouped.items()]
    return sorted(rows, key=lambda r: (r.name != FLOOR, r.name)), rest


def fmt_ms(value: float) -> str:
    return "n/a" if math.isnan(value) else f"{value:.0f}"


def endpoint_table(stats: Sequence[EndpointStats]) -> list[str]:
    width = max([len(s.name) for s in stats] + [8])
    lines = [f"    {'endpoint':<{width}}  {'count':>6}  {'req/s':>6}  {'p50 ms':>7}  {'p99 ms':>7}  {'failed':>6}  statuses"]
    for s in stats:
        statuses = ", ".join(f"{code or 'none'}: {n}" for code, n in s.statuses.items())
        note = "  (missing in this build)" if s.missing else ""
        lines.append(
            f"    {s.name:<{width}}  {s.count:>6}  {s.rps:>6.1f}  {fmt_ms(s.p50_ms):>7}  {fmt_ms(s.p99_ms):>7}  "
            f"{s.failures:>6}  {statuses}{note}"
        )
    return lines


def summarise(results: Results, *, rate: float, web_cpu_ms: float | None = None) -> dict:
    """Every figure of a run, from the locustfile's results: the report prints this, --json writes it.

    ``rate``: the launch + stop requests/s aimed at; ``web_cpu_ms``: the web processes' CPU over the
    window (``/proc``), for the CPU per request of each endpoint."""
    window = results.window
    measured = [s for s in results.samples if s.kind != "WS" and s.name not in LOGINS]
    stats = endpoint_stats(measured, window)
    sockets = endpoint_stats([s for s in results.samples if s.kind == "WS"], window)
    # Logins and socket connects over the whole run: most happen before the window opens.
    logins = endpoint_stats([s for s in results.samples if s.name in (*LOGINS, WS_CONNECT)])
    checks = verdict(stats, rate) if window else []
    cpu, shared = cpu_per_request(measured, window, web_cpu_ms) if window and web_cpu_ms is not None else ([], math.nan)
    saturation = results.saturation_window
    at_saturation = endpoint_stats(measured, saturation) if saturation else []
    return {
        "window_seconds": (window[1] - window[0]) if window else None,
        "users": results.users,
        "logged_in": results.logged_in,
        "login_failed": results.login_failed,
        "login_seconds": results.login_seconds,
        "ready": results.ready,
        "endpoints": [asdict(s) for s in stats],
        "sockets": [asdict(s) for s in sockets],
        "logins": [asdict(s) for s in logins],
        "ws_messages": results.ws_messages,
        "ws_missed": results.ws_missed,
        "stopped_before_running": results.stopped_before_running,
        "errors": results.errors,
        "total_rps": total_rps(stats),
        "launch_stop_rps": total_rps(stats, names=ACTIONS),
        "cpu_per_request": [{**asdict(row), "total_ms": row.total_ms} for row in cpu],
        "cpu_shared_per_request_ms": shared,
        "saturation_seconds": (saturation[1] - saturation[0]) if saturation else None,
        "saturation_endpoints": [asdict(s) for s in at_saturation],
        "saturation_launch_stop_rps": total_rps(at_saturation, names=ACTIONS) if saturation else None,
        "checks": [asdict(c) for c in checks],
        "passed": bool(checks) and all(c.passed for c in checks),
    }


def cpu_table(summary: dict) -> list[str]:
    rows = [EndpointCpu(**{k: v for k, v in row.items() if k != "total_ms"}) for row in summary["cpu_per_request"]]
    floor = next((r.total_ms for r in rows if r.name == FLOOR), math.nan)
    width = max([len(r.name) for r in rows] + [8])
    lines = [f"    {'endpoint':<{width}}  {'count':>6}  {'thread':>6}  {'+ rest':>6}  {'= CPU ms':>8}  x floor"]
    for r in rows:
        ratio = r.total_ms / floor if floor and not math.isnan(floor) else math.nan
        lines.append(
            f"    {r.name:<{width}}  {r.count:>6}  {r.thread_ms:>6.2f}  {r.shared_ms:>6.2f}  {r.total_ms:>8.2f}  "
            + ("n/a" if math.isnan(ratio) else f"{ratio:.1f}")
        )
    return lines


def report(summary: dict, args: argparse.Namespace) -> None:
    def stats_of(key: str) -> list[EndpointStats]:
        return [EndpointStats(**row) for row in summary[key]]

    users = summary["users"]
    print(
        f"load on the portal: {users.get('Student', 0)} students, {users.get('Instructor', 0)} instructors, "
        f"{users.get('Operator', 0)} operators; {args.web_processes} Daphne process(es), {args.workers} Celery worker(s) x "
        f"{args.concurrency} (prefork), simulator start {args.start_delay:g} s, {pacing_text(args)}"
    )
    login = summary["login_seconds"]
    print(
        f"  logins: {summary['logged_in']} of {sum(users.values())} logged in"
        + (f", {summary['login_failed']} failed" if summary["login_failed"] else "")
        + (f"; {summary['ready']} ready (socket open) after {login:.0f} s" if login is not None else "")
        + " (reported apart: each hashes a password)"
    )
    for line in endpoint_table(stats_of("logins")):
        print(line)
    if summary["window_seconds"] is None:
        print("  NO measured window: Locust ended before the window opened")
        return
    print(f"  measured window: {summary['window_seconds']:.1f} s, requests sent inside it:")
    for line in endpoint_table(stats_of("endpoints")):
        print(line)
    print(f"  total: {summary['total_rps']:.1f} requests/s; launch + stop: {summary['launch_stop_rps']:.1f} requests/s")
    print("  socket (time from sending the request to the message on the student's /ws/sessions/):")
    for line in endpoint_table(stats_of("sockets")):
        print(line)
    missed = ", ".join(f"{name}: {n}" for name, n in sorted(summary["ws_missed"].items()) if n) or "none"
    print(
        f"  socket messages received in the window: {summary['ws_messages']}; expected messages not seen in time "
        f"(10 s after a launch or a stop, 30 s for the end; the student goes on without them): {missed}"
    )
    print(
        f"  launches in the window stopped before their lab was running: {summary['stopped_before_running']} "
        "(launch -> running counts only the others)"
    )
    if summary["errors"]:
        print("  errors in the users' code: " + ", ".join(f"{k} x {n}" for k, n in sorted(summary["errors"].items())))
    if summary.get("cpu_percent_of_one_core"):
        cores = os.cpu_count() or 1
        shares = summary["cpu_percent_of_one_core"]
        print(f"  CPU over the window, % of one core ({cores} cores = {100 * cores} %):")
        for name, value in shares.items():
            print(f"    {name}: {value:.0f} %")
    if summary["cpu_per_request"]:
        print(
            "  Daphne CPU per request over the window, ms: 'thread' is the mean CPU of the request's own thread (every "
            "middleware and the view; a response header from bench.load.cpu), '+ rest' the Daphne processes' CPU (/proc) "
            "less all requests' threads, shared evenly over the window's HTTP requests (the ASGI server, websocket "
            "consumers, the publish after a commit: all on the event loop); 'x floor' against the trivial view "
            "(same middleware, same Daphne):"
        )
        for line in cpu_table(summary):
            print(line)
    if summary["saturation_seconds"]:
        print(
            f"  saturation: then no pacing and think times of {SATURATION_THINK[0]:g}-{SATURATION_THINK[1]:g} s (every "
            f"student as fast as the portal lets it), 8 s to settle, {summary['saturation_seconds']:.0f} s measured: "
            "launch + stop "
            f"{summary['saturation_launch_stop_rps']:.1f} requests/s (reported, not judged)"
        )
        for line in endpoint_table([EndpointStats(**row) for row in summary["saturation_endpoints"]]):
            print(line)
        shares = summary.get("saturation_cpu_percent_of_one_core") or {}
        if shares:
            print("    CPU there, % of one core: " + "; ".join(f"{name}: {value:.0f}" for name, value in shares.items()))
    print("  targets:")
    for check in summary["checks"]:
        print(f"    {'PASS' if check['passed'] else 'FAIL'}  {check['what']}: {check['detail']}")
    print(f"  {'PASS' if summary['passed'] else 'FAIL'}")
