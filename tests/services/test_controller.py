"""The lifecycle controller on PostgreSQL with the simulator driver: one round at a time, as beat runs it."""

import threading
import time
from datetime import timedelta

import pytest
from django.test import Client, override_settings
from django.utils import timezone

from labs.domain.reasons import Reason
from labs.drivers import get_driver
from labs.drivers.base import CardBinding, LaunchSpec, PollStatus
from labs.models import Allocation, LabSession, Node, RepairEvent
from labs.services.controller import ControllerReport, controller_run, launch_spec, reconcile_once, with_jupyter_token
from labs.services.reboots import nodes_observe
from labs.services.sessions import session_launch, session_stop, session_transition
from tests.conftest import wait_for

BYE = Reason.of("session.stopped_by", who="student000")


@pytest.fixture
def driver():
    driver = get_driver()
    yield driver
    for session_id in driver.list():
        driver.delete(session_id)


def launch(world, student=0, template="small"):
    return session_launch(student=world["students"][student], course=world["course"], template=world[template])


def up(driver, session) -> bool:
    """Whether the simulator's instance of ``session`` runs (its start delay is over)."""
    return driver.poll(str(session.pk)).status == PollStatus.RUNNING


def settle(*sessions, until=("running",), timeout=10):
    deadline = time.monotonic() + timeout
    while True:
        reconcile_once()
        for session in sessions:
            session.refresh_from_db()
        if all(s.state in until for s in sessions):
            return
        assert time.monotonic() < deadline, [(s.state, s.reason) for s in sessions]
        time.sleep(0.05)


def test_one_round_admits_creates_and_a_later_round_sees_it_running(world, driver):
    session = launch(world)

    reconcile_once()

    session.refresh_from_db()
    assert session.state == "starting" and session.driver_ref
    assert Allocation.objects.get(session=session).entity_id == session.driver_ref
    settle(session)
    assert session.access_url.startswith("https://lab.simulator.invalid/")
    assert session.reason == ""


def test_a_stop_deletes_the_instance_and_releases_the_allocation_once(world, driver):
    session = launch(world)
    settle(session)

    assert session_stop(session_id=session.pk, reason=BYE)
    reconcile_once()  # asks the driver to delete
    session.refresh_from_db()
    assert session.state == "stopping"
    reconcile_once()  # sees it gone

    session.refresh_from_db()
    assert (session.state, session.reason) == ("stopped", "stopped by student000")
    released = Allocation.objects.get(session=session).released_at
    assert released is not None
    assert str(session.pk) not in driver.list()
    reconcile_once()
    assert Allocation.objects.get(session=session).released_at == released


def test_running_a_round_twice_changes_nothing(world, driver):
    session = launch(world)
    settle(session)
    version = session.version

    reconcile_once()
    reconcile_once()

    session.refresh_from_db()
    assert (session.state, session.version) == ("running", version)


def test_a_driver_refusal_fails_the_session_at_once_without_retrying(world, driver):
    world["small"].image = "reject:this-image"
    world["small"].save(update_fields=["image"])
    session = launch(world)

    settle(session, until=("failed",))

    assert session.reason.startswith("could not start: the cluster refused")
    assert session.create_attempts == 0
    assert Allocation.objects.get(session=session).released_at is not None


@override_settings(LAB_CREATE_ATTEMPTS=3)
def test_a_transient_create_error_is_retried_with_backoff_before_the_session_fails(world, driver, monkeypatch):
    session = launch(world)
    monkeypatch.setattr(driver, "create_failure_rate", 1.0)

    reconcile_once()
    session.refresh_from_db()
    assert (session.state, session.create_attempts) == ("starting", 1)
    assert session.reason_code == "session.create_retry" and session.retry_at > timezone.now()
    LabSession.objects.filter(pk=session.pk).update(retry_at=timezone.now() + timedelta(seconds=60))
    reconcile_once()  # too early for the next try
    session.refresh_from_db()
    assert session.create_attempts == 1

    monkeypatch.setattr(driver, "create_failure_rate", 0.0)
    LabSession.objects.filter(pk=session.pk).update(retry_at=timezone.now())
    settle(session)
    assert session.create_attempts == 1


@override_settings(LAB_CREATE_ATTEMPTS=3)
def test_a_create_asked_again_tells_the_driver_it_may_have_been_made(world, driver, monkeypatch):
    # On Kubernetes a pod created twice is charged twice to the course's ResourceQuota: the
    # driver looks first when told the create is a repeat (after a failure or an ended lease).
    asked = []
    create = driver.create
    monkeypatch.setattr(driver, "create", lambda spec: asked.append(spec.repeat) or create(spec))
    monkeypatch.setattr(driver, "create_failure_rate", 1.0)
    session = launch(world)
    reconcile_once()

    monkeypatch.setattr(driver, "create_failure_rate", 0.0)
    LabSession.objects.filter(pk=session.pk).update(retry_at=timezone.now())
    settle(session)

    assert asked == [False, True]


