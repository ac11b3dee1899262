"""The run: the world built, the portal's processes started, Locust run, the CPU accounted for."""

from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

from bench.harness import (
    POSTGRES_SERVER_URL,
    REDIS_SERVER_URL,
    ROOT,
    CpuMeter,
    Resources,
    postgres_create_database,
    postgres_drop_database,
    redis_claim_database,
    redis_release_database,
    reference_loop_ms,
    run_id,
)
from bench.load.plan import (
    INSTANCES_PER_SERVER,
    LOCUSTFILE,
    MARK_PREFIX,
    PROGRESS_PREFIX,
    SATURATION_RAMP,
    SATURATION_THINK,
    student_pace,
)
from bench.load.results import report, results_read, summarise


def build_world(*, students: int, instructors: int, operators: int, courses: int, servers: int) -> dict:
    """Nodes, courses each with a quota for all its students at once, the accounts; the locustfile's config."""
    from django.contrib.auth import get_user_model
    from django.contrib.auth.hashers import make_password

    from bench.classstart.portal import PASSWORD
    from labs.models import Card, Course, CourseQuota, Enrollment, Institution, InstitutionRole, LabTemplate, Node

    institution = Institution.objects.create(name="Load University", slug="load")
    for s in range(servers):
        node = Node.objects.create(name=f"npu-{s + 1:03d}")
        Card.objects.bulk_create(
            Card(node=node, index=i, die_id=f"{node.name}-die-{i}", chip_type="Ascend910B", memory_mib=64 * 1024)
            for i in range(8)
        )
    template = LabTemplate.objects.create(
        institution=institution, name="small", slug="small", image="jupyter/base:latest", core_percent=5, memory_mib=4096
    )
    course_rows = []
    for c in range(courses):
        size = len(range(c, students, courses))  # the students dealt round-robin
        course = Course.objects.create(
            institution=institution, code=f"LOAD{c + 1:02d}", title=f"Load course {c + 1}", term="load"
        )
        CourseQuota.objects.create(
            course=course,
            core_percent=5 * max(size, 1),
            memory_mib=4096 * max(size, 1),
            instance_count=max(size, 1),
            sessions_per_student=1,
            max_session_minutes=180,
        )
        course.templates.add(template)
        course_rows.append(course)
    password = make_password(PASSWORD)  # one hash for all: hashing each would only cost set-up time
    User = get_user_model()
    student_users = User.objects.bulk_create(
        User(username=f"load-student{i + 1:04d}", password=password) for i in range(students)
    )
    teacher_users = User.objects.bulk_create(
        User(username=f"load-instructor{i + 1:03d}", password=password) for i in range(instructors)
    )
    operator_users = User.objects.bulk_create(
        User(username=f"load-operator{i + 1:02d}", password=password, is_staff=True) for i in range(operators)
    )
    Enrollment.objects.bulk_create(
        [Enrollment(user=u, course=course_rows[i % courses], role=Enrollment.Role.STUDENT) for i, u in enumerate(student_users)]
        + [
            Enrollment(user=u, course=course_rows[i % courses], role=Enrollment.Role.INSTRUCTOR)
            for i, u in enumerate(teacher_users)
        ]
    )
    InstitutionRole.objects.bulk_create(
        InstitutionRole(user=u, institution=institution, role=InstitutionRole.Role.OPERATOR) for u in operator_users
    )
    return {
        "password": PASSWORD,
        "students": [u.username for u in student_users],
        "instructors": [[u.username, course_rows[i % courses].pk] for i, u in enumerate(teacher_users)],
        "operators": [u.username for u in operator_users],
    }


def locust_command(*, config_path: Path, base_url: str, users: int, spawn_rate: float, run_time: float) -> list[str]:
    return [
        sys.executable, "-m", "locust", "-f", str(LOCUSTFILE), "--headless",
        "-u", str(users), "-r", f"{spawn_rate:g}", "-t", f"{math.ceil(run_time)}s",
        "--host", base_url, "--only-summary", "--stop-timeout", "10", "--loglevel", "WARNING",
    ]  # fmt: skip


