"""Reclaim, carried out: a borrowed session another course needs back is warned, then stopped;
the guaranteed session is admitted once the room is free. Never a session inside its own
course's guarantee, never one younger than the minimum runtime; a warning the need no longer
backs is withdrawn."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from labs.domain.reasons import Reason
from labs.models import Allocation, LabSession, RepairEvent
from labs.selectors.sessions import session_event_payload
from labs.services.allocation import allocation_pass
from labs.services.controller import controller_run
from labs.services.sessions import session_launch, session_stop
from tests.factories import CARD_MIB, TemplateFactory, course_with_students, node_with_cards

pytestmark = pytest.mark.django_db


@pytest.fixture
def crowded(settings):
    """One card; BORROW (guarantee: one 30 % session) runs three, two on LEND's idle quota."""
    settings.LAB_PLACEMENT = {**settings.LAB_PLACEMENT, "min_runtime_seconds": 0}
    settings.LAB_RECLAIM_WARNING_SECONDS = 300
    node_with_cards(cards=1)
    borrower, templates, students, _ = course_with_students(
        3, quota={"instance_count": 1, "core_percent": 30, "memory_mib": CARD_MIB, "cohort": "dept"}, code="BORROW"
    )
    big = TemplateFactory(institution=borrower.institution, name="big", slug="big", core_percent=30, memory_mib=4096)
    borrower.templates.add(big)
    lender, _, lenders, _ = course_with_students(
        1,
        quota={"instance_count": 4, "core_percent": 120, "memory_mib": CARD_MIB, "cohort": "dept"},
        code="LEND",
        templates=[big],
    )
    running = []
    for student in students:
        running.append(session_launch(student=student, course=borrower, template=big))
        allocation_pass()  # one pass each: distinct admission times, oldest first
    assert sorted(Allocation.objects.values_list("borrowed", flat=True)) == [False, True, True]
    return {"borrower": borrower, "lender": lender, "big": big, "running": running, "lender_student": lenders[0]}


def reload(session) -> LabSession:
    return LabSession.objects.select_related("course__quota", "template", "student").get(pk=session.pk)


def test_the_newest_borrowed_session_is_warned_first_and_nothing_stops_yet(crowded):
    guaranteed = session_launch(student=crowded["lender_student"], course=crowded["lender"], template=crowded["big"])

    result = allocation_pass()

    newest = crowded["running"][-1]
    assert result.reclaim.warned == [str(newest.pk)] and not result.reclaim.stopped
    warned = reload(newest)
    assert warned.state == "admitted" and warned.reclaim_at is not None
    assert warned.reason_code == "session.reclaim_warned" and warned.reason_params == {"course": "LEND"}
    assert "save your work" in warned.reason
    assert reload(guaranteed).state == "queued"
    # The older sessions (one inside BORROW's own guarantee) are not touched.
    assert [reload(s).reclaim_at for s in crowded["running"][:2]] == [None, None]
    assert RepairEvent.objects.get(kind="reclaim_warned").session_id == newest.pk

    allocation_pass()  # the need stands: no second warning, the countdown is not restarted
    assert reload(newest).reclaim_at == warned.reclaim_at
    assert RepairEvent.objects.filter(kind="reclaim_warned").count() == 1


def test_when_the_time_comes_the_victim_stops_and_the_guaranteed_session_is_admitted(crowded):
    guaranteed = session_launch(student=crowded["lender_student"], course=crowded["lender"], template=crowded["big"])
    allocation_pass()
    newest = crowded["running"][-1]
    LabSession.objects.filter(pk=newest.pk).update(reclaim_at=timezone.now() - timedelta(seconds=1))

    result = allocation_pass()

    assert result.reclaim.stopped == [str(newest.pk)]
    stopped = reload(newest)
    assert stopped.state in ("stopped", "stopping") and stopped.reason_code == "session.reclaimed"
    assert stopped.reason_params == {"course": "LEND"} and stopped.reclaim_at is None
    for _ in range(3):
        controller_run()
    assert reload(guaranteed).state in ("admitted", "starting", "running")
    assert Allocation.objects.get(session=guaranteed).borrowed is False
    assert RepairEvent.objects.filter(kind="reclaimed", session=newest).count() == 1
    assert [reload(s).state for s in crowded["running"][:2]] != ["stopped", "stopped"]


def test_a_warning_is_withdrawn_when_the_guaranteed_request_goes_away(crowded):
    guaranteed = session_launch(student=crowded["lender_student"], course=crowded["lender"], template=crowded["big"])
    allocation_pass()
    newest = crowded["running"][-1]
    version = reload(newest).version

    session_stop(session_id=guaranteed.pk, reason=Reason.of("session.stopped_by", who="student"))
    result = allocation_pass()

    assert result.reclaim.withdrawn == [str(newest.pk)]
    kept = reload(newest)
    assert kept.state == "admitted" and kept.reclaim_at is None and kept.reason_code == ""
    assert kept.version > version  # the student's card hears it
    assert RepairEvent.objects.filter(kind="reclaim_withdrawn", session=newest).count() == 1


def test_no_session_younger_than_the_minimum_runtime_is_warned(crowded, settings):
    settings.LAB_PLACEMENT = {**settings.LAB_PLACEMENT, "min_runtime_seconds": 3600}
    session_launch(student=crowded["lender_student"], course=crowded["lender"], template=crowded["big"])
    result = allocation_pass()
    assert not result.reclaim.warned
    assert not LabSession.objects.filter(reclaim_at__isnull=False).exists()


