"""The load bench's own helpers (bench/load/): reading pages and results, aggregating, judging.

The load itself is not run here except one ``--quick`` run (marked slow) that checks the whole
harness holds together: Locust, the locustfile, the services and the report. Nothing here
imports Locust: it patches the standard library with gevent on import.
"""

from __future__ import annotations

import json
import math
import subprocess
import sys
import time

import pytest
from django.contrib.auth import get_user_model
from django.test import Client

from bench.harness import ROOT, cpu_shares, machine_busy_ticks, machine_steal_ticks, proc_stat_fields
from bench.load.plan import (
    COURSE_PAGE,
    DASHBOARD,
    FLOOR,
    LAUNCH,
    LOGIN_POST,
    OPS,
    STOP,
    TEACH,
    WS_CONNECT,
    WS_STOP,
    csrf_token_of,
    launch_forms_of,
    parse_args,
    student_pace,
    think_range,
)
from bench.load.results import (
    EndpointStats,
    Sample,
    cpu_table,
    endpoint_stats,
    results_read,
    summarise,
    total_rps,
    verdict,
)
from bench.load.run import build_world
from labs.models import Course, Enrollment, InstitutionRole
from tests.factories import course_with_students


def stats(name: str, *, count: int = 100, rps: float = 10.0, p99: float = 100.0, failures: int = 0, statuses=None):
    return EndpointStats(name, "GET", count, rps, p99 / 2, p99, failures, statuses or {200: count})


def all_endpoints(p99: float = 100.0, action_rps: float = 30.0) -> list[EndpointStats]:
    pages = [stats(name, p99=p99) for name in (DASHBOARD, COURSE_PAGE, TEACH, OPS)]
    return pages + [stats(LAUNCH, rps=action_rps, p99=p99), stats(STOP, rps=action_rps, p99=p99)]


def test_the_launch_forms_and_csrf_token_are_read_from_the_real_dashboard(db):
    course, templates, students, _ = course_with_students(2)
    client = Client()
    client.force_login(students[0])
    page = client.get("/").content.decode()
    assert csrf_token_of(page)
    assert sorted(launch_forms_of(page)) == sorted((course.pk, t.pk) for t in templates)


def test_the_login_form_carries_a_csrf_token(db):
    assert csrf_token_of(Client().get("/accounts/login/").content.decode())


def test_a_page_without_a_csrf_token_is_an_error():
    with pytest.raises(ValueError):
        csrf_token_of("<form></form>")


def test_only_requests_sent_inside_the_window_count_and_rates_are_per_second_of_it():
    samples = [Sample("GET", DASHBOARD, start, 10.0 * (i + 1), True, 200) for i, start in enumerate([5, 10, 11, 12, 19.9, 20])]
    (dashboard,) = endpoint_stats(samples, (10.0, 20.0))
    assert dashboard.count == 4  # 10, 11, 12 and 19.9; 5 is before, 20 is the end
    assert dashboard.rps == pytest.approx(0.4)
    assert dashboard.p50_ms == pytest.approx(35.0)
    assert dashboard.statuses == {200: 4}


def test_failed_requests_count_with_their_time_but_missed_socket_messages_have_no_delay():
    samples = [
        Sample("POST", LAUNCH, 1.0, 100.0, True, 201),
        Sample("POST", LAUNCH, 2.0, 30_000.0, False, 500),
        Sample("WS", WS_STOP, 1.0, 50.0, True),
        Sample("WS", WS_STOP, 2.0, 0.0, False),
    ]
    by_name = {s.name: s for s in endpoint_stats(samples, (0.0, 10.0))}
    assert by_name[LAUNCH].failures == 1
    assert by_name[LAUNCH].p99_ms > 29_000
    assert by_name[WS_STOP].failures == 1
    assert by_name[WS_STOP].p50_ms == 50.0


def test_socket_delays_are_not_requests_in_the_rates():
    samples = [Sample("POST", LAUNCH, 1.0, 10.0, True, 201), Sample("WS", WS_CONNECT, 1.0, 10.0, True)]
    assert total_rps(endpoint_stats(samples, (0.0, 2.0))) == 0.5


def test_all_targets_met_passes():
    assert all(check.passed for check in verdict(all_endpoints(), 60.0))