def _leased_by(world, driver, monkeypatch, holder: str):
    """A starting session with no instance whose create lease (a minute more) is ``holder``'s; the creates asked for since."""
    asked: list[bool] = []
    create = driver.create
    monkeypatch.setattr(driver, "create", lambda spec: asked.append(spec.repeat) or create(spec))
    monkeypatch.setattr(driver, "create_failure_rate", 1.0)
    session = launch(world)
    reconcile_once()
    session.refresh_from_db()
    assert (session.state, session.lease_holder) == ("starting", "")  # a back-off is nobody's lease
    monkeypatch.setattr(driver, "create_failure_rate", 0.0)
    LabSession.objects.filter(pk=session.pk).update(retry_at=timezone.now() + timedelta(seconds=60), lease_holder=holder)
    return session, asked


def test_the_create_lease_of_a_process_that_died_ends_at_once(world, driver, monkeypatch):
    session, asked = _leased_by(world, driver, monkeypatch, "worker-killed:4242:0badf00d")  # never said it lives

    settle(session)

    assert asked == [False, True]  # asked again, a minute early, as a repeat: the driver looks first
    assert RepairEvent.objects.filter(kind=RepairEvent.Kind.SESSION_BOUND).count() == 0


def test_the_create_lease_of_a_process_that_lives_stands(world, driver, monkeypatch):
    from labs import dispatch

    session, asked = _leased_by(world, driver, monkeypatch, "worker-alive:4243:0badf00d")
    assert dispatch.holder_beat("worker-alive:4243:0badf00d")

    reconcile_once()

    session.refresh_from_db()
    assert asked == [False] and (session.state, session.driver_ref) == ("starting", "")


def test_a_create_lease_names_the_process_that_took_it(world, driver, monkeypatch):
    from labs.services.controller.creates import driver_calls

    monkeypatch.setattr(driver, "create_delay_seconds", 1.0)
    session = launch(world)
    with override_settings(LAB_CONTROLLER_WAIT_SECONDS=0.1):
        reconcile_once()

    session.refresh_from_db()
    assert session.lease_holder == driver_calls.holder and str(__import__("os").getpid()) in session.lease_holder
    settle(session)


@override_settings(LAB_CREATE_ATTEMPTS=2)
def test_a_create_that_keeps_failing_fails_the_session_with_the_error(world, driver, monkeypatch):
    session = launch(world)
    monkeypatch.setattr(driver, "create_failure_rate", 1.0)
    reconcile_once()
    LabSession.objects.filter(pk=session.pk).update(retry_at=timezone.now())

    settle(session, until=("failed",))

    assert session.reason == "could not start: the cluster API did not answer (simulated)"
    assert Allocation.objects.get(session=session).released_at is not None


def test_an_instance_that_fails_while_starting_fails_the_session_with_its_message(world, driver):
    session = launch(world)
    reconcile_once()
    driver.inject_failure(str(session.pk), "image pull failed: no such image")

    settle(session, until=("failed",))

    assert session.reason == "image pull failed: no such image"


@override_settings(LAB_SPAWN_TIMEOUT_SECONDS=5)
def test_a_session_that_overruns_the_spawn_timeout_fails_with_the_reason(world, driver, settings):
    driver.start_delay_seconds = 60
    try:
        session = launch(world)
        reconcile_once()
        LabSession.objects.filter(pk=session.pk).update(started_at=timezone.now() - timedelta(seconds=6))
        settle(session, until=("failed",))
    finally:
        driver.start_delay_seconds = float(settings.LAB_DRIVER["OPTIONS"]["start_delay_seconds"])
    assert session.reason == "did not start within 5 s"


@override_settings(LAB_SPAWN_TIMEOUT_SECONDS=5)
def test_a_lab_that_is_up_is_never_failed_for_being_late(world, driver):
    session = launch(world)
    reconcile_once()
    wait_for(lambda: up(driver, session), timeout=10, message="the simulator's instance up")
    LabSession.objects.filter(pk=session.pk).update(started_at=timezone.now() - timedelta(seconds=600))

    reconcile_once()

    session.refresh_from_db()
    assert session.state == "running"


