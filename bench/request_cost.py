"""What one request costs the web process: CPU time and queries per endpoint, in-process.

    .venv/bin/python -m bench.request_cost                 # 128 students, 60 requests per endpoint (~1 min)
    make bench-requests

Why in-process: the load bench (bench.load) runs on a machine shared with other work, where
wall-clock times are noisy; the CPU a request costs the web process is what decides how many
requests a core serves, and it is steady. Each request goes through the whole Django stack
(every middleware, the URL resolver, the view, the template, the context processors) with
Django's test client, as a logged-in user with a session cookie and a CSRF token; it is timed
with ``time.process_time()`` (this process's CPU, PostgreSQL's and Redis's own work not
included) and the median of --repeat requests is printed, with the number of SQL queries of one
more request of the same kind.

Set-up, like the other benches (bench.harness): a new PostgreSQL database (bench_requests_<run>,
migrated, dropped at the end) and a Redis database number of its own (the launches queue
controller wake-ups and websocket events there; emptied and released at the end); portal.settings
with DEBUG off, the simulator driver.

World: one node of 8 x 910B 64 GiB; one course of --students students with a weekly budget, one
"small" template (5 % AI Core, 4 GiB), an instructor; a third of the students with a running
lab (and its allocation) and an ended one with its usage record (the budget reads it); an
operator of the institution (also is_staff).

Endpoints: a trivial view through the same middleware as the same user (``floor``: session,
user, CSRF, CSP, locale, messages; nothing else), the student's dashboard ``GET /``, ``POST
/sessions/launch/`` and ``POST /sessions/<id>/stop/`` (as the page's script sends them, JSON;
each student launches then stops, so every launch is one a student may make), the course page
``GET /courses/<id>/`` as its instructor, the cluster page ``GET /ops/`` and ``GET
/ops/cluster.json`` as the operator. For the websocket: ``publish`` is what the web process does
after a launch commits to tell the pages (read the session, build the student's and the
course's payloads, send to both groups and the cluster group on Redis), ``deliver`` what each
socket's consumer does with one such message (render its words in the reader's language,
encode, hand to the socket).
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass

from bench.harness import Resources, new_token, portal_in_process, raise_keyboard_interrupt_on_sigterm, run_id, write_json

FLOOR = "floor (trivial view, same middleware)"
DASHBOARD = "GET /"
LAUNCH = "POST /sessions/launch/"
STOP = "POST /sessions/<id>/stop/"
COURSE_PAGE = "GET /courses/<id>/"
OPS = "GET /ops/"
OPS_JSON = "GET /ops/cluster.json"
PUBLISH = "websocket publish (launch -> groups)"
DELIVER = "websocket deliver (one message, one socket)"


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m bench.request_cost", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--students", type=int, default=128, help="students in the course, default 128")
    parser.add_argument("--repeat", type=int, default=60, help="requests timed per endpoint (median printed), default 60")
    parser.add_argument("--json", metavar="PATH", help="also write the figures as JSON to PATH")
    args = parser.parse_args(argv)
    if args.students < 3 or args.repeat < 1:
        parser.error("--students must be >= 3 and --repeat >= 1")
    return args


# --- the trivial view: this module is also the URLconf while it measures -------------------------------


def floor_view(request):
    from django.http import HttpResponse

    return HttpResponse(f"ok {request.user.pk}")


def _urlpatterns():
    from django.urls import include, path

    return [path("bench/floor/", floor_view), path("", include("portal.urls"))]


def __getattr__(name: str):
    # Django reads ``urlpatterns`` only after django.setup(); building it at import would need settings.
    if name == "urlpatterns":
        return _urlpatterns()
    raise AttributeError(name)


# --- world -----------------------------------------------------------------------------------------------


def build_world(*, students: int) -> dict:
    """The node, the course with its students, sessions and usage, the instructor and the operator."""
    from datetime import timedelta

    from django.contrib.auth import get_user_model
    from django.contrib.auth.hashers import make_password
    from django.utils import timezone

    from labs.models import (
        Allocation,
        Card,
        Course,
        CourseQuota,
        Enrollment,
        Institution,
        InstitutionRole,
        LabSession,
        LabTemplate,
        Node,
        UsageRecord,
    )

    now = timezone.now()
    institution = Institution.objects.create(name="Cost University", slug="cost")
    node = Node.objects.create(name="npu-001")
    cards = Card.objects.bulk_create(
        Card(node=node, index=i, die_id=f"npu-001-die-{i}", chip_type="Ascend910B", memory_mib=64 * 1024) for i in range(8)
    )
    template = LabTemplate.objects.create(
        institution=institution, name="small", slug="small", image="jupyter/base:latest", core_percent=5, memory_mib=4096
    )
    course = Course.objects.create(institution=institution, code="COST101", title="Request cost", term="bench")
    CourseQuota.objects.create(
        course=course,
        core_percent=5 * students,
        memory_mib=4096 * students,
        instance_count=students,
        sessions_per_student=1,
        max_session_minutes=180,
        budget_core_percent_hours=10_000,
    )
    course.templates.add(template)
    User = get_user_model()
    password = make_password(new_token())
    users = User.objects.bulk_create(User(username=f"cost-student{i + 1:04d}", password=password) for i in range(students))
    instructor = User.objects.create(username="cost-instructor", password=password)
    operator = User.objects.create(username="cost-operator", password=password, is_staff=True)
    Enrollment.objects.bulk_create(
        [Enrollment(user=u, course=course, role=Enrollment.Role.STUDENT) for u in users]
        + [Enrollment(user=instructor, course=course, role=Enrollment.Role.INSTRUCTOR)]
    )
    InstitutionRole.objects.create(user=operator, institution=institution, role=InstitutionRole.Role.OPERATOR)

    busy = users[: students // 3]
    started = now - timedelta(minutes=20)
    running = LabSession.objects.bulk_create(
        LabSession(
            student=u,
            course=course,
            template=template,
            state="running",
            admitted_at=started,
            started_at=started,
            running_at=started,
            secret=new_token(),
        )
        for u in busy
    )
    ended_at = now - timedelta(hours=2)
    ended = LabSession.objects.bulk_create(
        LabSession(
            student=u,
            course=course,
            template=template,
            state="stopped",
            admitted_at=ended_at - timedelta(hours=1),
            started_at=ended_at - timedelta(hours=1),
            running_at=ended_at - timedelta(hours=1),
            ended_at=ended_at,
            secret=new_token(),
        )
        for u in busy
    )
    live = Allocation.objects.bulk_create(
        Allocation(session=s, card=cards[n % len(cards)], course=course, core_percent=5, memory_mib=4096, scenario="development")
        for n, s in enumerate(running)
    )
    released = Allocation.objects.bulk_create(
        Allocation(
            session=s,
            card=cards[n % len(cards)],
            course=course,
            core_percent=5,
            memory_mib=4096,
            scenario="development",
            released_at=ended_at,
        )
        for n, s in enumerate(ended)
    )
    UsageRecord.objects.bulk_create(
        UsageRecord(
            allocation=a,
            session=s,
            student_id=s.student_id,
            course=course,
            institution=institution,
            template=template,
            started_at=s.running_at,
            ended_at=ended_at,
            core_percent=5,
            memory_mib=4096,
            core_percent_seconds=5 * 3600,
            memory_mib_seconds=4096 * 3600,
        )
        for a, s in zip(released, ended, strict=True)
    )
    assert len(live) == len(busy)
    return {
        "course": course,
        "template": template,
        "busy": busy,  # students with a running lab (the dashboard's usual case)
        "idle": users[len(busy) :],  # students who launch and stop
        "instructor": instructor,
        "operator": operator,
    }


# --- measuring -------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Cost:
    name: str
    cpu_ms: float  # median CPU time of this process per request
    cpu_ms_min: float
    queries: int | None  # SQL queries of one request (None: not a request)
    samples: int


def logged_in_client(user):
    """A test client with the user's session and a CSRF cookie (the token the page's script sends)."""
    from django.middleware.csrf import _get_new_csrf_string
    from django.test import Client

    client = Client(HTTP_ACCEPT_LANGUAGE="en", HTTP_HOST="127.0.0.1")
    client.force_login(user)
    token = _get_new_csrf_string()
    client.cookies["csrftoken"] = token
    client.csrf = token  # type: ignore[attr-defined]
    return client


def timed(call: Callable[[], object]) -> float:
    began = time.process_time()
    call()
    return (time.process_time() - began) * 1000


def queries_of(call: Callable[[], object]) -> int:
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    with CaptureQueriesContext(connection) as captured:
        call()
    return len(captured.captured_queries)


def check(response, status: int, what: str):
    if response.status_code != status:
        body = response.content[:300].decode(errors="replace")
        raise RuntimeError(f"{what}: HTTP {response.status_code}, expected {status}: {body}")
    return response


def measure(world: dict, *, repeat: int) -> list[Cost]:
    """Every endpoint ``repeat`` times (after two untimed warm-up requests), then once more counting queries."""
    from django.test.utils import override_settings

    with override_settings(ROOT_URLCONF=__name__.replace("__main__", "bench.request_cost")):
        return _measure(world, repeat=repeat)


def _measure(world: dict, *, repeat: int) -> list[Cost]:
    course, template = world["course"], world["template"]
    student = logged_in_client(world["busy"][0])
    instructor = logged_in_client(world["instructor"])
    operator = logged_in_client(world["operator"])
    costs = []

    def page(name: str, client, url: str) -> None:
        get = lambda: check(client.get(url), 200, name)  # noqa: E731
        for _ in range(2):
            get()
        times = [timed(get) for _ in range(repeat)]
        costs.append(Cost(name, statistics.median(times), min(times), queries_of(get), len(times)))

    page(FLOOR, student, "/bench/floor/")
    page(DASHBOARD, student, "/")
    page(COURSE_PAGE, instructor, f"/courses/{course.pk}/")
    page(OPS, operator, "/ops/")
    page(OPS_JSON, operator, "/ops/cluster.json")
    costs[3:3] = _launch_and_stop(world, repeat=repeat)
    costs.extend(_websocket(world, repeat=repeat))
    del template
    return costs


def _launch_and_stop(world: dict, *, repeat: int) -> list[Cost]:
    """Students without a lab launch (the answer is the queued session) and stop it again, each in turn."""
    course, template = world["course"], world["template"]
    idle = world["idle"]
    body = {"course": course.pk, "template": template.pk}
    launches: list[float] = []
    stops: list[float] = []
    launch_queries = stop_queries = None
    for n in range(repeat + 3):
        client = logged_in_client(idle[n % len(idle)])
        headers = {"HTTP_ACCEPT": "application/json", "HTTP_X_CSRFTOKEN": client.csrf}
        answer: dict = {}

        def launch():
            answer["r"] = check(client.post("/sessions/launch/", body, **headers), 201, LAUNCH)  # noqa: B023

        def stop():
            session_id = answer["r"].json()["session"]["id"]  # noqa: B023
            check(client.post(f"/sessions/{session_id}/stop/", {}, **headers), 200, STOP)  # noqa: B023

        if n < 2:  # warm-up
            launch()
            stop()
        elif n == 2:
            launch_queries = queries_of(launch)
            stop_queries = queries_of(stop)
        else:
            launches.append(timed(launch))
            stops.append(timed(stop))
    return [
        Cost(LAUNCH, statistics.median(launches), min(launches), launch_queries, len(launches)),
        Cost(STOP, statistics.median(stops), min(stops), stop_queries, len(stops)),
    ]


def _websocket(world: dict, *, repeat: int) -> list[Cost]:
    """``publish``: the web process's work for one launch's event; ``deliver``: one consumer's for one message."""
    from labs.consumers import SessionUpdatesConsumer
    from labs.models import LabSession
    from labs.selectors.sessions import session_event_payload
    from labs.services import events

    session = LabSession.objects.filter(student__in=world["busy"]).order_by("pk").first()
    publish = lambda: events._send({str(session.pk)})  # noqa: E731
    for _ in range(2):
        publish()
    publishes = [timed(publish) for _ in range(repeat)]
    publish_queries = queries_of(publish)

    consumer = SessionUpdatesConsumer()
    consumer.language = "en"
    sent: list[dict] = []

    async def base_send(message: dict) -> None:
        sent.append(message)

    consumer.base_send = base_send
    message = {"type": "sessions.update", "sessions": [session_event_payload(session, for_owner=True)]}

    async def deliver_all() -> list[float]:
        times = []
        for n in range(repeat + 2):
            began = time.process_time()
            await consumer.sessions_update(message)
            if n >= 2:
                times.append((time.process_time() - began) * 1000)
        return times

    delivers = asyncio.run(deliver_all())
    if not sent or '"sessions"' not in sent[-1]["text"]:
        raise RuntimeError("the consumer sent nothing")
    return [
        Cost(PUBLISH, statistics.median(publishes), min(publishes), publish_queries, len(publishes)),
        Cost(DELIVER, statistics.median(delivers), min(delivers), None, len(delivers)),
    ]


