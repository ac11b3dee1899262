"""A class taking back its guarantee: 30 students wait for 30 labs another course borrowed.

    .venv/bin/python -m bench.reclaim [--students 30] [--warning 300]

One 8-card server (Ascend 910B, 64 GiB) full: 64 labs of 10 % / 8 GiB. BORROW holds all of them;
34 are inside its own guarantee, the other ``--students`` ride on LEND's idle guarantee (one
cohort). Then LEND's class (guarantee: one lab each) launches together, and each of its labs
can start only once a borrowed one is reclaimed: warned ``--warning`` seconds ahead (the
portal's ``LAB_RECLAIM_WARNING_SECONDS``, default 300), then stopped.

The portal runs in this process (its own PostgreSQL database and Redis number) on the simulator
driver (a lab starts ``START`` s after its instance is created; an instance is deleted at once),
and the clock is moved by ``time_machine`` in ticks of ``TICK`` s; each tick runs the controller
(allocation pass, reclaim, instances) as beat does.

Printed: how many borrowed labs were warned in the first pass; what a waiting student reads
then; when the last of the class was running, against the target of one warning period plus a
start (+ two ticks); and, in the same run, the same class launching on an empty server (no
reclaim) as the baseline: the ratio is the cost of taking the capacity back.
"""

from __future__ import annotations

import argparse
import sys
import time
from datetime import UTC, datetime, timedelta

from bench.harness import Resources, fmt_seconds, portal_in_process, raise_keyboard_interrupt_on_sigterm, run_id

START = 30  # seconds from instance created to lab running (the simulator's delay)
TICK = 10
SHAPE = (10, 8 * 1024)
SERVER_LABS = 64  # 8 cards x 64 GiB / 8 GiB
T0 = datetime(2027, 3, 2, 8, 0, tzinfo=UTC)


def build(*, students: int, borrowed: int):
    """The server, BORROW (guarantee SERVER_LABS - borrowed) and LEND (guarantee ``students``)."""
    from django.contrib.auth import get_user_model
    from django.contrib.auth.hashers import make_password

    from labs.models import Card, Course, CourseQuota, Enrollment, Institution, LabTemplate, Node

    User = get_user_model()
    password = make_password("reclaim-bench-not-secret")
    institution = Institution.objects.create(name="Reclaim University", slug="reclaim")
    node = Node.objects.create(name="npu-node-1")
    Card.objects.bulk_create(
        Card(node=node, index=i, die_id=f"npu-node-1-die-{i}", chip_type="Ascend910B3", memory_mib=64 * 1024) for i in range(8)
    )
    core, mib = SHAPE
    template = LabTemplate.objects.create(
        institution=institution, name="lab", slug="lab", image="jupyter/base:latest", core_percent=core, memory_mib=mib
    )
    made = {}
    for code, guaranteed, people in (("BORROW", SERVER_LABS - borrowed, SERVER_LABS), ("LEND", students, students)):
        course = Course.objects.create(institution=institution, code=code, title=code.title(), term="bench")
        course.templates.add(template)
        CourseQuota.objects.create(
            course=course,
            core_percent=core * guaranteed,
            memory_mib=mib * guaranteed,
            instance_count=guaranteed,
            cohort="dept",
        )
        users = User.objects.bulk_create(User(username=f"{code.lower()}{i:03d}", password=password) for i in range(people))
        Enrollment.objects.bulk_create(Enrollment(user=u, course=course, role=Enrollment.Role.STUDENT) for u in users)
        made[code] = (course, users)
    return template, made