def _reasons_until(session, until, timeout=10):
    """Run rounds until ``session`` is in a state of ``until``; the reasons it showed on the way, in order."""
    shown = []
    deadline = time.monotonic() + timeout
    while session.state not in until:
        assert time.monotonic() < deadline, (session.state, session.reason, shown)
        reconcile_once()
        session.refresh_from_db()
        if session.reason and session.reason not in shown:
            shown.append(session.reason)
        time.sleep(0.05)
    return shown


def test_a_lab_that_restarts_while_starting_says_so_and_runs(world, driver, monkeypatch):
    monkeypatch.setattr(driver, "start_delay_seconds", 1.0)  # a second down: the rounds see it
    monkeypatch.setattr(driver, "restart_fraction", 1.0)
    session = launch(world)

    shown = _reasons_until(session, until=("running", "failed"))

    assert session.state == "running"
    assert "restarting while the NPU initialises (1 of 3)" in shown
    assert (session.restarts, session.reason) == (1, "")
    reconcile_once()  # a restart while it started is not one of the running lab's
    session.refresh_from_db()
    assert (session.state, session.reason) == ("running", "")


@override_settings(LAB_START_RESTARTS=0)
def test_a_lab_that_restarts_more_than_allowed_while_starting_fails_saying_how_it_ended(world, driver, monkeypatch):
    monkeypatch.setattr(driver, "restart_fraction", 1.0)
    session = launch(world)

    settle(session, until=("failed",))

    assert session.reason == (
        "the lab kept restarting while starting (restart 1, 0 allowed); it last ended with Error, exit code 1"
    )
    assert Allocation.objects.get(session=session).released_at is not None


def test_a_running_lab_that_restarts_after_an_oom_kill_keeps_running_and_says_why(world, driver):
    session = launch(world)
    settle(session)

    driver.inject_restart(str(session.pk), reason="OOMKilled", exit_code=137)
    reconcile_once()

    session.refresh_from_db()
    said = "the lab restarted after OOMKilled, exit code 137 (restart 1)"
    assert (session.state, session.restarts, session.reason) == ("running", 1, said)
    student = Client()
    student.force_login(world["students"][0])
    assert said in student.get("/").content.decode()  # on the student's card
    wait_for(lambda: up(driver, session), timeout=10, message="the simulator's lab up again")
    version = session.version
    reconcile_once()
    session.refresh_from_db()
    assert (session.state, session.reason, session.version) == ("running", said, version)


def test_stopping_before_the_instance_exists_leaves_nothing_behind(world, driver):
    session = launch(world)
    from labs.services.allocation import allocation_pass

    allocation_pass()
    session_stop(session_id=session.pk, reason=BYE)  # admitted: ends at once

    reconcile_once()

    session.refresh_from_db()
    assert session.state == "stopped"
    assert str(session.pk) not in driver.list()


def test_a_worker_killed_between_creating_and_recording_the_instance_is_bound_not_recreated(world, driver):
    session = launch(world)
    from labs.services.allocation import allocation_pass

    allocation_pass()
    session_transition(session.pk, to="starting")
    allocation = Allocation.objects.select_related("card__node").get(session=session)
    spec = LaunchSpec(
        session_id=str(session.pk),
        kind="jupyter",
        image="img",
        secret=session.secret,
        card=CardBinding(
            world["node"].name, allocation.card.index, "", "Ascend910B", 5, 4096, "development", allocation.card.memory_mib
        ),
    )
    ref = driver.create(spec)  # the worker created it, then died

    reconcile_once()

    session.refresh_from_db()
    assert session.driver_ref == ref and session.state in ("starting", "running")
    assert list(RepairEvent.objects.values_list("kind", "entity_id")) == [("session_bound", ref)]
    assert driver.list() == {str(session.pk)}


def test_an_instance_no_open_session_owns_is_deleted(world, driver):
    session = launch(world)
    settle(session)
    # The stop marked the session stopped, but its worker died before deleting the instance.
    LabSession.objects.filter(pk=session.pk).update(state="stopped", ended_at=timezone.now())
    Allocation.objects.filter(session=session).update(released_at=timezone.now())

    reconcile_once()

    assert str(session.pk) not in driver.list()
    assert list(RepairEvent.objects.values_list("kind", flat=True)) == ["orphan_deleted"]


def test_a_session_whose_instance_vanished_fails_and_releases_its_allocation(world, driver):
    session, other = launch(world, 0), launch(world, 1)
    settle(session, other)
    driver.delete(str(session.pk))  # someone deleted the pod behind the portal's back

    settle(session, until=("failed",))

    other.refresh_from_db()
    assert (session.state, session.reason) == ("failed", "the lab's instance disappeared from the cluster")
    assert Allocation.objects.get(session=session).released_at is not None
    assert other.state == "running"
    assert list(RepairEvent.objects.values_list("kind", flat=True)) == ["session_failed"]


