"""The portal's ASGI application under Daphne, uvicorn (uvloop + httptools) and granian, side by side.

    .venv/bin/python -m bench.asgi_servers                      # all three, defaults below
    .venv/bin/python -m bench.asgi_servers --servers daphne,uvicorn --requests 200
    make bench-asgi

What a lean ASGI server would give over Daphne (issue 32), measured, not switched to: the portal
keeps Daphne (deploy/, ``make demo``). Each server in turn serves ``portal.asgi:application`` in
one process on a free port of 127.0.0.1, access log off, with the same environment (PostgreSQL,
Redis, the simulator driver, DEBUG off). The settings add one URL to the portal's (``bench.
asgi_settings``): ``/bench/floor/``, the trivial view of ``bench.request_cost``, behind the same
middleware. Servers: ``daphne`` as deploy/ runs it; ``uvicorn`` with ``--loop uvloop --http
httptools --ws wsproto``; ``granian --interface asginl`` (ASGI without lifespan, which Channels'
router does not take) with one worker and one runtime thread.

The same client (aiohttp on one asyncio loop, in this process; keep-alive connections, or a new one for
every request with ``--fresh-connections`` as ``bench.classstart`` sends a class's launches) measures:

1. HTTP at a fixed concurrency (``--concurrency`` requests in flight): the trivial view, then the
   student's ``POST /sessions/launch/`` and its ``POST /sessions/<id>/stop/`` as the page's script
   sends them (the heaviest requests of ``make load``). Requests/s, p50/p99 latency and the
   server's CPU per request (utime + stime of the server's processes from ``/proc``, before and
   after).
2. Websockets: ``--students`` student pages on ``/ws/sessions/``, then ``--events`` rounds of
   what the portal's publish sends for one queued session per student (a ``sessions.update`` to
   each student's group on Redis, built once by the portal's selectors): the time from the first
   send to the last page's last message, and the server's CPU over it per message delivered.

Each server's status codes and the messages each page received are compared with Daphne's: the
bench fails (exit 1) when they differ. Beside each server's figures the load average
(``/proc/loadavg``) at the time: the machine is shared, so compare ratios within one run.

Set-up (bench.harness): a new PostgreSQL database and Redis number, dropped and released at the
end. No Celery worker runs: the launches stay queued and the stops stopping, which the requests
measured do not wait for.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import sys
import time
from collections import Counter
from collections.abc import Awaitable, Callable
from dataclasses import asdict, dataclass, field
from functools import partial
from pathlib import Path

from bench.harness import (
    CLOCK_TICKS,
    CpuMeter,
    Resources,
    bench_main,
    free_port,
    http_request,
    percentile,
    portal_in_process,
    reference_loop_ms,
    run_id,
    wait_until,
)

SETTINGS = "bench.asgi_settings"
APPLICATION = "portal.asgi:application"
FLOOR = "GET /bench/floor/"
LAUNCH = "POST /sessions/launch/"
STOP = "POST /sessions/<id>/stop/"
SOCKETS = "websocket burst"


def server_command(name: str, port: int) -> list[str]:
    """The command line of server ``name`` serving the portal on 127.0.0.1:``port``, one process, no access log."""
    python = sys.executable
    if name == "daphne":
        # -v 0: no access log (the others write none either); otherwise as deploy/ runs it.
        return [python, "-m", "daphne", "-b", "127.0.0.1", "-p", str(port), "-v", "0", APPLICATION]
    if name == "uvicorn":
        return [
            python, "-m", "uvicorn", "--host", "127.0.0.1", "--port", str(port), "--loop", "uvloop",
            "--http", "httptools", "--ws", "wsproto", "--lifespan", "off", "--no-access-log", "--log-level", "warning",
            APPLICATION,
        ]  # fmt: skip
    if name == "granian":
        return [
            python, "-m", "granian", "--interface", "asginl", "--host", "127.0.0.1", "--port", str(port),
            "--workers", "1", "--runtime-threads", "1", "--loop", "uvloop", "--log-level", "warning", APPLICATION,
        ]  # fmt: skip
    raise ValueError(f"unknown server {name!r}: choose from {', '.join(SERVERS)}")


SERVERS = ("daphne", "uvicorn", "granian")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m bench.asgi_servers", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--servers", default=",".join(SERVERS), help=f"comma-separated, measured in this order, default {','.join(SERVERS)}"
    )
    parser.add_argument("--students", type=int, default=200, help="students, each with a page's socket open, default 200")
    parser.add_argument(
        "--requests", type=int, default=400, help="requests of the trivial view and launch + stop pairs, default 400"
    )
    parser.add_argument("--concurrency", type=int, default=16, help="HTTP requests in flight, default 16")
    parser.add_argument(
        "--fresh-connections",
        action="store_true",
        help="a new connection for every HTTP request (as bench.classstart sends a class's launches), not keep-alive",
    )
    parser.add_argument("--events", type=int, default=10, help="publish rounds of the websocket burst, default 10")
    parser.add_argument("--json", metavar="PATH", help="also write the figures as JSON to PATH")
    args = parser.parse_args(argv)
    args.servers = [s.strip() for s in args.servers.split(",") if s.strip()]
    unknown = [s for s in args.servers if s not in SERVERS]
    if unknown or not args.servers:
        parser.error(f"--servers: unknown {', '.join(unknown) or '(none given)'}; choose from {', '.join(SERVERS)}")
    if min(args.students, args.requests, args.concurrency, args.events) < 1:
        parser.error("--students, --requests, --concurrency and --events must be >= 1")
    return args


# --- world ---------------------------------------------------------------------------------------------


def build_world(*, students: int) -> dict:
    """One course of ``students`` with room for every launch the bench makes; a queued session each
    (what the websocket burst publishes); each student's cookies (a session, a CSRF secret)."""
    from bench.classstart.portal import build_class, login_cookies_direct
    from labs.models import CourseQuota
    from labs.services.sessions import session_launch

    course, template, users = build_class(students, max(1, math.ceil(students / 128)))
    # No worker ends the stopped sessions: let every student hold as many as the bench makes.
    CourseQuota.objects.filter(course=course).update(
        sessions_per_student=30_000, instance_count=1_000_000, core_percent=10**9, memory_mib=10**12
    )
    sessions = [str(session_launch(student=u, course=course, template=template).pk) for u in users]
    cookies = login_cookies_direct(users)
    return {
        "course": course.pk,
        "template": template.pk,
        "students": [{"id": u.pk, "cookie": cookies[u.pk][0], "csrf": cookies[u.pk][1]} for u in users],
        "sessions": sessions,
        "messages": burst_messages(sessions),
    }