def report(costs: list[Cost], *, students: int) -> None:
    floor = next(c for c in costs if c.name == FLOOR)
    width = max(len(c.name) for c in costs)
    print(f"request cost in-process (CPU of this process per request, median; one course of {students} students)")
    print(f"  {'endpoint':<{width}}  {'CPU ms':>7}  {'min':>6}  {'x floor':>7}  {'queries':>7}")
    for c in costs:
        ratio = c.cpu_ms / floor.cpu_ms if floor.cpu_ms > 0 else float("nan")
        queries = "" if c.queries is None else str(c.queries)
        print(f"  {c.name:<{width}}  {c.cpu_ms:7.2f}  {c.cpu_ms_min:6.2f}  {ratio:7.1f}  {queries:>7}")
    pages = [c for c in costs if c.name in (DASHBOARD, LAUNCH, STOP, COURSE_PAGE, OPS)]
    print(
        "  one core serves about "
        + ", ".join(f"{1000 / c.cpu_ms:.0f}/s of {c.name}" for c in pages if c.cpu_ms > 0)
        + " (CPU alone, one process)"
    )


def run(args: argparse.Namespace) -> dict:
    res = Resources()
    try:
        started = time.monotonic()
        portal_in_process(res, "requests", run_id())
        from django.db import connection

        world = build_world(students=args.students)
        with connection.cursor() as cursor:
            cursor.execute("ANALYZE")
        print(f"set-up (migrate, world): {time.monotonic() - started:.1f} s", flush=True)
        costs = measure(world, repeat=args.repeat)
        report(costs, students=args.students)
        return {"bench": "request_cost", "students": args.students, "repeat": args.repeat, "costs": [asdict(c) for c in costs]}
    finally:
        res.close()


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    raise_keyboard_interrupt_on_sigterm()
    try:
        figures = run(args)
    except KeyboardInterrupt:
        print("interrupted; the database and the Redis number were given back", file=sys.stderr)
        return 130
    write_json(args.json, figures)
    return 0


if __name__ == "__main__":
    sys.exit(main())
