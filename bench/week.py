"""A simulated week of one class on one 8-card server: what the time and fairness policies buy.

    .venv/bin/python -m bench.week [--students 40] [--researchers 16] [--seed 1]

The reference server (8 x Ascend 910B, 64 GiB) serves two courses of one cohort:

* CLASS (``--students``, template 10 % / 8 GiB, its own guarantee 12 instances, for the
  homework evenings): two meetings, Tuesday 10:00-11:30 and Thursday 14:00-15:30. Most students
  come (90 %), launch in the first five minutes and work in bursts; at the end 60 % stop their
  lab and the others leave it open and walk away. Between meetings some do homework in the
  evening, and some of those forget to stop too. A weekly budget per student (60 AI-Core-% x
  hours).
* RESEARCH (``--researchers``, template 25 % / 16 GiB, guarantee two instances): works every
  weekday from about 9:00 to 17:00 on the NPU, borrowing what CLASS does not use; half leave
  their lab running overnight. A session that ends in the working day is launched again.

The same week (same seed: same launches, same bursts of work, same forgotten labs) runs twice,
each time on an empty database:

* **policies**: the portal as shipped — CLASS books its meetings for 90 % of the class (the
  guarantee is raised during them, labs are pre-started 10 min ahead and handed to the first
  students who launch, unclaimed ones stopped 15 min after the start), idle culling on the
  lab's own activity (the template's 60 min, warned 10 min ahead), warned reclaim of borrowed
  sessions (5 min), weekly budgets;
* **baseline**: none of them, as a hub without a culler would run it — a lab ends when its
  student stops it or at the maximum length (class 4 h, research 8 h); nothing is booked or
  reclaimed (the minimum runtime before a reclaim is set beyond the week), no budget applies.

Printed for each: NPU card-hours held (from the usage ledger: AI-Core-% x hours / 100) against
card-hours used (the time the lab was busy), GiB-hours held, the culls, reclaims, budget and
lifetime stops, launches refused, how long class students waited at the meetings (launch to
running) and how many never got a lab there, the reserved labs pre-started, handed to students
(reserved starts) and stopped unclaimed; then the ratios baseline / policies.

How: the portal runs in this process (``portal_in_process``: its own PostgreSQL database and
Redis number) on the simulator driver (labs start 30 s after their instance is created), and
the clock is moved by ``time_machine``: every service reads the simulated time. Each tick runs
what Celery beat runs — the controller (allocation pass, reclaim, lifetimes, instances), the
reservation rule, the idle check every 5 min and the budget check every 5 min (beat's defaults
are 60 s and 30 s: coarser here, to keep the run to minutes) — and writes the node agent's NPU
readings for the labs busy at that moment. Each lab's address is a stand-in on a local port that
answers the idle check as JupyterLab does (``/api/status``, ``/api/kernels``: a kernel busy
inside the student's bursts of work). Ticks are 10 s while a lab starts or stops and 5 min
otherwise; stretches with nothing open are skipped.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from zoneinfo import ZoneInfo

from bench.harness import Resources, fmt_seconds, percentile, portal_in_process, raise_keyboard_interrupt_on_sigterm, run_id

ZONE = "Asia/Shanghai"
# A Monday: budgets' weeks begin on Mondays at 00:00 in the portal's time zone.
MONDAY = datetime(2027, 3, 1, tzinfo=ZoneInfo(ZONE))
MEETINGS = ((1, 10, 0), (3, 14, 0))  # (weekday, hour, minute): Tuesday 10:00, Thursday 14:00
MEETING_MINUTES = 90
CLASS_SHAPE = (10, 8 * 1024)
RESEARCH_SHAPE = (25, 16 * 1024)
FINE_TICK = 10
COARSE_TICK = 300
IDLE_CHECK_SECONDS = 300
BUDGET_CHECK_SECONDS = 300
START_DELAY_SECONDS = 30
# CLASS's own guarantee covers the homework evenings; the meetings are what it books.
HOMEWORK_GUARANTEE = 12
RESERVED_SHARE = 0.9  # labs booked per meeting, as a share of the class: who usually comes


# --- what the people do (decided up front from the seed, the same for both runs) ---------------


@dataclass
class Visit:
    """One lab a person opens: launched at ``start``, busy on the NPU in ``busy`` intervals,
    stopped at ``stop`` (``None``: left open and forgotten)."""

    who: str
    course: str
    start: datetime
    stop: datetime | None
    busy: list[tuple[datetime, datetime]]
    meeting: bool = False
    relaunch_until: datetime | None = None  # research: launch again when it ends before this


def _bursts(rng: random.Random, start: datetime, end: datetime, work: tuple[int, int], pause: tuple[int, int]):
    out, t = [], start + timedelta(minutes=rng.uniform(1, 4))
    while t < end:
        b = min(end, t + timedelta(minutes=rng.uniform(*work)))
        out.append((t, b))
        t = b + timedelta(minutes=rng.uniform(*pause))
    return out


def plan_week(students: int, researchers: int, seed: int) -> list[Visit]:
    rng = random.Random(seed)
    visits: list[Visit] = []
    for i in range(students):
        who = f"student{i:03d}"
        for weekday, hour, minute in MEETINGS:
            if rng.random() >= 0.9:
                continue
            begin = MONDAY + timedelta(days=weekday, hours=hour, minutes=minute)
            end = begin + timedelta(minutes=MEETING_MINUTES)
            start = begin + timedelta(seconds=rng.uniform(0, 300))
            stop = end + timedelta(minutes=rng.uniform(0, 5)) if rng.random() < 0.6 else None
            visits.append(Visit(who, "CLASS", start, stop, _bursts(rng, start, end, (5, 20), (2, 10)), meeting=True))
        for _ in range(rng.choice((0, 1, 1, 2, 3))):
            day = rng.randrange(0, 6)
            start = MONDAY + timedelta(days=day, hours=rng.uniform(13, 22))
            end = start + timedelta(minutes=rng.uniform(30, 150))
            stop = end if rng.random() < 0.7 else None
            visits.append(Visit(who, "CLASS", start, stop, _bursts(rng, start, end, (5, 30), (2, 15))))
    for j in range(researchers):
        who = f"researcher{j:02d}"
        for day in range(5):
            start = MONDAY + timedelta(days=day, hours=9, minutes=rng.uniform(0, 60))
            end = MONDAY + timedelta(days=day, hours=17, minutes=rng.uniform(0, 60))
            stop = end if rng.random() < 0.5 else None
            busy = _bursts(rng, start, end, (20, 90), (5, 30))
            visits.append(Visit(who, "RESEARCH", start, stop, busy, relaunch_until=end - timedelta(minutes=30)))
    return sorted(visits, key=lambda v: v.start)


# --- a stand-in for each lab: answers the idle check as JupyterLab would ------------------------

# session id -> the visit it serves; filled and emptied by ``run_week``, read by the server thread.
LABS: dict[str, Visit] = {}


class StandInLab(BaseHTTPRequestHandler):
    """``/<session>/api/status`` and ``/<session>/api/kernels`` as JupyterLab answers them: the
    kernel is busy inside the visit's bursts of work, and the last activity is the latest one."""

    def do_GET(self) -> None:  # noqa: N802 (the standard library's name)
        sid, _, rest = self.path.strip("/").partition("/")
        visit = LABS.get(sid)
        if visit is None or not self.headers.get("Authorization", "").startswith("token "):
            self.send_error(404)
            return
        now = datetime.now(UTC)
        busy = any(a <= now < b for a, b in visit.busy)
        last = max([min(b, now) for a, b in visit.busy if a <= now] or [visit.start])
        if rest == "api/status":
            body = {"last_activity": (now if busy else last).isoformat(), "started": visit.start.isoformat()}
        elif rest == "api/kernels":
            body = [{"id": "k1", "name": "python3", "execution_state": "busy" if busy else "idle"}]
        else:
            self.send_error(404)
            return
        data = json.dumps(body).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, format, *args) -> None:  # noqa: A002 (the standard library's name)
        pass