# --- the client ----------------------------------------------------------------------------------------


@dataclass
class Timed:
    """Requests of one kind: their latencies (ms) and status codes."""

    latencies_ms: list[float] = field(default_factory=list)
    statuses: Counter = field(default_factory=Counter)

    def add(self, began: float, status: int) -> None:
        self.latencies_ms.append((time.perf_counter() - began) * 1000)
        self.statuses[status] += 1


async def http_phase(
    base_url: str, world: dict, *, requests: int, concurrency: int, kind: str, fresh: bool = False
) -> tuple[dict[str, Timed], float]:
    """``requests`` trivial views (``kind`` "floor") or launch + stop pairs ("launch"), ``concurrency``
    at a time; the requests timed and the wall seconds."""
    import aiohttp

    timed = {FLOOR: Timed()} if kind == "floor" else {LAUNCH: Timed(), STOP: Timed()}
    students = world["students"]
    jobs: asyncio.Queue[int] = asyncio.Queue()
    for i in range(requests):
        jobs.put_nowait(i)
    connector = aiohttp.TCPConnector(limit=concurrency, force_close=fresh)
    async with aiohttp.ClientSession(base_url, connector=connector, cookie_jar=aiohttp.DummyCookieJar()) as client:

        async def one(i: int) -> None:
            student = students[i % len(students)]
            headers = {"Cookie": student["cookie"], "X-CSRFToken": student["csrf"], "Accept": "application/json"}
            began = time.perf_counter()
            if kind == "floor":
                async with client.get("/bench/floor/", headers=headers) as answer:
                    await answer.read()
                    timed[FLOOR].add(began, answer.status)
                return
            form = {"course": str(world["course"]), "template": str(world["template"])}
            async with client.post("/sessions/launch/", data=form, headers=headers) as answer:
                body = await answer.read()
                timed[LAUNCH].add(began, answer.status)
            if answer.status != 201:
                return
            session_id = json.loads(body)["session"]["id"]
            began = time.perf_counter()
            async with client.post(f"/sessions/{session_id}/stop/", headers=headers) as answer:
                await answer.read()
                timed[STOP].add(began, answer.status)

        async def worker() -> None:
            while not jobs.empty():
                await one(jobs.get_nowait())

        began = time.perf_counter()
        await asyncio.gather(*(worker() for _ in range(concurrency)))
        return timed, time.perf_counter() - began


