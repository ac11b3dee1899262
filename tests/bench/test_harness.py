"""The end-to-end benches' helpers (bench/harness.py): percentiles, Redis claims, retries, process clean-up."""

from __future__ import annotations

import math
import subprocess
import sys
import time
import uuid

import pytest
import redis

from bench.harness import (
    Fired,
    Resources,
    Response,
    percentile,
    redis_claim_database,
    redis_release_database,
    retry_until_accepted,
)

REDIS_SERVER = "redis://127.0.0.1:6379"


def test_percentile_interpolates_between_closest_ranks():
    values = [4.0, 1.0, 3.0, 2.0, 5.0]
    assert percentile(values, 0) == 1.0
    assert percentile(values, 50) == 3.0
    assert percentile(values, 100) == 5.0
    assert percentile(values, 25) == 2.0
    assert percentile([1.0, 2.0], 50) == 1.5
    assert percentile(list(range(1, 101)), 99) == pytest.approx(99.01)
    assert percentile([7.0], 99) == 7.0
    assert math.isnan(percentile([], 50))
    with pytest.raises(ValueError):
        percentile(values, 101)


def test_redis_claims_are_exclusive_and_only_the_owner_releases():
    key = f"npu-lab-bench-test:{uuid.uuid4().hex}"  # a key of its own: real runs' claims are not touched
    first = redis_claim_database(REDIS_SERVER, "owner-a", key=key, ttl=60)
    second = redis_claim_database(REDIS_SERVER, "owner-b", key=key, ttl=60)
    try:
        assert first != second
        assert redis.Redis.from_url(first).get(key) == b"owner-a"
        assert not redis_release_database(first, "owner-b", key=key)
        assert redis.Redis.from_url(first).get(key) == b"owner-a"
    finally:
        for url, owner in ((first, "owner-a"), (second, "owner-b")):
            client = redis.Redis.from_url(url)
            if client.get(key) == owner.encode():
                client.delete(key)  # not flushdb: the database may hold a test run's data under its own claim


def test_retry_until_accepted_presses_again_until_answered():
    answers = {"a": [500, 201], "b": [201]}
    calls: list[str] = []

    def make_send(key):
        def send():
            calls.append(key)
            return Response(answers[key].pop(0), b"", {})

        return send

    now = time.time()
    fired = [Fired("a", now, now, 500), Fired("b", now, now, 201)]
    retried: list[Fired] = []
    retry_until_accepted(
        fired, make_send, should_retry=lambda f: f.status >= 500, delay=lambda f: 0.01, deadline=now + 10, retried=retried
    )
    assert calls == ["a", "a"]
    assert [f.status for f in retried] == [500, 201]


def test_resources_stop_their_processes_and_run_every_cleanup():
    res = Resources()
    res.make_temp_dir("npu-lab-bench-test-")
    service = res.start("sleeper", [sys.executable, "-c", "import time; time.sleep(60)"], env={})
    cleaned = []
    res.on_close("first", lambda: cleaned.append("first"))
    res.on_close("failing", lambda: 1 / 0)
    res.on_close("last", lambda: cleaned.append("last"))
    temp = res.temp_dir
    res.close()
    assert not service.alive()
    assert cleaned == ["last", "first"]
    assert not temp.exists()


def test_the_reference_loop_costs_cpu_in_proportion_to_its_length():
    from bench.harness import reference_loop_ms

    short, long = reference_loop_ms(200_000, repeat=2), reference_loop_ms(800_000, repeat=2)
    assert 0 < short < long  # CPU time of the loop itself, not wall-clock or a constant


def _burn_and_exit(marker: str, seconds: float) -> subprocess.Popen[bytes]:
    """A process whose command line carries ``marker`` that spends ``seconds`` of CPU, then exits."""
    program = f"import time\nend = time.process_time() + {seconds}\nwhile time.process_time() < end: pass  # {marker}"
    return subprocess.Popen([sys.executable, "-c", program])


def test_the_cpu_meter_counts_a_matched_process_that_ended_during_the_measurement():
    """As a PostgreSQL backend of one Celery task does: it starts, works and ends between start and stop."""
    from bench.harness import CpuMeter

    marker = f"cpu-meter-{uuid.uuid4().hex}"
    sampled = CpuMeter({}, {"burner": lambda command: marker in command}, sample_period=0.02)
    unsampled = CpuMeter({}, {"burner": lambda command: marker in command})
    sampled.start()
    unsampled.start()
    _burn_and_exit(marker, 0.4).wait(timeout=30)
    sampled.stop()
    unsampled.stop()

    assert sampled.ms["burner"] >= 300  # 0.4 s of CPU, less at most one sampling period and a clock tick
    assert unsampled.ms["burner"] == 0  # gone by the reading: not seen, as before


def test_the_cpu_meter_matches_a_young_process_by_the_command_it_takes_after_it_started():
    """A new PostgreSQL backend names its database only once it has logged in (and a child may exec
    later): a process's command line is read each sample until it is a second old, then kept."""
    import os

    from bench.harness import CpuMeter

    marker = f"cpu-meter-{uuid.uuid4().hex}"
    program = f"import time\nend = time.process_time() + 0.4\nwhile time.process_time() < end: pass  # {marker}"
    sampled = CpuMeter({}, {"burner": lambda command: marker in command}, sample_period=0.02)
    sampled.start()
    # A shell first (its command line holds "$PROGRAM", not the marker), the burner 0.3 s later.
    late = subprocess.Popen(
        ["sh", "-c", 'sleep 0.3; exec "$PYTHON" -c "$PROGRAM"'], env={**os.environ, "PYTHON": sys.executable, "PROGRAM": program}
    )
    late.wait(timeout=30)
    sampled.stop()

    assert sampled.ms["burner"] >= 300
    assert 1 in sampled.commands  # init, started long before: its command line read once and kept


def test_the_portal_cpu_per_session_is_each_group_and_their_total_over_the_launches():
    from bench.classstart.run import BEAT, DAPHNE, POSTGRESQL, WORKERS, portal_cpu_ms

    ms = {DAPHNE: 800.0, WORKERS: 300.0, BEAT: 20.0, POSTGRESQL: 160.0, "Redis server (shared with other work)": 99.0}
    assert portal_cpu_ms(ms, 128) == {
        "Daphne": 6.25,
        "Celery (workers and beat)": 2.5,
        POSTGRESQL: 1.25,
        "total": 10.0,
    }


def test_the_class_start_runs_its_web_processes_with_what_deploy_gives_the_web_pods():
    from bench.classstart.portal import deploy_web_env

    # By value only: no secret's file, nothing expanded from the pod (deploy/base/web.yaml).
    assert deploy_web_env() == {"DATABASE_POOL_MIN_SIZE": "10"}


@pytest.mark.django_db
def test_the_class_start_waits_until_no_connection_has_been_opened_for_a_while():
    import psycopg
    from django.db import connection

    from bench.classstart.run import connections_settled

    if connection.vendor != "postgresql":
        pytest.skip("counts PostgreSQL's connections")
    s = connection.settings_dict
    server = f"postgres://{s['USER']}:{s['PASSWORD']}@{s['HOST']}:{s['PORT'] or 5432}"
    connection.ensure_connection()
    with psycopg.connect(f"{server}/{s['NAME']}"):  # opened just now
        began = time.monotonic()
        count = connections_settled(server, s["NAME"], quiet=0.5, timeout=10)
        waited = time.monotonic() - began
    assert count >= 2
    assert 0.4 <= waited < 5