def test_the_ledger_follows_the_card_the_platform_reports(world, driver):
    session = launch(world)
    settle(session)
    allocation = Allocation.objects.select_related("card").get(session=session)
    moved_to = (allocation.card.index + 1) % 8
    driver.inject_card(str(session.pk), moved_to)

    reconcile_once()

    allocation.refresh_from_db()
    assert allocation.card.index == moved_to
    assert RepairEvent.objects.get(kind="card_rebound").session_id == session.pk
    reconcile_once()
    assert RepairEvent.objects.filter(kind="card_rebound").count() == 1


def test_a_session_past_its_maximum_length_is_stopped(world, driver):
    session = launch(world)
    settle(session)
    LabSession.objects.filter(pk=session.pk).update(running_at=timezone.now() - timedelta(minutes=181))

    settle(session, until=("stopped",))

    assert session.reason == "reached the 180-minute limit"


def test_an_unobservable_driver_fails_nothing_and_deletes_nothing(world, driver, monkeypatch):
    from labs.drivers import DriverError

    session = launch(world)
    settle(session)

    def down():
        raise DriverError("The cluster API did not answer while listing lab pods; try again shortly.")

    monkeypatch.setattr(driver, "observe", down)
    report = ControllerReport()
    reconcile_once(report)
    monkeypatch.undo()

    session.refresh_from_db()
    assert session.state == "running"
    assert report.observe_error.startswith("The cluster API did not answer")


def test_a_controller_run_that_finds_another_running_returns_at_once(world, driver):
    import psycopg
    from django.db import connection

    from labs.services.locks import CONTROLLER_LOCK_KEY
    from tests.conftest import wait_for

    launch(world)
    db = connection.settings_dict
    # A connection of its own, outside Django's pool, that really ends when closed (a session-level
    # advisory lock lives as long as its connection).
    with psycopg.connect(
        host=db["HOST"], port=db["PORT"], user=db["USER"], password=db["PASSWORD"] or None, dbname=db["NAME"], autocommit=True
    ) as other:
        other.execute("SELECT pg_advisory_lock(%s)", [CONTROLLER_LOCK_KEY])
        report = controller_run()
    assert report.skipped and report.rounds == 0
    # Released with its connection: the server ends that backend a moment after the client closed it.
    wait_for(lambda: controller_run().rounds >= 1, timeout=5, message="the lock to go with its connection")


def test_a_jupyter_link_without_the_token_gets_the_sessions_token():
    url = with_jupyter_token("https://labs.example.edu/labs/abc/?x=1", kind="jupyter", secret="s3")
    assert url == "https://labs.example.edu/labs/abc/?x=1&token=s3"
    assert with_jupyter_token("http://127.0.0.1:9/lab?token=t", kind="jupyter", secret="s3") == "http://127.0.0.1:9/lab?token=t"
    assert (
        with_jupyter_token("https://labs.example.edu/labs/abc/", kind="vllm", secret="s3") == "https://labs.example.edu/labs/abc/"
    )


@override_settings(LAB_CONTROLLER_WAIT_SECONDS=0.2)
def test_a_slow_create_does_not_hold_the_run_and_its_answer_is_bound_later_without_a_repair(world, driver, monkeypatch):
    monkeypatch.setattr(driver, "create_delay_seconds", 1.0)
    session = launch(world)
    report = ControllerReport()

    started = time.monotonic()
    reconcile_once(report)

    assert time.monotonic() - started < 0.9
    assert report.in_flight == 1
    session.refresh_from_db()
    assert (session.state, session.driver_ref) == ("starting", "")
    reconcile_once()  # under the lease: not asked for again
    wait_for(lambda: driver.list() == {str(session.pk)}, timeout=10, message="the slow create's answer")
    settle(session)
    assert session.driver_ref and driver.list() == {str(session.pk)}
    assert not RepairEvent.objects.exists()