async def socket_phase(base_url: str, world: dict, *, events: int, publish: Callable[[], Awaitable[None]]) -> dict:
    """Every student's page socket open; ``events`` rounds of ``publish``; when the last page had
    its ``events``-th message. Returns the seconds, and what each page received (for the comparison)."""
    import aiohttp

    ws_url = base_url.replace("http://", "ws://") + "/ws/sessions/"
    received: list[list[tuple]] = [[] for _ in world["students"]]
    last_at = [0.0] * len(world["students"])
    done = asyncio.Event()
    remaining = [len(world["students"])]

    # limit=0: a socket holds its connection, and aiohttp's default of 100 would keep the 101st page waiting.
    connector = aiohttp.TCPConnector(limit=0)
    async with aiohttp.ClientSession(connector=connector, cookie_jar=aiohttp.DummyCookieJar()) as client:
        sockets = []
        for student in world["students"]:
            headers = {"Cookie": student["cookie"], "Origin": base_url}
            sockets.append(await client.ws_connect(ws_url, headers=headers, autoping=True))

        async def read(index: int, socket) -> None:
            async for message in socket:
                if message.type != aiohttp.WSMsgType.TEXT:
                    break
                data = json.loads(message.data)
                received[index].append((data["type"], tuple((s["id"], s["state"]) for s in data.get("sessions", []))))
                if len(received[index]) == events:
                    last_at[index] = time.perf_counter()
                    remaining[0] -= 1
                    if not remaining[0]:
                        done.set()

        readers = [asyncio.create_task(read(i, s)) for i, s in enumerate(sockets)]
        began = time.perf_counter()
        for _ in range(events):
            await publish()
        published = time.perf_counter() - began
        try:
            await asyncio.wait_for(done.wait(), timeout=60)
        except TimeoutError:
            pass
        for socket in sockets:
            await socket.close()
        for reader in readers:
            reader.cancel()
        await asyncio.gather(*readers, return_exceptions=True)
    complete = all(len(r) >= events for r in received)
    return {
        "seconds": (max(last_at) - began) if complete else math.nan,
        "publish_seconds": published,
        "received": [sorted(r) for r in received],
        "complete": complete,
    }


def burst_messages(session_ids: list[str]) -> dict[str, dict]:
    """What the portal's publish of these sessions sends (``labs.services.events``): per student's
    group, a ``sessions.update`` with its sessions' payloads, built once by the portal's selectors so
    that the burst measures the server delivering them, not this process building them."""
    from collections import defaultdict

    from django.utils import translation

    from labs.selectors.sessions import queue_facts, session_event_payload, sessions_for_events
    from labs.services.events import sessions_message, student_group

    sessions = sessions_for_events(set(session_ids), queues_moved=False)
    places = queue_facts(sessions)
    payloads: dict[str, list[dict]] = defaultdict(list)
    for session in sessions:
        payloads[student_group(session.student_id)].append(
            session_event_payload(session, for_owner=True, queue=places.get(session.pk))
        )
    language = translation.get_language()
    return {group: sessions_message(p, language) for group, p in payloads.items()}


