"""A real Celery worker process on the real Redis broker takes a session from launch to stop."""

import pytest
from django.conf import settings

from labs.domain.reasons import Reason
from labs.models import Allocation, LabSession
from labs.services.sessions import session_launch, session_stop
from tests.conftest import wait_for


def state_of(session):
    return LabSession.objects.values_list("state", flat=True).get(pk=session.pk)


@pytest.mark.slow
def test_a_worker_takes_a_launch_to_running_and_a_stop_to_stopped(world, start_worker):
    worker = start_worker(LAB_SIMULATOR_DELAY_SECONDS="0.5")
    session = session_launch(student=world["students"][0], course=world["course"], template=world["small"])
    wait_for(
        lambda: state_of(session) == "running", timeout=60, message=lambda: f"running; worker log:\n{worker.output()[-5000:]}"
    )
    session.refresh_from_db()
    assert session.access_url and session.driver_ref
    assert Allocation.objects.get(session=session).entity_id == session.driver_ref

    session_stop(session_id=session.pk, reason=Reason.of("session.stopped_by", who="tester"))
    wait_for(lambda: state_of(session) == "stopped", timeout=60, message="stopped")
    assert Allocation.objects.get(session=session).released_at is not None


@pytest.mark.slow
def test_a_stop_frees_capacity_and_the_worker_admits_the_queued_session(world, start_worker):
    world["course"].quota.instance_count = 1
    world["course"].quota.save(update_fields=["instance_count"])
    start_worker(LAB_SIMULATOR_DELAY_SECONDS="0.2")
    first = session_launch(student=world["students"][0], course=world["course"], template=world["small"])
    second = session_launch(student=world["students"][1], course=world["course"], template=world["small"])
    wait_for(lambda: state_of(first) == "running", timeout=60, message="first running")
    second.refresh_from_db()
    assert (second.state, second.reason) == ("queued", "course quota: 1 of 1 instances in use")
    session_stop(session_id=first.pk, reason=Reason.of("session.stopped_by", who="tester"))
    wait_for(lambda: state_of(second) == "running", timeout=60, message="second running after the first stopped")


def test_tasks_are_acknowledged_late_and_requeued_when_a_worker_dies():
    assert settings.CELERY_TASK_ACKS_LATE is True
    assert settings.CELERY_TASK_REJECT_ON_WORKER_LOST is True
    assert settings.CELERY_WORKER_PREFETCH_MULTIPLIER == 1


@pytest.mark.slow
def test_a_task_whose_worker_is_killed_mid_create_is_redelivered_and_finishes(world, start_worker):
    slow = {
        "LAB_SIMULATOR_CREATE_DELAY_SECONDS": "4",
        "CELERY_VISIBILITY_TIMEOUT": "6",
        "CELERY_UNACKED_RESTORE_SECONDS": "1",
        "LAB_SIMULATOR_DELAY_SECONDS": "0.2",
        # The dead worker's create holds a lease on the session, but its holder no longer says it
        # lives: the rescuer asks again at once, not a minute later.
        "LAB_CREATE_LEASE_SECONDS": "60",
    }
    doomed = start_worker("doomed", concurrency=1, pool="solo", **slow)
    session = session_launch(student=world["students"][0], course=world["course"], template=world["small"])
    wait_for(lambda: state_of(session) == "starting", timeout=30, message=lambda: f"starting; log:\n{doomed.output()[-3000:]}")
    doomed.kill()  # SIGKILL inside driver.create: the controller's message was never acknowledged
    session.refresh_from_db()
    assert session.state == "starting" and session.driver_ref == ""

    rescuer = start_worker("rescuer", concurrency=1, pool="solo", **slow)
    wait_for(lambda: state_of(session) == "running", timeout=40, message=lambda: f"running; log:\n{rescuer.output()[-3000:]}")
    session.refresh_from_db()
    from labs.drivers import get_driver

    assert session.driver_ref and str(session.pk) in get_driver().list()
    assert Allocation.objects.filter(session=session, released_at__isnull=True).count() == 1


@pytest.mark.slow
def test_a_reclaim_warns_waits_stops_the_newest_borrowed_session_and_admits_the_guaranteed_one(start_worker):
    """Real workers and beat, the simulator driver: BORROW runs three 30 % labs on one card, two on
    LEND's idle quota; LEND's student launches; the newest borrowed lab is warned, stopped when
    its time comes, and LEND's lab runs in its place."""
    from django.utils import timezone

    from labs.models import RepairEvent
    from tests.factories import CARD_MIB, TemplateFactory, course_with_students, node_with_cards

    node_with_cards(cards=1)
    borrower, _, students, _ = course_with_students(
        3, quota={"instance_count": 1, "core_percent": 30, "memory_mib": CARD_MIB, "cohort": "dept"}, code="BORROW"
    )
    big = TemplateFactory(institution=borrower.institution, name="big", slug="big", core_percent=30, memory_mib=4096)
    borrower.templates.add(big)
    lender, _, (lender_student,), _ = course_with_students(
        1,
        quota={"instance_count": 4, "core_percent": 120, "memory_mib": CARD_MIB, "cohort": "dept"},
        code="LEND",
        templates=[big],
    )
    worker = start_worker(
        beat=True,
        LAB_SIMULATOR_DELAY_SECONDS="0.2",
        LAB_RECLAIM_MIN_RUNTIME_SECONDS="0",
        LAB_RECLAIM_WARNING_SECONDS="3",
        LAB_CONTROLLER_SECONDS="0.5",
    )
    borrowed = []
    for student in students:
        borrowed.append(session_launch(student=student, course=borrower, template=big))
        wait_for(lambda s=borrowed[-1]: state_of(s) == "running", timeout=60, message=lambda: worker.output()[-3000:])
    newest = borrowed[-1]

    guaranteed = session_launch(student=lender_student, course=lender, template=big)
    warned = wait_for(
        lambda: LabSession.objects.filter(pk=newest.pk, reclaim_at__isnull=False).first(),
        timeout=30,
        message=lambda: f"a warning; worker log:\n{worker.output()[-3000:]}",
    )
    assert warned.state == "running" and warned.reason_code == "session.reclaim_warned"
    assert state_of(guaranteed) == "queued"
    assert (warned.reclaim_at - timezone.now()).total_seconds() > 1  # it waits before stopping

    wait_for(lambda: state_of(guaranteed) == "running", timeout=60, message=lambda: worker.output()[-3000:])
    stopped = LabSession.objects.get(pk=newest.pk)
    assert (stopped.state, stopped.reason_code) == ("stopped", "session.reclaimed")
    assert stopped.ended_at >= warned.reclaim_at
    assert [state_of(s) for s in borrowed[:2]] == ["running", "running"]
    assert Allocation.objects.get(session=newest).released_at is not None
    assert Allocation.objects.get(session=guaranteed).borrowed is False
    assert list(RepairEvent.objects.filter(session=newest).order_by("id").values_list("kind", flat=True)) == [
        "reclaim_warned",
        "reclaimed",
    ]