def test_a_run_lets_go_of_the_lock_while_it_waits_for_the_drivers_answers(world, driver, monkeypatch):
    """On a real cluster a batch of creates takes seconds: meanwhile another run must be able to take the next launches."""
    import threading

    import psycopg
    from django.db import connection

    from labs.services.locks import CONTROLLER_LOCK_KEY

    monkeypatch.setattr(driver, "create_delay_seconds", 1.0)
    asked, answered = threading.Event(), threading.Event()
    create = driver.create

    def create_and_tell(spec):
        asked.set()
        try:
            return create(spec)
        finally:
            answered.set()

    monkeypatch.setattr(driver, "create", create_and_tell)
    session = launch(world)
    db = connection.settings_dict
    taken: list[bool] = []

    def another_run_tries_the_lock() -> None:
        assert asked.wait(timeout=30)  # the run has started its create and waits for the answer
        with psycopg.connect(
            host=db["HOST"], port=db["PORT"], user=db["USER"], password=db["PASSWORD"] or None, dbname=db["NAME"],
            autocommit=True,
        ) as other:  # fmt: skip
            got = False
            while not answered.is_set():  # the run lets go of the lock soon after asking
                got = other.execute("SELECT pg_try_advisory_lock(%s)", [CONTROLLER_LOCK_KEY]).fetchone()[0]
                if got:
                    break
                time.sleep(0.02)
            taken.append(got and not answered.is_set())  # taken while the answer was still awaited
            if got:
                other.execute("SELECT pg_advisory_unlock(%s)", [CONTROLLER_LOCK_KEY])

    other = threading.Thread(target=another_run_tries_the_lock)
    other.start()
    report = controller_run(max_rounds=1)
    other.join()

    assert taken == [True]
    assert report.created == 1  # and the run still collected its answer
    session.refresh_from_db()
    assert session.driver_ref


@override_settings(LAB_CONTROLLER_WAIT_SECONDS=0.1, LAB_CREATE_LEASE_SECONDS=2)
def test_a_create_still_waiting_for_its_answer_past_its_lease_is_not_asked_for_again(world, driver, monkeypatch):
    monkeypatch.setattr(driver, "create_delay_seconds", 3.0)  # a busy cluster
    asked = []
    create = driver.create
    monkeypatch.setattr(driver, "create", lambda spec: asked.append(spec.session_id) or create(spec))
    session = launch(world)

    reconcile_once()  # asks; the answer comes in 3 s
    time.sleep(2.2)  # the lease is over, the answer not in yet
    reconcile_once()

    settle(session, timeout=15)
    assert asked == [str(session.pk)]


@override_settings(LAB_CONTROLLER_WAIT_SECONDS=0.1, LAB_CREATE_LEASE_SECONDS=2)
def test_a_create_that_answers_while_the_round_looks_is_not_asked_for_again(world, driver, monkeypatch):
    monkeypatch.setattr(driver, "create_delay_seconds", 2.5)
    asked = []
    create = driver.create
    monkeypatch.setattr(driver, "create", lambda spec: asked.append(spec.session_id) or create(spec))
    session = launch(world)
    reconcile_once()  # asks; the answer comes in 2.5 s, after the lease
    time.sleep(2.1)  # the subject: the lease (2 s, real clock) runs out before the answer
    observe = driver.observe

    def slow_observe():  # what the round sees is from before the answer
        seen = observe()
        time.sleep(1.0)
        return seen

    monkeypatch.setattr(driver, "observe", slow_observe)
    reconcile_once()
    monkeypatch.setattr(driver, "observe", observe)

    settle(session, timeout=15)
    assert asked == [str(session.pk)]


@override_settings(LAB_CONTROLLER_WAIT_SECONDS=0.1)
def test_a_delete_still_waiting_for_its_answer_is_not_asked_for_again(world, driver, monkeypatch):
    session = launch(world)
    settle(session)
    asked = []
    delete = driver.delete

    def slow_delete(session_id):  # a busy cluster
        asked.append(session_id)
        time.sleep(1.0)
        delete(session_id)

    monkeypatch.setattr(driver, "delete", slow_delete)
    assert session_stop(session_id=session.pk, reason=BYE)

    reconcile_once()  # asks; the answer comes in 1 s
    reconcile_once()  # the instance is still there, not yet being deleted

    settle(session, until=("stopped",))
    assert asked == [str(session.pk)]


def test_the_launch_spec_carries_the_memory_of_the_card_the_share_sits_on(world, driver):
    session = launch(world)
    reconcile_once()
    session.refresh_from_db()

    card = session.allocation.card
    assert launch_spec(session).card.card_memory_mib == card.memory_mib > session.allocation.memory_mib


@override_settings(LAB_CONTROLLER_THREADS=2)
def test_a_round_sends_no_more_creates_than_its_pool_clears_and_the_rest_wait_admitted(world, driver, monkeypatch):
    """A create queued behind a class's worth of others would outlive its lease and be sent twice."""
    from labs.services.controller import creates

    creates.driver_calls.pace_forget()  # the cluster's pace unknown: so many per thread
    monkeypatch.setattr(creates, "CREATES_OUT_PER_THREAD", 1)  # room for 2 creates out at once
    sessions = [launch(world, student=i) for i in range(4)]

    assert reconcile_once() is True  # another round is worth it: two are still to be sent
    for session in sessions:
        session.refresh_from_db()
    assert sorted(s.state for s in sessions) == ["admitted", "admitted", "starting", "starting"]
    assert len(driver.list()) == 2

    settle(*sessions)
    assert len(driver.list()) == 4