def test_a_missed_target_says_by_how_much():
    checks = {check.what: check for check in verdict(all_endpoints(p99=450.0, action_rps=20.0), 50.0)}
    dashboard = checks["GET / p99 <= 300 ms"]
    assert not dashboard.passed and "1.5x the target" in dashboard.detail
    rate = checks["launch + stop >= 47.5 requests/s (95% of 50)"]
    assert not rate.passed and "40.0 requests/s (80% of 50), 7.5 short" == rate.detail


def test_the_rate_passes_at_95_per_cent_of_the_rate_aimed_at_and_unpaced_runs_are_held_to_100():
    def rate_check(action_rps: float, aimed: float):
        return next(c for c in verdict(all_endpoints(action_rps=action_rps), aimed) if c.what.startswith("launch + stop"))

    assert rate_check(47.5, 100.0).passed  # 95 of 100
    assert not rate_check(47.0, 100.0).passed  # 94 of 100
    assert not rate_check(30.0, 100.0).passed  # 60 requests/s passed the old rule (>= 50), not this one
    assert rate_check(47.5, 0.0).what == "launch + stop >= 95 requests/s (95% of 100)"


def test_an_endpoint_that_only_answers_404_is_missing_not_failing():
    endpoints = [s for s in all_endpoints() if s.name != OPS] + [stats(OPS, p99=2000.0, statuses={404: 100})]
    ops = next(check for check in verdict(endpoints, 60.0) if check.what.startswith(OPS))
    assert ops.passed and "missing" in ops.detail


def test_an_endpoint_that_was_never_requested_fails():
    endpoints = [s for s in all_endpoints() if s.name != TEACH]
    teach = next(check for check in verdict(endpoints, 60.0) if check.what.startswith(TEACH))
    assert not teach.passed


def test_failures_fail_a_target_even_when_fast():
    endpoints = [s for s in all_endpoints() if s.name != STOP] + [stats(STOP, rps=30.0, failures=1)]
    stop = next(check for check in verdict(endpoints, 60.0) if check.what.startswith(STOP))
    assert not stop.passed and "1 failed" in stop.detail


def test_the_results_the_locustfile_writes_are_summarised_with_logins_apart(tmp_path):
    path = tmp_path / "results.json"
    rows = [["POST", LOGIN_POST, 1.0, 400.0, True, 302], ["WS", WS_CONNECT, 1.5, 20.0, True, 0]]
    for i in range(100):
        start = 10.0 + i * 0.1
        rows += [["GET", name, start, 50.0, True, 200] for name in (DASHBOARD, COURSE_PAGE, TEACH)]
        rows += [
            ["GET", OPS, start, 5.0, True, 404],
            ["POST", LAUNCH, start, 80.0, True, 201],
            ["POST", STOP, start, 60.0, True, 200],
        ]
        rows += [["WS", WS_STOP, start, 30.0, True, 0]]
    data = {
        "window": [10.0, 20.0],
        "samples": rows,
        "users": {"Student": 1, "Instructor": 1, "Operator": 1},
        "logged_in": 3,
        "login_failed": 0,
        "login_seconds": 9.5,
        "ready": 3,
        "ws_messages": 200,
        "ws_missed": {},
        "stopped_before_running": 2,
        "errors": {},
    }
    path.write_text(json.dumps(data))
    summary = summarise(results_read(path), rate=50.0)
    assert [row["name"] for row in summary["logins"]] == [LOGIN_POST, WS_CONNECT]
    assert LOGIN_POST not in {row["name"] for row in summary["endpoints"]}
    assert summary["launch_stop_rps"] == pytest.approx(20.0)
    assert summary["total_rps"] == pytest.approx(60.0)
    assert [row["name"] for row in summary["sockets"]] == [WS_STOP]
    assert summary["stopped_before_running"] == 2
    assert not summary["passed"]  # 20 launches + stops a second, short of 50
    assert summary["cpu_per_request"] == [] and summary["saturation_seconds"] is None  # no CPU figure, no phase