def run_case(name: str, *, students: int, borrowed: int) -> dict:
    """LEND's class launches at T0 with ``borrowed`` of the server's labs on loan to BORROW
    (0: the server is empty). Returns the figures."""
    import time_machine
    from django.core.management import call_command

    from labs.models import LabSession, RepairEvent
    from labs.services.controller import controller_run
    from labs.services.sessions import session_launch

    call_command("flush", interactive=False, verbosity=0)
    began = time.monotonic()
    figures: dict = {"case": name}
    with time_machine.travel(T0 - timedelta(hours=2), tick=False) as clock:
        template, made = build(students=students, borrowed=borrowed)
        now = T0 - timedelta(hours=2)
        if borrowed:
            course, users = made["BORROW"]
            for user in users:
                session_launch(student=user, course=course, template=template)
            for _ in range(30):
                controller_run()
                now += timedelta(seconds=TICK)
                clock.move_to(now)
            running = LabSession.objects.filter(course=course, state="running").count()
            assert running == SERVER_LABS, f"BORROW runs {running} of {SERVER_LABS}"
        now = T0
        clock.move_to(now)
        course, users = made["LEND"]
        waiting = [session_launch(student=user, course=course, template=template).pk for user in users]
        controller_run()
        figures["warned_first_pass"] = RepairEvent.objects.filter(kind="reclaim_warned").count()
        reasons = {s.reason for s in LabSession.objects.filter(pk__in=waiting, state="queued")}
        figures["waiting_reads"] = sorted(reasons)[:2]
        deadline = T0 + timedelta(hours=3)
        while now < deadline:
            ran = LabSession.objects.filter(pk__in=waiting, state="running").count()
            if ran == len(waiting):
                break
            now += timedelta(seconds=TICK)
            clock.move_to(now)
            controller_run()
        times = LabSession.objects.filter(pk__in=waiting, running_at__isnull=False).values_list("running_at", flat=True)
        figures["running"] = len(times)
        figures["last_running_s"] = max((t - T0).total_seconds() for t in times) if times else None
        figures["warned_total"] = RepairEvent.objects.filter(kind="reclaim_warned").count()
        figures["withdrawn"] = RepairEvent.objects.filter(kind="reclaim_withdrawn").count()
        figures["reclaimed"] = RepairEvent.objects.filter(kind="reclaimed").count()
    figures["wall_s"] = time.monotonic() - began
    return figures


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench.reclaim", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--students", type=int, default=30, help="LEND's class, each waiting for one borrowed lab (default 30)")
    parser.add_argument("--warning", type=int, default=300, help="LAB_RECLAIM_WARNING_SECONDS (default 300)")
    args = parser.parse_args(argv)
    if not 1 <= args.students <= SERVER_LABS - 1:
        parser.error(f"--students must be 1..{SERVER_LABS - 1}")
    if not 0 <= args.warning <= 3600:
        parser.error("--warning must be 0..3600 seconds")
    raise_keyboard_interrupt_on_sigterm()
    rid = run_id()
    res = Resources()
    try:
        portal_in_process(
            res,
            "reclaim",
            rid,
            LAB_SIMULATOR_DELAY_SECONDS=str(START),
            LAB_RECLAIM_WARNING_SECONDS=str(args.warning),
            LAB_CONTROLLER_ROUND_PAUSE_SECONDS="0",
        )
        print(
            f"reclaim for a class: {args.students} students of LEND wait for {args.students} labs BORROW borrowed "
            f"(one 8-card server full of {SERVER_LABS} labs of 10 % / 8 GiB); warning {args.warning} s, start {START} s, "
            f"tick {TICK} s",
            flush=True,
        )
        reclaim = run_case("reclaim", students=args.students, borrowed=args.students)
        baseline = run_case("empty server", students=args.students, borrowed=0)
        target = args.warning + START + 2 * TICK
        last, base = reclaim["last_running_s"], baseline["last_running_s"]
        print(f"  warned in the first pass: {reclaim['warned_first_pass']} of {args.students}")
        print(f"  a waiting student reads: {reclaim['waiting_reads']}")
        print(
            f"  warnings {reclaim['warned_total']}, withdrawn {reclaim['withdrawn']}, reclaimed {reclaim['reclaimed']}; "
            f"running {reclaim['running']} of {args.students}"
        )
        print(f"  last of the class running after: {fmt_seconds(last) if last is not None else 'never'} (target <= {target} s)")
        print(f"  baseline (empty server, same class): {fmt_seconds(base) if base is not None else 'never'}")
        if last is not None and base:
            print(f"  ratio reclaim / baseline: {last / base:.1f}x (the warning period is {args.warning} s of it)")
        print(f"  wall time: {reclaim['wall_s'] + baseline['wall_s']:.0f} s")
        ok = (
            last is not None
            and last <= target
            and reclaim["running"] == args.students
            and reclaim["warned_first_pass"] == args.students
            and reclaim["withdrawn"] == 0
        )
        print(f"reclaim: {'PASS' if ok else 'FAIL'}")
        return 0 if ok else 1
    except KeyboardInterrupt:
        print("interrupted; the database and the Redis number were given back", file=sys.stderr)
        return 130
    finally:
        res.close()


if __name__ == "__main__":
    sys.exit(main())