@override_settings(LAB_CONTROLLER_THREADS=2)
def test_once_the_cluster_answers_fast_a_round_sends_a_whole_class_of_creates(world, driver, monkeypatch):
    """Two threads, one create each while the pace is unknown; the first answers in milliseconds,
    so the pool clears hundreds within a third of a lease and the next round sends all of them."""
    from labs.services.controller import creates
    from tests.factories import course_with_students

    creates.driver_calls.pace_forget()
    monkeypatch.setattr(creates, "CREATES_OUT_PER_THREAD", 1)
    course, (small, _), students, _ = course_with_students(12, code="BIG")
    first = [session_launch(student=s, course=course, template=small) for s in students[:2]]
    assert reconcile_once() is True
    assert len(driver.list()) == 2  # the two the pool's floor allows, now timed
    assert creates.driver_calls.room() > 10

    class_ = [session_launch(student=s, course=course, template=small) for s in students[2:]]
    reconcile_once()
    for session in class_:
        session.refresh_from_db()
    assert {s.state for s in class_} <= {"starting", "running"}, [s.state for s in class_]
    assert len(driver.list()) == 12
    settle(*first, *class_)


def test_the_room_for_calls_is_what_the_pool_clears_in_a_third_of_a_lease_at_its_slowest_pace(settings):
    """Measured on the calls themselves: a fresh process allows its floor; slow calls shrink the
    room back towards it, never below; calls out count against it."""
    from labs.services.controller.creates import CREATES_OUT_PER_THREAD, _DriverCalls

    settings.LAB_CONTROLLER_THREADS = 2
    settings.LAB_CREATE_LEASE_SECONDS = 6  # a third: 2 s
    calls = _DriverCalls()
    calls.pace_forget()  # nor has any other process timed one
    floor = CREATES_OUT_PER_THREAD * 2
    assert calls.room() == floor

    def made(session_id: str, seconds: float) -> None:
        calls.submit(session_id, time.sleep, seconds).result()
        # The call is no longer out once its done-callback ran, which may be just after result().
        wait_for(lambda: not calls.sessions(), timeout=5, interval=0.01, message="the call's end")

    made("a", 0.05)
    assert calls.room() == pytest.approx(2 * 2 / 0.05, rel=0.3)  # ~80: two threads, 2 s, 50 ms a call

    made("b", 0.2)  # the slowest of the latest calls sets the pace
    assert calls.room() == pytest.approx(2 * 2 / 0.2, rel=0.3)  # ~20

    made("c", 1.5)
    assert calls.room() == floor  # 2 x 2 / 1.5 is below the floor

    release = threading.Event()
    out = calls.submit("d", release.wait, 5)
    assert calls.room() == floor - 1
    release.set()
    out.result()


def test_a_process_that_has_timed_no_call_takes_the_pace_another_process_shared(settings):
    """A prefork child's first controller run in the middle of a class start: it sends what the
    pool clears at the cluster's pace the other children measured, not the floor."""
    from labs import dispatch
    from labs.services.controller.creates import CREATES_OUT_PER_THREAD, _DriverCalls

    settings.LAB_CONTROLLER_THREADS = 2
    settings.LAB_CREATE_LEASE_SECONDS = 6  # a third: 2 s
    floor = CREATES_OUT_PER_THREAD * 2
    timed, fresh = _DriverCalls(), _DriverCalls()
    timed.pace_forget()
    assert fresh.room() == floor

    timed.submit("a", time.sleep, 0.05).result()
    wait_for(lambda: not timed.sessions(), timeout=5, interval=0.01, message="the call's end")
    timed.pace_share()

    assert dispatch.driver_pace() == pytest.approx(0.05, rel=0.5)
    assert fresh.room() == pytest.approx(2 * 2 / 0.05, rel=0.3)  # ~80, as the process that timed it
    fresh.submit("b", time.sleep, 0.6).result()
    wait_for(lambda: not fresh.sessions(), timeout=5, interval=0.01, message="the call's end")
    assert fresh.room() == floor  # its own calls, once it has some, set its pace: 2 x 2 / 0.6 is below the floor

    timed.pace_forget()  # forgotten everywhere: a process without calls of its own is back at the floor
    assert dispatch.driver_pace() is None
    assert _DriverCalls().room() == floor