def run_locust(
    command: list[str], *, env: dict[str, str], log_path: Path, timeout: float, on_mark: Callable[[str, int], None]
) -> int:
    """Run Locust, echoing the locustfile's progress lines and passing its marks to ``on_mark``; the rest
    (Locust's own summary, warnings) goes to ``log_path``. Killed after ``timeout`` seconds."""
    with open(log_path, "w") as log:
        child = subprocess.Popen(
            command, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True
        )
        watchdog = threading.Timer(timeout, child.kill)
        watchdog.start()
        try:
            for line in child.stdout:
                if line.startswith(PROGRESS_PREFIX):
                    print(f"  {line[len(PROGRESS_PREFIX) :].rstrip()}", flush=True)
                elif line.startswith(MARK_PREFIX):
                    on_mark(line[len(MARK_PREFIX) :].strip(), child.pid)
                log.write(line)
            child.wait()
        finally:
            watchdog.cancel()
            if child.poll() is None:
                child.kill()
                child.wait()
    return child.returncode


# --- where the CPU goes ------------------------------------------------------------------------------


def run(args: argparse.Namespace) -> dict:
    import random

    from bench.classstart.portal import portal_env, start_services

    rid = run_id()
    db_name = f"bench_load_{rid}"
    res = Resources(keep_temp=args.keep_logs)
    try:
        temp = res.make_temp_dir(f"npu-lab-bench-load-{rid}-")
        database_url = postgres_create_database(POSTGRES_SERVER_URL, db_name, connection_limit=args.db_connection_limit)
        res.on_close(f"drop database {db_name}", lambda: postgres_drop_database(POSTGRES_SERVER_URL, db_name))
        owner = f"bench-load-{rid}"
        redis_url = redis_claim_database(REDIS_SERVER_URL, owner)
        res.on_close(f"release {redis_url}", lambda: redis_release_database(redis_url, owner))
        (temp / "var").mkdir()
        env = portal_env(
            database_url=database_url,
            redis_url=redis_url,
            var_dir=temp / "var",
            start_delay=args.start_delay,
            channels_prefix=f"bench-{rid}",
        )
        # The portal's settings with the trivial view and the request-thread CPU header (bench.load.cpu).
        env["DJANGO_SETTINGS_MODULE"] = "bench.load.settings"
        os.environ.update(env)

        import django

        django.setup()
        from django.core.management import call_command
        from django.db import connections

        res.on_close("close this process's database connections", connections.close_all)
        setup_started = time.monotonic()
        call_command("migrate", interactive=False, verbosity=0)
        servers = max(1, math.ceil(args.students / INSTANCES_PER_SERVER))
        world = build_world(
            students=args.students, instructors=args.instructors, operators=args.operators, courses=args.courses, servers=servers
        )
        connections.close_all()  # this process is idle from here on: give its connections back
        [base_url] = start_services(res, env, args, rid, web_processes=args.web_processes)
        print(f"set-up (migrate, data, services): {time.monotonic() - setup_started:.1f} s; {base_url}", flush=True)
        speed_before = reference_loop_ms()
        print(f"reference loop before the run: {speed_before:.0f} ms of CPU (bench.harness.reference_loop_ms)", flush=True)

        results_path = temp / "results.json"
        config = {
            **world,
            "duration": args.duration,
            "warmup": args.warmup,
            "login_timeout": args.login_timeout,
            "think": list(args.think),
            "saturation": args.saturation,
            "saturation_think": list(SATURATION_THINK),
            "pace": student_pace(args.students, args.rate),
            "login_concurrency": args.login_concurrency,
            "results": str(results_path),
            "seed": random.randrange(2**32),
        }
        config_path = temp / "load-config.json"
        config_path.write_text(json.dumps(config))
        users = args.students + args.instructors + args.operators
        # Locust's own bound: every login, the window and a margin; the locustfile normally ends sooner.
        run_time = args.login_timeout + args.warmup + args.duration + args.saturation + SATURATION_RAMP + 30
        command = locust_command(
            config_path=config_path, base_url=base_url, users=users, spawn_rate=args.spawn_rate, run_time=run_time
        )
        locust_env = {**os.environ, "LOAD_CONFIG": str(config_path), "PYTHONPATH": str(ROOT)}
        print(
            f"locust: {users} users at {args.spawn_rate:g}/s, {args.login_concurrency} logins at a time; "
            "the clock starts once all are logged in",
            flush=True,
        )
        by_name = {s.name: s.process.pid for s in res.services}

        def new_meter() -> CpuMeter:
            return CpuMeter(
                {
                    "Daphne": [pid for name, pid in by_name.items() if name.startswith("daphne")],
                    "Celery workers": [pid for name, pid in by_name.items() if name.startswith("worker")],
                    "Celery beat": [by_name["beat"]],
                },
                {
                    "PostgreSQL (this run's backends)": lambda command: f" {db_name} {db_name} " in command,
                    "Redis server (shared with other work)": lambda command: command.startswith("redis-server"),
                },
            )

        meter, saturation_meter = new_meter(), new_meter()
        loads = {}

        def on_mark(mark: str, locust_pid: int) -> None:
            for m in (meter, saturation_meter):
                m.groups["Locust"] = [locust_pid]
            if mark == "window-open":
                meter.start()
            elif mark == "window-closed":
                meter.stop()
                loads["window"] = load_average()
            elif mark == "saturation-open":
                saturation_meter.start()
            elif mark == "saturation-closed":
                saturation_meter.stop()
                loads["saturation"] = load_average()

        code = run_locust(command, env=locust_env, log_path=temp / "locust.log", timeout=run_time + 60, on_mark=on_mark)
        if not results_path.exists():
            tail = "\n".join((temp / "locust.log").read_text(errors="replace").splitlines()[-30:])
            raise RuntimeError(f"Locust exited with code {code} and wrote no results:\n{tail}")
        results = results_read(results_path)
        window = results.window
        # The meter's shares are % of one core over its own span, which is the window's give or take a read of /proc.
        web_cpu_ms = meter.shares["Daphne"] * 10 * (window[1] - window[0]) if window and meter.shares else None
        summary = summarise(results, rate=args.rate, web_cpu_ms=web_cpu_ms)
        summary["cpu_percent_of_one_core"] = meter.shares
        summary["saturation_cpu_percent_of_one_core"] = saturation_meter.shares
        summary["load_average"] = loads
        summary["reference_loop_ms"] = [speed_before, reference_loop_ms()]
        summary["args"] = {k: v for k, v in vars(args).items() if k not in {"json", "keep_logs", "web_conn_max_age"}}
        summary["sessions_by_state"] = sessions_by_state()
        report(summary, args)
        print(f"  sessions in the database at the end, by state: {summary['sessions_by_state']}")
        print(
            "  load average (1, 5, 15 min) at the window's end: {}; at the saturation phase's end: {}".format(
                loads.get("window", "n/a"), loads.get("saturation", "n/a")
            )
        )
        print(
            "  reference loop before and after the run: {:.0f} and {:.0f} ms of CPU (higher: a slower machine,"
            " and every figure above with it)".format(*summary["reference_loop_ms"])
        )
        return summary
    finally:
        res.close()


def load_average() -> str:
    return " ".join(Path("/proc/loadavg").read_text().split()[:3])


def sessions_by_state() -> dict[str, int]:
    from django.db.models import Count

    from labs.models import LabSession

    return dict(LabSession.objects.values_list("state").annotate(n=Count("id")).order_by("state"))
