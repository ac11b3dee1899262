"""A worker whose Redis broker restarts is back on it within half a second, and what waited while
it was away (launches and stops made meanwhile) is done within 2 s of Redis being back."""

import shutil
import signal
import socket
import subprocess
import time

import pytest
from celery import Celery

from labs import dispatch
from labs.domain.reasons import Reason
from labs.models import LabSession
from labs.services.sessions import session_launch, session_stop
from portal.celery import app as portal_celery
from tests.conftest import free_port, wait_for
from tests.factories import course_with_students, node_with_cards

pytestmark = [pytest.mark.slow, pytest.mark.skipif(shutil.which("redis-server") is None, reason="needs redis-server")]


def start_redis(port: int, tmp_path) -> subprocess.Popen:
    """redis-server on ``port`` that keeps what it holds across a restart (its append-only file in
    ``tmp_path``, written on every change), as a Redis with persistence does."""
    process = subprocess.Popen(
        ["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--dir", str(tmp_path)]
        + ["--appendonly", "yes", "--appendfsync", "always"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    wait_for(lambda: socket.socket().connect_ex(("127.0.0.1", port)) == 0, timeout=10, message="redis-server listening")
    return process


def stop_redis(process: subprocess.Popen) -> None:
    process.send_signal(signal.SIGKILL)
    process.wait()


def states(sessions) -> set[str]:
    return set(LabSession.objects.filter(pk__in=[s.pk for s in sessions]).values_list("state", flat=True))


def retries(worker) -> int:
    return worker.output().count("Trying again")


def away_until_a_retry_just_failed(worker, seconds: float = 4.0) -> None:
    """Leave the broker down ``seconds`` (the worker's retry interval has grown to its longest by
    then), then until the worker has just failed a retry: its next is a whole interval away."""
    wait_for(lambda: retries(worker), timeout=15, message=lambda: worker.output()[-2000:])
    time.sleep(seconds)
    seen = retries(worker)
    wait_for(lambda: retries(worker) > seen, timeout=35, message=lambda: worker.output()[-2000:])


def run_the_controller(broker_url: str) -> None:
    """Send the controller a run on ``broker_url`` (this process's Celery app keeps the broker
    it was first used with, which an earlier test may have set). Not made the current app: the
    portal's dispatch sends through the current app, and later tests in this process use it."""
    with Celery(broker=broker_url, set_as_current=False) as client:
        client.send_task(dispatch.CONTROLLER_TASK)


@pytest.fixture
def broker(tmp_path, settings):
    """A Redis of this test's own as the broker of the workers it starts and of this process's wakes."""
    port = free_port()
    url = f"redis://127.0.0.1:{port}/0"
    suite_url = settings.CELERY_BROKER_URL
    settings.CELERY_BROKER_URL = url
    dispatch._redis.cache_clear()
    # The portal's Celery app read its broker once and pools connections to it: point it at this
    # Redis for the test, and back at the suite's after, so later tests' sends reach their workers.
    _point_the_portals_app_at(url)
    server = {"process": start_redis(port, tmp_path), "port": port, "url": url}
    yield server
    stop_redis(server["process"])
    # Back on the suite's broker before the cached client goes, so nothing run before the settings
    # fixture's own undo caches a client of this test's stopped Redis.
    settings.CELERY_BROKER_URL = suite_url
    _point_the_portals_app_at(suite_url)
    dispatch._redis.cache_clear()


def _point_the_portals_app_at(url: str) -> None:
    """Make this process's sends go to ``url``. ``Celery.close()`` drops the app's connection pool
    but not the producer pool it made from kombu's global pools (``amqp._producer_pool``), which
    keeps the broker it was first used with: a test after this one would send to its stopped
    Redis, and this one's sends might go to the suite's."""
    portal_celery.conf.broker_url = url
    portal_celery.close()
    portal_celery.amqp._producer_pool = None


def test_a_worker_is_back_on_its_broker_within_half_a_second_of_it_answering_again(broker, start_worker, tmp_path):
    worker = start_worker(CELERY_BROKER_URL=broker["url"], REDIS_URL=broker["url"])
    wait_for(lambda: " ready." in worker.output(), timeout=60, message="worker ready")
    stop_redis(broker["process"])
    away_until_a_retry_just_failed(worker)

    broker["process"] = start_redis(broker["port"], tmp_path)
    back = time.monotonic()
    wait_for(lambda: worker.output().count("Connected to redis") >= 2, timeout=10, message=lambda: worker.output()[-2000:])
    # Celery's own schedule would wait up to 30 s; a 2 s longest interval, up to 2 s.
    assert time.monotonic() - back < 1.0


def test_launches_and_stops_made_while_the_broker_was_down_are_done_within_2_s_of_it_coming_back(
    transactional_db, broker, start_worker, tmp_path
):
    """No beat: the worker's own run on reconnecting is what picks up the work that waited."""
    node_with_cards()
    course, templates, students, _ = course_with_students(12)
    worker = start_worker(CELERY_BROKER_URL=broker["url"], REDIS_URL=broker["url"], LAB_SIMULATOR_DELAY_SECONDS="0.2")
    wait_for(lambda: " ready." in worker.output(), timeout=60, message="worker ready")
    running = [session_launch(student=s, course=course, template=templates[0]) for s in students[:4]]
    run_the_controller(broker["url"])
    wait_for(lambda: states(running) == {"running"}, timeout=60, message=lambda: worker.output()[-3000:])

    stop_redis(broker["process"])
    wait_for(lambda: retries(worker), timeout=15, message=lambda: worker.output()[-2000:])
    time.sleep(1.0)  # whatever task was under way when the broker went has ended
    # Made while the broker is down: committed, their wakes lost.
    waiting = [session_launch(student=s, course=course, template=templates[0]) for s in students[4:]]
    for session in running:
        session_stop(session_id=session.pk, reason=Reason.of("session.stopped_by", who="tester"))
    away_until_a_retry_just_failed(worker, seconds=2.0)

    broker["process"] = start_redis(broker["port"], tmp_path)
    back = time.monotonic()
    wait_for(
        lambda: states(waiting) == {"running"} and states(running) == {"stopped"},
        timeout=30,
        interval=0.05,
        message=lambda: f"{states(waiting)} / {states(running)}:\n{worker.output()[-3000:]}",
    )
    assert time.monotonic() - back < 2.0