def test_each_endpoint_costs_its_threads_cpu_and_an_even_share_of_the_rest_beside_the_floor(tmp_path):
    path = tmp_path / "results.json"
    rows = [["GET", FLOOR, 10.0 + i, 5.0, True, 200, 1000] for i in range(4)]  # 1 ms each in its thread
    rows += [["POST", LAUNCH, 10.0 + i, 50.0, True, 201, 9000] for i in range(4)]  # 9 ms
    rows += [["POST", LAUNCH, 11.0, 30_000.0, False, 0, None]]  # no answer: no header, counts for the rest only
    rows += [["POST", LAUNCH, 25.0, 50.0, True, 201, 99_000]]  # after the window: not counted
    rows += [["WS", WS_STOP, 12.0, 30.0, True, 0, None]]  # socket delays are not requests
    rows += [["POST", LAUNCH, 30.0 + i / 10, 40.0, True, 201, 9000] for i in range(10)]
    rows += [["POST", STOP, 30.0 + i / 10, 40.0, True, 200, 4000] for i in range(10)]
    data = {
        "window": [10.0, 20.0],
        "saturation_window": [30.0, 32.0],
        "samples": rows,
        "users": {"Student": 1, "Instructor": 1, "Operator": 0},
        "logged_in": 2,
        "login_failed": 0,
        "login_seconds": 1.0,
        "ready": 2,
        "ws_messages": 0,
        "ws_missed": {},
    }
    path.write_text(json.dumps(data))
    # The web processes used 49 ms over the window: 4 x 1 + 4 x 9 = 40 in the request threads, 9 over 9 requests.
    summary = summarise(results_read(path), rate=100.0, web_cpu_ms=49.0)
    by_name = {row["name"]: row for row in summary["cpu_per_request"]}
    assert [row["name"] for row in summary["cpu_per_request"]][0] == FLOOR  # the floor first
    assert by_name[FLOOR]["thread_ms"] == pytest.approx(1.0) and by_name[FLOOR]["total_ms"] == pytest.approx(2.0)
    assert by_name[LAUNCH]["count"] == 5 and by_name[LAUNCH]["thread_ms"] == pytest.approx(9.0)
    assert by_name[LAUNCH]["total_ms"] == pytest.approx(10.0)
    assert summary["cpu_shared_per_request_ms"] == pytest.approx(1.0)
    assert summary["saturation_seconds"] == pytest.approx(2.0)
    assert summary["saturation_launch_stop_rps"] == pytest.approx(10.0)  # 20 in 2 s
    lines = cpu_table(summary)
    assert lines[1].split()[-1] == "1.0" and lines[2].split()[-1] == "5.0"  # x floor


def test_proc_stat_fields_are_counted_from_the_last_parenthesis():
    line = "4242 (celery (worker) x) S 4200 4242 4242 0 -1 4194560 100 0 0 0 150 25 3 1 20 0 1 0 99 0 0"
    assert proc_stat_fields(line) == (4200, 175)


def test_machine_busy_ticks_leave_out_idle_and_iowait():
    assert machine_busy_ticks("cpu  10 1 5 80 4 2 3 0 0 0\ncpu0 ...") == (21, 105)


def test_the_ticks_stolen_by_the_hypervisor_are_the_eighth_value():
    assert machine_steal_ticks("cpu  10 1 5 80 4 2 3 7 0 0\ncpu0 ...") == 7
    assert machine_busy_ticks("cpu  10 1 5 80 4 2 3 7 0 0\ncpu0 ...") == (28, 112)  # busy, as the machine lost them


def test_cpu_shares_are_per_cent_of_one_core_and_new_processes_count_from_zero():
    from bench.harness import CLOCK_TICKS

    before = {"Daphne": {10: 0}, "workers": {20: CLOCK_TICKS}}
    after = {"Daphne": {10: 5 * CLOCK_TICKS}, "workers": {20: 2 * CLOCK_TICKS, 21: CLOCK_TICKS}}
    assert cpu_shares(before, after, 10.0) == {"Daphne": 50.0, "workers": 20.0}


def test_think_times_read_as_min_and_max():
    assert think_range("1,3") == (1.0, 3.0)
    assert think_range("2") == (2.0, 2.0)
    for bad in ("3,1", "-1,2", "1,2,3"):
        with pytest.raises(ValueError):
            think_range(bad)


def test_the_students_pace_their_loops_to_send_the_rate_together():
    assert student_pace(300, 60.0) == 10.0  # each loop is one launch and one stop: 300 loops per 10 s
    assert student_pace(26, 52.0) == 1.0
    assert student_pace(300, 0.0) is None  # no pacing: as fast as they go
    assert parse_args([]).rate == 100.0
    assert parse_args(["--rate", "0"]).rate == 0.0


@pytest.mark.parametrize("bad", ["-1", "nan", "inf"])
def test_a_rate_that_is_not_a_number_of_requests_per_second_is_refused(bad, capsys):
    with pytest.raises(SystemExit):
        parse_args(["--rate", bad])
    assert "--rate must be a number of requests/s >= 0" in capsys.readouterr().err