def publisher(messages: dict[str, dict]) -> Callable[[], Awaitable[None]]:
    """One round of the burst: every message to its group on the channel layer, as the portal's publish sends them."""

    async def publish() -> None:
        from channels.layers import get_channel_layer

        layer = get_channel_layer()
        for group, message in messages.items():
            await layer.group_send(group, message)

    return publish


# --- one server ----------------------------------------------------------------------------------------


@dataclass
class Row:
    """One server's figures for one kind of work."""

    server: str
    work: str
    count: int
    per_second: float
    p50_ms: float
    p99_ms: float
    cpu_ms_per_item: float
    load_average: str
    statuses: dict = field(default_factory=dict)


def loadavg() -> str:
    return " ".join(Path("/proc/loadavg").read_text().split()[:3])


def cpu_ticks(meter: CpuMeter) -> int:
    _, readings, _ = meter.read()
    return sum(readings["server"].values())


def serve(res: Resources, name: str, env: dict[str, str]):
    """Start server ``name``; its service and base URL once it answers."""
    port = free_port()
    service = res.start(name, server_command(name, port), env=env)
    base_url = f"http://127.0.0.1:{port}"
    wait_until(lambda: http_request("GET", f"{base_url}/accounts/login/", timeout=5).status == 200,
               timeout=60, what=f"{name} to answer", services=[service])  # fmt: skip
    return service, base_url


def measure_server(
    res: Resources, name: str, env: dict[str, str], world: dict, args: argparse.Namespace
) -> tuple[list[Row], dict]:
    """Every measurement on server ``name``, then the server stopped; its rows and what its pages received."""
    service, base_url = serve(res, name, env)
    meter = CpuMeter({"server": [service.process.pid]}, {})
    rows = []
    try:
        phase = partial(http_phase, base_url, world, concurrency=args.concurrency, fresh=args.fresh_connections)
        # A warm-up, not measured: the first requests load templates and open the database pool.
        asyncio.run(phase(requests=2 * args.concurrency, kind="floor"))
        asyncio.run(phase(requests=args.concurrency, kind="launch"))
        for kind in ("floor", "launch"):
            before = cpu_ticks(meter)
            timed, seconds = asyncio.run(phase(requests=args.requests, kind=kind))
            cpu_ms = (cpu_ticks(meter) - before) * 1000 / CLOCK_TICKS
            total = sum(len(t.latencies_ms) for t in timed.values())
            for work, t in timed.items():
                rows.append(
                    Row(
                        server=name,
                        work=work,
                        count=len(t.latencies_ms),
                        per_second=total / seconds,  # all requests of the phase: a launch and its stop share it
                        p50_ms=percentile(t.latencies_ms, 50),
                        p99_ms=percentile(t.latencies_ms, 99),
                        cpu_ms_per_item=cpu_ms / total,
                        load_average=loadavg(),
                        statuses=dict(t.statuses),
                    )
                )
        before = cpu_ticks(meter)
        sockets = asyncio.run(socket_phase(base_url, world, events=args.events, publish=publisher(world["messages"])))
        cpu_ms = (cpu_ticks(meter) - before) * 1000 / CLOCK_TICKS
        messages = len(world["students"]) * args.events
        rows.append(
            Row(
                server=name,
                work=SOCKETS,
                count=messages,
                per_second=messages / sockets["seconds"] if sockets["seconds"] else math.nan,
                p50_ms=math.nan,
                p99_ms=sockets["seconds"] * 1000,  # publish -> the last page's last message
                cpu_ms_per_item=cpu_ms / messages,
                load_average=loadavg(),
                statuses={"complete": sockets["complete"]},
            )
        )
    finally:
        service.terminate()
        service.wait_or_kill(time.monotonic() + 15)
    return rows, sockets