def start_stand_in_labs(res: Resources) -> str:
    server = ThreadingHTTPServer(("127.0.0.1", 0), StandInLab)
    threading.Thread(target=server.serve_forever, name="stand-in-labs", daemon=True).start()
    res.on_close("stop the stand-in labs", server.shutdown)
    return f"http://127.0.0.1:{server.server_address[1]}/{{session_id}}/"


# --- one run ---------------------------------------------------------------------------------------


@dataclass
class Figures:
    name: str
    held_card_hours: float = 0.0
    used_card_hours: float = 0.0
    held_gib_hours: float = 0.0
    ends: Counter = field(default_factory=Counter)
    refused: Counter = field(default_factory=Counter)
    meeting_waits: list[float] = field(default_factory=list)
    meeting_never_ran: int = 0
    prestarted: int = 0
    claimed: int = 0
    unclaimed: int = 0
    relaunches: int = 0
    ticks: int = 0
    seconds: float = 0.0


def build_world(*, policies: bool, students: int, researchers: int):
    """The server, both courses of the cohort with their template and quota, everyone enrolled.
    Returns (courses, templates, people) keyed by course code and username."""
    from django.contrib.auth import get_user_model
    from django.contrib.auth.hashers import make_password

    from labs.models import Card, Course, CourseQuota, Enrollment, Institution, LabTemplate, Node

    User = get_user_model()
    password = make_password("week-bench-not-secret")
    institution = Institution.objects.create(name="Week University", slug="week")
    node = Node.objects.create(name="npu-node-1")
    Card.objects.bulk_create(
        Card(node=node, index=i, die_id=f"npu-node-1-die-{i}", chip_type="Ascend910B3", memory_mib=64 * 1024) for i in range(8)
    )
    never = 7 * 24 * 60  # minutes: no culling within the week
    courses, templates, people = {}, {}, {}
    for code, template_name, (core, mib), guaranteed, minutes, count, prefix, budget in (
        ("CLASS", "teaching", CLASS_SHAPE, HOMEWORK_GUARANTEE, 240, students, "student{:03d}", 60 if policies else None),
        ("RESEARCH", "research", RESEARCH_SHAPE, 2, 480, researchers, "researcher{:02d}", None),
    ):
        template = LabTemplate.objects.create(
            institution=institution,
            name=template_name,
            slug=template_name,
            image="jupyter/base:latest",
            core_percent=core,
            memory_mib=mib,
            idle_timeout_minutes=60 if policies else never,
            max_lifetime_minutes=minutes,
        )
        course = Course.objects.create(institution=institution, code=code, title=code.title(), term="week")
        course.templates.add(template)
        CourseQuota.objects.create(
            course=course,
            core_percent=core * guaranteed,
            memory_mib=mib * guaranteed,
            instance_count=guaranteed,
            max_session_minutes=minutes,
            cohort="ai",
            budget_core_percent_hours=budget,
        )
        users = User.objects.bulk_create(User(username=prefix.format(i), password=password) for i in range(count))
        Enrollment.objects.bulk_create(Enrollment(user=u, course=course, role=Enrollment.Role.STUDENT) for u in users)
        courses[code], templates[code] = course, template
        people.update({u.username: u for u in users})
    return courses, templates, people