def test_quick_is_thirty_users_for_twenty_seconds_unless_told_otherwise():
    args = parse_args(["--quick"])
    assert args.students + args.instructors + args.operators == 30
    assert args.duration == 20.0
    assert args.saturation == 10.0
    assert parse_args(["--quick", "--duration", "5"]).duration == 5.0
    full = parse_args([])
    assert (full.students, full.instructors, full.operators, full.duration) == (300, 20, 2, 60.0)


def test_the_world_gives_every_course_a_quota_for_all_its_students_and_every_user_an_account(db):
    world = build_world(students=7, instructors=4, operators=1, courses=2, servers=1)
    assert len(set(world["students"])) == 7 and len(world["instructors"]) == 4 and len(world["operators"]) == 1
    for course in Course.objects.filter(institution__slug="load"):
        students = course.enrollments.filter(role=Enrollment.Role.STUDENT).count()
        assert course.quota.instance_count == students
        assert course.quota.core_percent == 5 * students
        assert course.enrollments.filter(role=Enrollment.Role.INSTRUCTOR).count() == 2
    for username, course_id in world["instructors"]:
        assert Enrollment.objects.filter(user__username=username, course_id=course_id, role=Enrollment.Role.INSTRUCTOR).exists()
    assert InstitutionRole.objects.filter(user__username=world["operators"][0], role=InstitutionRole.Role.OPERATOR).exists()
    assert get_user_model().objects.get(username=world["students"][0]).check_password(world["password"])


@pytest.mark.slow
def test_a_quick_run_measures_every_endpoint(tmp_path):
    """The whole harness, briefly: services up, users logged in, every endpoint measured, a report."""
    out = tmp_path / "figures.json"
    command = [sys.executable, "-m", "bench.load", "--quick", "--duration", "8", "--json", str(out)]
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=240)
    assert done.returncode in (0, 1), done.stdout + done.stderr  # 0 PASS, 1 FAIL on a busy machine; 2 is broken
    figures = json.loads(out.read_text())
    assert figures["ready"] == 30
    assert {row["name"] for row in figures["endpoints"]} >= {DASHBOARD, LAUNCH, STOP, COURSE_PAGE, TEACH, OPS}
    assert {row["name"] for row in figures["logins"]} >= {LOGIN_POST, WS_CONNECT}
    assert all(row["failures"] == 0 for row in figures["logins"] if row["name"] == LOGIN_POST)
    assert not math.isnan(figures["launch_stop_rps"])
    assert "PASS" in done.stdout or "FAIL" in done.stdout


def test_the_cpu_meter_reports_what_the_hypervisor_took_apart_from_everything_else():
    import os

    from bench.harness import STOLEN, CpuMeter

    meter = CpuMeter({"this test": [os.getpid()]}, {})
    meter.start()
    deadline = time.process_time() + 0.3
    while time.process_time() < deadline:
        pass
    meter.stop()

    shares = meter.shares
    assert shares["this test"] > 0
    assert shares[STOLEN] >= 0
    rest = shares["everything else (other work on the machine, this script)"]
    assert rest == pytest.approx(shares["the whole machine"] - shares[STOLEN] - shares["this test"])


def test_the_bench_middleware_sends_the_cpu_its_request_thread_spent():
    from django.http import HttpResponse
    from django.test import RequestFactory

    from bench.load.cpu import RequestThreadCpu
    from bench.load.plan import CPU_HEADER

    def busy_view(request):
        deadline = time.thread_time() + 0.05
        while time.thread_time() < deadline:
            pass
        return HttpResponse("ok")

    response = RequestThreadCpu(busy_view)(RequestFactory().get("/"))
    assert 50_000 <= int(response[CPU_HEADER]) < 1_000_000  # microseconds: the 50 ms the view burned, and not wall time


def test_the_load_settings_serve_the_floor_through_the_portals_middleware_with_the_cpu_header_first():
    from django.conf import settings

    from bench.load import settings as load_settings

    assert load_settings.MIDDLEWARE == ["bench.load.cpu.RequestThreadCpu", *settings.MIDDLEWARE]
    assert load_settings.ROOT_URLCONF == "bench.request_cost"


def test_the_help_renders(capsys):
    with pytest.raises(SystemExit) as exited:
        parse_args(["--help"])
    assert exited.value.code == 0
    assert "--saturation" in capsys.readouterr().out