def test_without_redis_a_process_that_has_timed_no_call_sends_the_floor(settings):
    from labs import dispatch
    from labs.services.controller.creates import CREATES_OUT_PER_THREAD, _DriverCalls
    from tests.conftest import free_port

    settings.LAB_CONTROLLER_THREADS = 2
    suite_url = settings.CELERY_BROKER_URL
    dispatch.driver_pace_share(0.01)  # what the suite's Redis holds, out of reach below
    settings.CELERY_BROKER_URL = f"redis://127.0.0.1:{free_port()}/0"  # nothing listens there
    dispatch._redis.cache_clear()
    try:
        assert dispatch.driver_pace() is None
        assert _DriverCalls().room() == CREATES_OUT_PER_THREAD * 2
        dispatch.driver_pace_share(0.01)  # says nothing, raises nothing
        dispatch.driver_pace_forget()
    finally:
        settings.CELERY_BROKER_URL = suite_url
        dispatch._redis.cache_clear()
    assert dispatch.driver_pace() == pytest.approx(0.01)
    dispatch.driver_pace_forget()


def test_an_instance_another_process_records_after_the_look_is_not_taken_for_vanished(world, driver, monkeypatch):
    """The list was taken before the create landed; another worker's answer binds it before this round decides."""
    from labs.services.controller import creates

    session = launch(world)
    reconcile_once()
    session.refresh_from_db()
    ref = session.driver_ref
    assert session.state in ("starting", "running") and ref
    LabSession.objects.filter(pk=session.pk).update(state="starting", driver_ref="", running_at=None)
    looked = driver.observe

    def look_then_another_worker_binds():
        seen = looked()
        seen.pop(str(session.pk), None)  # not yet in the list
        creates.bind_instance(str(session.pk), ref, recovered=False)  # the other worker's answer, after the list
        return seen

    monkeypatch.setattr(driver, "observe", look_then_another_worker_binds)
    LabSession.objects.filter(pk=session.pk).update(retry_at=timezone.now() + timedelta(seconds=15))
    reconcile_once()

    session.refresh_from_db()
    assert session.state == "starting", session.reason
    monkeypatch.undo()
    settle(session)


def _looks_of_a_run(world, driver, monkeypatch, look) -> list[float]:
    """When each round of a three-round run looked at the cluster; ``look`` is what a look costs."""
    from labs import dispatch

    launch(world)
    looks = []
    observe = driver.observe

    def slow_observe():
        looks.append(time.monotonic())
        dispatch._redis().incr(dispatch.GENERATION_KEY)  # a launch woke the controller meanwhile
        look()
        return observe()

    monkeypatch.setattr(driver, "observe", slow_observe)
    report = controller_run(max_rounds=3)
    assert report.rounds == 3
    return [later - earlier for earlier, later in zip(looks, looks[1:], strict=False)]


@override_settings(LAB_CONTROLLER_ROUND_PAUSE_SECONDS=0.05)
def test_the_rounds_of_a_run_are_paced_by_their_own_cost(world, driver, monkeypatch):
    # In a class of a thousand a round (every open session read, every lab pod listed) costs a
    # good part of a second of CPU: the pause after it is as long, so the controller does not
    # crowd out the web server and the cluster it waits for.
    def costly():
        spent = time.process_time() + 0.4
        while time.process_time() < spent:
            pass

    gaps = _looks_of_a_run(world, driver, monkeypatch, costly)
    assert all(gap >= 0.8 for gap in gaps), gaps


@override_settings(LAB_CONTROLLER_ROUND_PAUSE_SECONDS=0.05)
def test_a_round_that_waited_rather_than_worked_is_followed_by_the_least_pause(world, driver, monkeypatch):
    # On a machine a class start keeps busy a round takes several times its CPU: what paces the
    # next round is the CPU it cost, not the time it took, or a class's labs would be admitted
    # and seen running only every other second.
    gaps = _looks_of_a_run(world, driver, monkeypatch, lambda: time.sleep(1.0))
    assert all(1.0 <= gap < 1.8 for gap in gaps), gaps  # paced by the time it took: 2 s or more


# -- a node restart (the CCE FlexNPU guide: after an unexpected restart, NPU pods may show failed
# -- because the NPUs are reported late; normal, to be ignored) ------------------------------------


def restarted_node(world, driver, session, **reboot):
    """``session`` running, the nodes' boot ids known (the reconciler's beat), then its node restarted."""
    settle(session)
    nodes_observe()
    assert Node.objects.get(pk=world["node"].pk).boot_id
    driver.inject_reboot(world["node"].name, **reboot)


