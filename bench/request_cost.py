"""What one request costs the web process: CPU time and queries per endpoint, in-process.

    .venv/bin/python -m bench.request_cost                 # 128 students, 60 requests per endpoint
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
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass

from bench.harness import Resources, bench_main, new_token, portal_in_process, reference_loop_ms, run_id

FLOOR = "floor (trivial view, same middleware)"
DASHBOARD = "GET /"
LAUNCH = "POST /sessions/launch/"
STOP = "POST /sessions/<id>/stop/"
COURSE_PAGE = "GET /courses/<id>/"
OPS = "GET /ops/"
OPS_JSON = "GET /ops/cluster.json"
API_LIST = "GET /api/v1/sessions/ (LMS token, every session)"
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
    from api.services import token_create

    _token, api_token = token_create(institution=institution, name="bench", scopes=["sessions:read"], expires_at=None)
    return {
        "api_token": api_token,
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


HEADERS = {"accept-language": "en"}


def csrf_token() -> str:
    from django.middleware.csrf import _get_new_csrf_string

    return _get_new_csrf_string()  # an unmasked secret: valid as both the cookie and the header


def logged_in_client(user):
    """A test client (sync, for counting queries) with the user's session and a CSRF cookie."""
    from django.test import Client

    client = Client(headers=HEADERS)
    client.force_login(user)
    client.csrf = csrf_token()  # type: ignore[attr-defined]
    client.cookies["csrftoken"] = client.csrf
    return client


async def logged_in_async_client(user):
    """The same through Django's ASGI handler, as Daphne serves it: sync views in a worker thread,
    the websocket publish on commit going back to the event loop (``async_to_sync``)."""
    from django.test import AsyncClient

    client = AsyncClient(headers=HEADERS)
    await client.aforce_login(user)
    client.csrf = csrf_token()  # type: ignore[attr-defined]
    client.cookies["csrftoken"] = client.csrf
    return client


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
    """Every endpoint ``repeat`` times through the ASGI handler (after two untimed warm-up requests);
    the queries of one more request of each kind, counted with the sync client."""
    from asgiref.sync import async_to_sync
    from django.conf import settings
    from django.test.utils import override_settings

    urlconf = __name__.replace("__main__", "bench.request_cost")
    with override_settings(ROOT_URLCONF=urlconf, ALLOWED_HOSTS=[*settings.ALLOWED_HOSTS, "testserver"]):
        queries = _count_queries(world)
        # async_to_sync, not asyncio.run: the views' thread is then this one, with its database
        # connection (a test's transaction included).
        times = async_to_sync(_time_all)(world, repeat=repeat)
    return [Cost(name, statistics.median(ms), min(ms), queries.get(name), len(ms)) for name, ms in times.items()]


def _launch_body(world: dict) -> dict:
    return {"course": world["course"].pk, "template": world["template"].pk}


def _count_queries(world: dict) -> dict[str, int]:
    from django.test import Client

    course = world["course"]
    student = logged_in_client(world["busy"][0])
    instructor = logged_in_client(world["instructor"])
    operator = logged_in_client(world["operator"])
    counts = {}
    for name, client, url in (
        (FLOOR, student, "/bench/floor/"),
        (DASHBOARD, student, "/"),
        (COURSE_PAGE, instructor, f"/courses/{course.pk}/"),
        (OPS, operator, "/ops/"),
        (OPS_JSON, operator, "/ops/cluster.json"),
    ):
        counts[name] = queries_of(lambda c=client, u=url, n=name: check(c.get(u), 200, n))
    lms = Client(headers={**HEADERS, "authorization": f"Bearer {world['api_token']}"})
    counts[API_LIST] = queries_of(
        lambda: check(lms.get(f"/api/v1/sessions/?course={course.pk}&page_size=500"), 200, API_LIST)
    )
    client = logged_in_client(world["idle"][-1])
    headers = {"HTTP_ACCEPT": "application/json", "HTTP_X_CSRFTOKEN": client.csrf}
    answer = {}
    counts[LAUNCH] = queries_of(
        lambda: answer.setdefault("r", check(client.post("/sessions/launch/", _launch_body(world), **headers), 201, LAUNCH))
    )
    session_id = answer["r"].json()["session"]["id"]
    counts[STOP] = queries_of(lambda: check(client.post(f"/sessions/{session_id}/stop/", {}, **headers), 200, STOP))
    counts[PUBLISH] = queries_of(lambda: _publish_one(world)())
    return counts


def _publish_one(world: dict) -> Callable[[], None]:
    from labs.models import LabSession
    from labs.services import events

    session_id = str(LabSession.objects.filter(student__in=world["busy"]).order_by("pk").values_list("pk", flat=True)[0])
    return lambda: events._send({session_id})