def test_a_running_victim_s_card_counts_down_to_its_reclaim(crowded):
    newest = crowded["running"][-1]
    LabSession.objects.filter(pk=newest.pk).update(state="running", started_at=timezone.now(), running_at=timezone.now())
    session_launch(student=crowded["lender_student"], course=crowded["lender"], template=crowded["big"])
    allocation_pass()
    warned = reload(newest)
    payload = session_event_payload(warned, for_owner=True)
    assert payload["stops_at"] == warned.reclaim_at.isoformat()
    assert warned.reclaim_at - timezone.now() <= timedelta(seconds=300)


def test_pending_reclaims_are_a_gauge_and_reclaims_count_by_kind(crowded):
    from tests.metrics.helpers import scrape, values

    session_launch(student=crowded["lender_student"], course=crowded["lender"], template=crowded["big"])
    allocation_pass()
    samples = scrape()
    assert values(samples, "npu_lab_reclaims_pending") == {(): 1}
    assert values(samples, "npu_lab_repair_events_total", "kind")[("reclaim_warned",)] == 1


@pytest.fixture
def class_on_loan(settings):
    """One card full of NINE borrowed labs of BORROW (its guarantee: one), and LEND, whose idle
    guarantee they ride on, with a class of nine who want it back."""
    settings.LAB_PLACEMENT = {**settings.LAB_PLACEMENT, "min_runtime_seconds": 0}
    settings.LAB_RECLAIM_WARNING_SECONDS = 300
    node_with_cards(cards=1)
    borrower, _, students, _ = course_with_students(
        10, quota={"instance_count": 1, "core_percent": 10, "memory_mib": CARD_MIB, "cohort": "dept"}, code="BORROW"
    )
    tenth = TemplateFactory(institution=borrower.institution, name="tenth", slug="tenth", core_percent=10, memory_mib=4096)
    borrower.templates.add(tenth)
    lender, _, class_, _ = course_with_students(
        9,
        quota={"instance_count": 9, "core_percent": 90, "memory_mib": CARD_MIB, "cohort": "dept"},
        code="LEND",
        templates=[tenth],
    )
    on_loan = []
    for student in students:
        on_loan.append(session_launch(student=student, course=borrower, template=tenth))
        allocation_pass()
    assert sorted(Allocation.objects.values_list("borrowed", flat=True)) == [False] + [True] * 9
    return {"lender": lender, "tenth": tenth, "class": class_, "on_loan": on_loan}


def test_a_class_waiting_for_borrowed_labs_has_them_all_warned_at_once_and_seated_together(class_on_loan):
    waiting = [
        session_launch(student=student, course=class_on_loan["lender"], template=class_on_loan["tenth"])
        for student in class_on_loan["class"]
    ]

    result = allocation_pass()

    borrowed = {str(s.pk) for s in class_on_loan["on_loan"][1:]}
    assert set(result.reclaim.warned) == borrowed, "each waiting lab names a victim of its own"
    assert RepairEvent.objects.filter(kind="reclaim_warned").count() == 9
    for session in waiting:
        told = reload(session)
        assert told.state == "queued" and told.reason_code == "reclaim.returning"
        assert told.reason_params == {"minutes": 5} and "about 5 min" in told.reason

    again = allocation_pass()  # the plans stand: nothing withdrawn, nothing warned twice
    assert again.reclaim.withdrawn == [] and again.reclaim.warned == []
    assert RepairEvent.objects.filter(kind="reclaim_warned").count() == 9

    LabSession.objects.filter(pk__in=borrowed).update(reclaim_at=timezone.now() - timedelta(seconds=1))
    assert set(allocation_pass().reclaim.stopped) == borrowed
    for _ in range(3):
        controller_run()
    assert {reload(s).state for s in waiting} <= {"admitted", "starting", "running"}
    assert reload(class_on_loan["on_loan"][0]).state != "stopped"  # inside BORROW's own guarantee


def test_the_warned_victims_are_named_again_before_newer_ones(class_on_loan):
    """A plan made again (a new waiting lab, another pass) keeps the victims already warned: a
    warning is never withdrawn while a lab still waits for that room."""
    first, *others = class_on_loan["class"]
    session_launch(student=first, course=class_on_loan["lender"], template=class_on_loan["tenth"])
    warned = allocation_pass().reclaim.warned
    assert warned == [str(class_on_loan["on_loan"][-1].pk)]
    for student in others[:3]:
        session_launch(student=student, course=class_on_loan["lender"], template=class_on_loan["tenth"])
    result = allocation_pass()
    assert result.reclaim.withdrawn == [] and len(result.reclaim.warned) == 3
    assert LabSession.objects.filter(reclaim_at__isnull=False).count() == 4


def test_a_lab_beyond_the_guarantee_does_not_reclaim(class_on_loan):
    """Reclaim gives back the guarantee, not more: with a guarantee of three, five waiting labs
    of LEND warn three borrowed ones."""
    lender = class_on_loan["lender"]
    lender.quota.instance_count, lender.quota.core_percent = 3, 30
    lender.quota.save()
    for student in class_on_loan["class"][:5]:
        session_launch(student=student, course=lender, template=class_on_loan["tenth"])
    result = allocation_pass()
    assert len(result.reclaim.warned) == 3