def test_a_lab_whose_node_restarted_waits_for_the_npus_and_is_watched_again_when_it_comes_back(world, driver):
    session = launch(world)
    restarted_node(world, driver, session, devices_after_seconds=1.0, comes_back=True)
    allocation = Allocation.objects.get(session=session)

    reconcile_once()

    session.refresh_from_db()
    assert (session.state, session.reason) == ("running", "waiting for the NPU to come back after a node restart")
    assert Node.objects.get(pk=world["node"].pk).rebooted_at is not None
    deadline = time.monotonic() + 10
    while session.reason != "the node restarted; your lab was restarted":
        assert time.monotonic() < deadline, (session.state, session.reason)
        time.sleep(0.1)
        reconcile_once()
        session.refresh_from_db()
    assert (session.state, session.restarts) == ("running", 1)
    assert Allocation.objects.get(session=session) == allocation and allocation.released_at is None
    assert RepairEvent.objects.filter(kind=RepairEvent.Kind.NODE_REBOOTED).count() == 1
    assert RepairEvent.objects.filter(kind=RepairEvent.Kind.NODE_DEVICES_BACK).count() == 1


def test_a_lab_still_failed_when_the_npus_are_back_is_started_again_on_its_allocation(world, driver):
    session = launch(world)
    restarted_node(world, driver, session, devices_after_seconds=0.5, comes_back=False)
    old_ref = session.driver_ref
    allocation = Allocation.objects.get(session=session)
    spec = launch_spec(LabSession.objects.get(pk=session.pk))

    deadline = time.monotonic() + 15
    seen = []
    while not (session.state == "running" and session.driver_ref not in ("", old_ref)):
        assert time.monotonic() < deadline, (session.state, session.reason, seen)
        reconcile_once()
        session.refresh_from_db()
        seen.append((session.state, session.reason))
        time.sleep(0.05)

    assert ("running", "waiting for the NPU to come back after a node restart") in seen
    assert ("starting", "the node restarted; starting your lab again") in seen
    assert session.reason == "the node restarted; your lab was restarted"
    moved = Allocation.objects.get(session=session)
    assert (moved.pk, moved.card_id, moved.released_at) == (allocation.pk, allocation.card_id, None)
    assert moved.entity_id == session.driver_ref
    assert driver.observe()[str(session.pk)].ref == session.driver_ref  # the old instance is gone
    # The same instance asked for: the same card and share, the same student (whose home claim it names).
    assert launch_spec(LabSession.objects.get(pk=session.pk)) == spec
    assert session_stop(session_id=session.pk, reason=BYE)
    settle(session, until=("stopped",))
    assert Allocation.objects.filter(session=session, released_at__isnull=False).count() == 1


@override_settings(LAB_REBOOT_DEVICE_WAIT=1)
def test_a_lab_whose_node_restarted_fails_when_its_npus_do_not_come_back_in_time(world, driver):
    session = launch(world)
    restarted_node(world, driver, session, devices_after_seconds=None)

    reconcile_once()
    session.refresh_from_db()
    assert (session.state, session.reason) == ("running", "waiting for the NPU to come back after a node restart")
    time.sleep(1.1)  # the subject: LAB_REBOOT_DEVICE_WAIT (1 s, real clock) runs out
    settle(session, until=("failed",))

    assert session.reason == "the node restarted and its NPUs did not come back within 1 s"
    allocation = Allocation.objects.get(session=session)
    assert allocation.released_at is not None
    reconcile_once()
    assert Allocation.objects.get(session=session).released_at == allocation.released_at


def test_a_failed_lab_on_a_node_that_did_not_restart_still_fails_at_once(world, driver):
    session = launch(world)
    settle(session)
    nodes_observe()
    driver.inject_failure(str(session.pk), "Error")

    reconcile_once()

    session.refresh_from_db()
    assert session.state in ("stopping", "failed") and session.reason == "Error"


@override_settings(LAB_CONTROLLER_WAIT_SECONDS=0.1)
def test_late_answers_a_round_sees_are_bound_together(world, driver, monkeypatch):
    # A busy cluster answers a class's creates after the round stopped waiting: the next round
    # sees the instances and binds them in one transaction, not one each.
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    monkeypatch.setattr(driver, "create_delay_seconds", 0.5)
    sessions = [launch(world, student=i) for i in range(4)]
    reconcile_once()  # asks for all four; their answers come after the round
    wait_for_all = time.monotonic() + 5
    while len(driver.list()) < 4:
        assert time.monotonic() < wait_for_all
        time.sleep(0.05)

    with CaptureQueriesContext(connection) as queries:
        reconcile_once()

    binds = [
        q["sql"] for q in queries.captured_queries if q["sql"].startswith('UPDATE "labs_labsession"') and "driver_ref" in q["sql"]
    ]
    assert len(binds) == 1, binds
    for session in sessions:
        session.refresh_from_db()
        assert session.driver_ref
    assert not RepairEvent.objects.exists()