def run_week(name: str, *, policies: bool, visits: list[Visit], students: int, researchers: int, days: int = 7) -> Figures:
    import time_machine
    from django.conf import settings
    from django.core.management import call_command
    from django.db.models import Sum
    from django.test import override_settings

    from labs.domain.reasons import Reason
    from labs.domain.states import ACTIVE, SessionState
    from labs.models import Allocation, InstanceSample, LabSession, UsageRecord
    from labs.services.activity import activity_check
    from labs.services.budgets import budgets_enforce
    from labs.services.controller import controller_run
    from labs.services.reservations import reservation_book, reservations_enforce
    from labs.services.sessions import LaunchRefused, session_launch, session_stop

    figures = Figures(name)
    LABS.clear()
    call_command("flush", interactive=False, verbosity=0)
    state_dir = settings.LAB_DRIVER["OPTIONS"]["state_dir"]
    placement = dict(settings.LAB_PLACEMENT)
    if not policies:
        placement["min_runtime_seconds"] = 8 * 24 * 3600
    began = time.monotonic()
    with (
        override_settings(LAB_PLACEMENT=placement),
        time_machine.travel(MONDAY, tick=False) as clock,
    ):
        _empty_dir(state_dir)
        courses, templates, people = build_world(policies=policies, students=students, researchers=researchers)
        meetings = [
            (MONDAY + timedelta(days=d, hours=h, minutes=m), MONDAY + timedelta(days=d, hours=h, minutes=m + MEETING_MINUTES))
            for d, h, m in MEETINGS
        ]
        if policies:
            reservation_book(
                course=courses["CLASS"],
                template=templates["CLASS"],
                count=max(1, round(students * RESERVED_SHARE)),
                slots=meetings,
                now=MONDAY,
            )
        lead = timedelta(seconds=settings.LAB_RESERVATION_PRESTART_SECONDS)
        grace = timedelta(seconds=settings.LAB_RESERVATION_GRACE_SECONDS)
        # Moments the clock must not jump over: a booking's pre-start, its start, its grace.
        marks = sorted({m for a, _ in meetings for m in (a - lead, a, a + grace)}) if policies else []
        pending = list(visits)  # sorted by start
        open_visits: dict[str, tuple[Visit, str]] = {}  # session id -> (visit, who)
        meeting_launch: dict[str, datetime] = {}
        relaunch_at: list[tuple[datetime, Visit]] = []
        end = MONDAY + timedelta(days=days)
        now = MONDAY
        last_idle = last_budget = MONDAY
        day_shown = -1

        def launch(visit: Visit) -> None:
            try:
                session = session_launch(
                    student=people[visit.who], course=courses[visit.course], template=templates[visit.course]
                )
            except LaunchRefused as exc:
                figures.refused[str(exc.messages[0])[:60]] += 1
                return
            open_visits[str(session.pk)] = (visit, visit.who)
            LABS[str(session.pk)] = visit
            if visit.meeting:
                meeting_launch[str(session.pk)] = now

        while now < end:
            if (now - MONDAY).days != day_shown:
                day_shown = (now - MONDAY).days
                print(f"  {name}: day {day_shown + 1}, {figures.ticks} ticks, {time.monotonic() - began:.0f} s", flush=True)
            while pending and pending[0].start <= now:
                launch(pending.pop(0))
            for at, visit in [r for r in relaunch_at if r[0] <= now]:
                relaunch_at.remove((at, visit))
                figures.relaunches += 1
                launch(visit)
            for sid, (visit, _) in list(open_visits.items()):
                if visit.stop is not None and visit.stop <= now:
                    session_stop(session_id=sid, reason=Reason.of("session.stopped_by", who=visit.who))
                    visit.stop = None
                    visit.busy = []
            controller_run()
            running = {
                str(s["pk"]): s
                for s in LabSession.objects.filter(pk__in=list(open_visits), state=SessionState.RUNNING).values(
                    "pk", "driver_ref", "allocation__card__node_id", "allocation__core_percent", "allocation__memory_mib"
                )
            }
            samples = []
            for sid, row in running.items():
                visit = open_visits[sid][0]
                if any(a <= now < b for a, b in visit.busy) and row["driver_ref"]:
                    samples.append(
                        InstanceSample(
                            node_id=row["allocation__card__node_id"],
                            entity_id=row["driver_ref"],
                            taken_at=now,
                            floor_percent=row["allocation__core_percent"],
                            demand_percent=row["allocation__core_percent"],
                            delivered_percent=row["allocation__core_percent"],
                            memory_used_mib=row["allocation__memory_mib"],
                        )
                    )
            InstanceSample.objects.bulk_create(samples)
            if policies and (now - last_idle).total_seconds() >= IDLE_CHECK_SECONDS:
                activity_check(now=now)
                last_idle = now
            if policies:
                done = reservations_enforce(now=now)
                figures.prestarted += len(done.sessions)
                figures.unclaimed += len(done.unclaimed)
            if policies and (now - last_budget).total_seconds() >= BUDGET_CHECK_SECONDS:
                budgets_enforce(now=now)
                last_budget = now
            # Sessions that ended: a research lab that ended in the working day is launched again.
            ended = dict(
                LabSession.objects.filter(pk__in=list(open_visits)).exclude(state__in=ACTIVE).values_list("pk", "reason_code")
            )
            for sid in map(str, ended):
                visit, _ = open_visits.pop(sid)
                LABS.pop(sid, None)
                if visit.relaunch_until and visit.stop is not None and now < visit.relaunch_until:
                    left = [(a, b) for a, b in visit.busy if b > now]
                    again = Visit(visit.who, visit.course, now, visit.stop, left, relaunch_until=visit.relaunch_until)
                    relaunch_at.append((now + timedelta(minutes=15), again))
            # Fine ticks while a lab starts or stops (seconds away); a queue alone moves when
            # something ends, which a coarse tick sees as the controller would.
            settling = {SessionState.ADMITTED, SessionState.STARTING, SessionState.STOPPING}
            busy_open = LabSession.objects.filter(state__in=settling)
            step = FINE_TICK if busy_open.exists() else COARSE_TICK
            upcoming = [v.start for v in pending[:1]] + [at for at, _ in relaunch_at] + [m for m in marks if m > now]
            if not open_visits and upcoming:
                step = max(step, (min(upcoming) - now).total_seconds())
            elif upcoming:
                step = max(1.0, min(step, (min(upcoming) - now).total_seconds()))
            elif not open_visits:
                break
            for sid, row in running.items():
                visit = open_visits.get(sid, (None,))[0]
                if visit and any(a <= now < b for a, b in visit.busy):
                    figures.used_card_hours += row["allocation__core_percent"] / 100 * min(step, COARSE_TICK) / 3600
            now += timedelta(seconds=step)
            clock.move_to(now)
            figures.ticks += 1
        # The week is over: everything still open is stopped, so the ledger holds every allocation.
        for sid in LabSession.objects.filter(state__in=ACTIVE).values_list("pk", flat=True):
            session_stop(session_id=sid, reason=Reason.of("session.stopped_by", who="bench"))
        for _ in range(30):
            controller_run()
            if not LabSession.objects.filter(state__in=ACTIVE).exists():
                break
            now += timedelta(seconds=FINE_TICK)
            clock.move_to(now)
        assert not Allocation.objects.filter(released_at__isnull=True).exists(), "an allocation was never released"
        totals = UsageRecord.objects.aggregate(core=Sum("core_percent_seconds"), mib=Sum("memory_mib_seconds"))
        figures.held_card_hours = (totals["core"] or 0) / 100 / 3600
        figures.held_gib_hours = (totals["mib"] or 0) / 1024 / 3600
        figures.claimed = LabSession.objects.filter(claimed_at__isnull=False).count()
        for code in LabSession.objects.values_list("reason_code", flat=True):
            figures.ends[code] += 1
        for sid, launched in meeting_launch.items():
            ran = LabSession.objects.filter(pk=sid).values_list("running_at", flat=True).first()
            if ran is None:
                figures.meeting_never_ran += 1
            else:
                figures.meeting_waits.append(max(0.0, (ran - launched).total_seconds()))
    figures.seconds = time.monotonic() - began
    return figures