# --- the run -------------------------------------------------------------------------------------------


def differences(reference: str, rows: list[Row], received: dict[str, list]) -> list[str]:
    """What a server answered or delivered differently from ``reference``'s (status codes, each page's messages)."""
    found = []
    by = {(r.server, r.work): r for r in rows}
    for (server, work), row in by.items():
        expected = by.get((reference, work))
        if expected is not None and row.statuses != expected.statuses:
            found.append(f"{server} {work}: {row.statuses} where {reference} gave {expected.statuses}")
    for server, pages in received.items():
        if server != reference and pages != received.get(reference):
            found.append(f"{server}: the pages received other websocket messages than under {reference}")
    return found


def report(rows: list[Row], reference: str) -> None:
    print(f"ASGI servers serving {APPLICATION} (one process each; ratio: to {reference} in this run)")
    print(
        f"  {'server':<8} {'work':<26} {'n':>5} {'per s':>7} {'p50 ms':>7} {'p99 ms':>8} {'CPU ms/each':>11}"
        f" {'x ' + reference:>9}  load average"
    )
    base = {r.work: r for r in rows if r.server == reference}
    for r in rows:
        ref = base.get(r.work)
        ratio = r.cpu_ms_per_item / ref.cpu_ms_per_item if ref and ref.cpu_ms_per_item else math.nan
        print(
            f"  {r.server:<8} {r.work:<26} {r.count:>5} {r.per_second:7.0f} {r.p50_ms:7.1f} {r.p99_ms:8.1f}"
            f" {r.cpu_ms_per_item:11.3f} {ratio:9.2f}  {r.load_average}"
        )
    print(
        "  per s: requests/s of the phase (launch and stop share theirs) or messages/s of the burst; websocket p99:"
        " ms from the first publish to the last page's last message; x: the server's CPU per item over the reference's"
    )


def run(args: argparse.Namespace) -> dict:
    import os

    res = Resources()
    try:
        started = time.monotonic()
        portal_in_process(res, "asgi", run_id(), connection_limit=40)
        world = build_world(students=args.students)
        from django.db import connections

        connections.close_all()
        env = {**os.environ, "DJANGO_SETTINGS_MODULE": SETTINGS, "PYTHONUNBUFFERED": "1"}
        print(f"set-up (migrate, {args.students} students): {time.monotonic() - started:.1f} s", flush=True)
        speed = reference_loop_ms()
        print(f"reference loop: {speed:.0f} ms of CPU (higher: a slower machine); load average {loadavg()}", flush=True)
        rows: list[Row] = []
        received: dict[str, list] = {}
        for name in args.servers:
            server_rows, sockets = measure_server(res, name, env, world, args)
            rows += server_rows
            received[name] = sockets["received"]
            print(f"  {name}: done, load average {loadavg()}", flush=True)
        # Daphne serves the portal: the others are compared with it (else with the first named).
        reference = "daphne" if "daphne" in args.servers else args.servers[0]
        report(rows, reference)
        problems = differences(reference, rows, received)
        incomplete = [r.server for r in rows if r.work == SOCKETS and not r.statuses["complete"]]
        problems += [f"{server}: not every page received every message within 60 s" for server in incomplete]
        for problem in problems:
            print(f"  DIFFERENT: {problem}")
        if not problems:
            print(f"  same status codes and websocket messages under every server as under {reference}")
        return {
            "bench": "asgi_servers",
            "args": {k: v for k, v in vars(args).items() if k != "json"},
            "reference_loop_ms": speed,
            "rows": [asdict(r) for r in rows],
            "problems": problems,
        }
    finally:
        res.close()


def main(argv: list[str] | None = None) -> int:
    return bench_main(run, parse_args(argv), passed=lambda figures: not figures["problems"])


if __name__ == "__main__":
    sys.exit(main())