async def _timed(call) -> float:
    began = time.process_time()
    await call()
    return (time.process_time() - began) * 1000


async def _time_all(world: dict, *, repeat: int) -> dict[str, list[float]]:
    from asgiref.sync import sync_to_async
    from django.test import AsyncClient

    course = world["course"]
    student = await logged_in_async_client(world["busy"][0])
    instructor = await logged_in_async_client(world["instructor"])
    operator = await logged_in_async_client(world["operator"])
    times: dict[str, list[float]] = {}

    async def page(name: str, client, url: str, headers: dict | None = None) -> None:
        async def get():
            check(await client.get(url, headers=headers), 200, name)

        for _ in range(2):
            await get()
        times[name] = [await _timed(get) for _ in range(repeat)]

    await page(FLOOR, student, "/bench/floor/")
    await page(DASHBOARD, student, "/")
    times[LAUNCH], times[STOP] = await _launch_and_stop(world, repeat=repeat)
    await page(COURSE_PAGE, instructor, f"/courses/{course.pk}/")
    await page(OPS, operator, "/ops/")
    await page(OPS_JSON, operator, "/ops/cluster.json")
    # AsyncClient(headers=...) sends its headers under WSGI names (http-authorization): given per request.
    bearer = {"authorization": f"Bearer {world['api_token']}"}
    await page(API_LIST, AsyncClient(), f"/api/v1/sessions/?course={course.pk}&page_size=500", bearer)
    publish = sync_to_async(await sync_to_async(_publish_one)(world))
    for _ in range(2):
        await publish()
    times[PUBLISH] = [await _timed(publish) for _ in range(repeat)]
    times[DELIVER] = await _deliver(world, repeat=repeat)
    return times


async def _launch_and_stop(world: dict, *, repeat: int) -> tuple[list[float], list[float]]:
    """Students without a lab launch (the answer is the queued session) and stop it again, in turn."""
    idle = world["idle"]
    launches: list[float] = []
    stops: list[float] = []
    clients = [await logged_in_async_client(student) for student in idle[: repeat + 2]]
    for client in clients:
        # A test client builds its middleware chain at its first request (WhiteNoise then scans
        # the static files): done here, untimed, as a Daphne process does it once at start.
        check(await client.get("/bench/floor/"), 200, FLOOR)
    for n in range(repeat + 2):
        client = clients[n % len(clients)]
        headers = {"accept": "application/json", "x-csrftoken": client.csrf}
        answer: dict = {}

        async def launch():
            answer["r"] = check(await client.post("/sessions/launch/", _launch_body(world), headers=headers), 201, LAUNCH)  # noqa: B023

        async def stop():
            session_id = answer["r"].json()["session"]["id"]  # noqa: B023
            check(await client.post(f"/sessions/{session_id}/stop/", {}, headers=headers), 200, STOP)  # noqa: B023

        launched, stopped = await _timed(launch), await _timed(stop)
        if n >= 2:  # the first two warm up
            launches.append(launched)
            stops.append(stopped)
    return launches, stops


async def _deliver(world: dict, *, repeat: int) -> list[float]:
    """One consumer handling one student's message: words in the reader's language, JSON, to the socket."""
    from asgiref.sync import sync_to_async

    from labs.consumers import SessionUpdatesConsumer
    from labs.models import LabSession
    from labs.selectors.sessions import session_event_payload
    from labs.services.events import sessions_message

    def payload():
        session = (
            LabSession.objects.select_related("template", "course__quota", "student").filter(student__in=world["busy"]).first()
        )
        return session_event_payload(session, for_owner=True)

    message = sessions_message([await sync_to_async(payload)()], None)  # written in no language: rendered again
    consumer = SessionUpdatesConsumer()
    consumer.language = "en"
    sent: list[dict] = []

    async def base_send(event: dict) -> None:
        sent.append(event)

    consumer.base_send = base_send
    times = []
    for n in range(repeat + 2):
        began = time.process_time()
        await consumer.sessions_update(message)
        if n >= 2:
            times.append((time.process_time() - began) * 1000)
    if not sent or '"sessions"' not in sent[-1]["text"]:
        raise RuntimeError("the consumer sent nothing")
    return times


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
        speed = reference_loop_ms()
        print(f"reference loop: {speed:.0f} ms of CPU (higher: a slower machine, and every figure below with it)", flush=True)
        costs = measure(world, repeat=args.repeat)
        report(costs, students=args.students)
        return {
            "bench": "request_cost",
            "students": args.students,
            "repeat": args.repeat,
            "reference_loop_ms": speed,
            "costs": [asdict(c) for c in costs],
        }
    finally:
        res.close()


def main(argv: list[str] | None = None) -> int:
    return bench_main(run, parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