def _empty_dir(path: str) -> None:
    import shutil
    from pathlib import Path

    shutil.rmtree(path, ignore_errors=True)
    Path(path).mkdir(parents=True, exist_ok=True)


# --- report ----------------------------------------------------------------------------------------


def report(policies: Figures, baseline: Figures) -> None:
    def row(label: str, a, b, fmt=str):
        print(f"  {label:<46} {fmt(a):>14} {fmt(b):>14}")

    hours = "{:.1f}".format
    print(f"\n  {'':<46} {'policies':>14} {'baseline':>14}")
    row("NPU card-hours held (usage ledger)", policies.held_card_hours, baseline.held_card_hours, hours)
    row("NPU card-hours used (NPU busy)", policies.used_card_hours, baseline.used_card_hours, hours)
    row(
        "used / held",
        policies.used_card_hours / max(policies.held_card_hours, 1e-9),
        baseline.used_card_hours / max(baseline.held_card_hours, 1e-9),
        "{:.0%}".format,
    )
    row("NPU memory GiB-hours held", policies.held_gib_hours, baseline.held_gib_hours, "{:.0f}".format)
    for code, label in (
        ("session.idle_culled", "idle culls"),
        ("session.reclaimed", "reclaims (borrowed labs stopped)"),
        ("session.budget_stopped", "budget stops"),
        ("session.lifetime", "lifetime stops"),
    ):
        row(label, policies.ends[code], baseline.ends[code])
    row("launches refused", sum(policies.refused.values()), sum(baseline.refused.values()))
    row("research launches again after an end", policies.relaunches, baseline.relaunches)
    for p in (50, 95):
        row(
            f"class at meetings: launch -> running p{p}",
            percentile(policies.meeting_waits, p),
            percentile(baseline.meeting_waits, p),
            fmt_seconds,
        )
    row(
        "class at meetings: waited > 5 min",
        sum(w > 300 for w in policies.meeting_waits),
        sum(w > 300 for w in baseline.meeting_waits),
    )
    row("class at meetings: never ran", policies.meeting_never_ran, baseline.meeting_never_ran)
    row("reserved labs pre-started", policies.prestarted, baseline.prestarted)
    row("reserved starts (handed to a student)", policies.claimed, baseline.claimed)
    row("reserved labs unclaimed, stopped", policies.unclaimed, baseline.unclaimed)
    row(
        "simulated ticks (wall-clock seconds)",
        f"{policies.ticks} ({policies.seconds:.0f} s)",
        f"{baseline.ticks} ({baseline.seconds:.0f} s)",
    )
    for name, figures in (("policies", policies), ("baseline", baseline)):
        for reason, n in figures.refused.most_common(3):
            print(f"  refused ({name}) x{n}: {reason}")
    saved = baseline.held_card_hours / max(policies.held_card_hours, 1e-9)
    print(
        f"\n  baseline / policies: {saved:.2f}x the card-hours held for "
        f"{baseline.used_card_hours / max(policies.used_card_hours, 1e-9):.2f}x the card-hours used"
    )


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m bench.week", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--students", type=int, default=40, help="students in the class, default 40")
    parser.add_argument("--researchers", type=int, default=16, help="people in the borrowing course, default 16")
    parser.add_argument("--seed", type=int, default=1, help="what everyone does, default 1")
    parser.add_argument("--days", type=int, default=7, help="simulated days from Monday 00:00, default 7 (the whole week)")
    args = parser.parse_args(argv)
    if not 1 <= args.students <= 64:
        parser.error("--students must be 1..64 (one 8-card server holds 64 labs of 8 GiB)")
    if not 0 <= args.researchers <= 32:
        parser.error("--researchers must be 0..32 (one 8-card server holds 32 labs of 16 GiB)")
    if not 1 <= args.days <= 7:
        parser.error("--days must be 1..7")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    raise_keyboard_interrupt_on_sigterm()
    rid = run_id()
    res = Resources()
    try:
        labs = start_stand_in_labs(res)
        portal_in_process(
            res,
            "week",
            rid,
            TIME_ZONE=ZONE,
            LAB_SIMULATOR_DELAY_SECONDS=str(START_DELAY_SECONDS),
            LAB_DRIVER_OPTIONS=json.dumps({"access_url": labs}),
            LAB_IDLE_PROBE_TIMEOUT_SECONDS="2",
        )
        print(
            f"simulated week: {args.students} students in CLASS (meetings Tue 10:00, Thu 14:00), "
            f"{args.researchers} in RESEARCH borrowing, one server of 8 x 910B 64 GiB, seed {args.seed}",
            flush=True,
        )
        visits = plan_week(args.students, args.researchers, args.seed)
        people = {"students": args.students, "researchers": args.researchers, "days": args.days}
        policies = run_week("policies", policies=True, visits=_copy(visits), **people)
        baseline = run_week("baseline", policies=False, visits=_copy(visits), **people)
        report(policies, baseline)
        return 0
    finally:
        res.close()


def _copy(visits: list[Visit]) -> list[Visit]:
    return [Visit(v.who, v.course, v.start, v.stop, list(v.busy), v.meeting, v.relaunch_until) for v in visits]


if __name__ == "__main__":
    sys.exit(main())
