"""Emptying a node for an NPU plugin upgrade: the node is drained, its students are warned with the
deadline through the reclaim warning (card countdown, websocket), what is still there at the
deadline is stopped by the periodic task, class reservations move to other nodes where they fit
(the instructor is told of those that do not), and the node page says when it is empty."""

from __future__ import annotations

import time
from datetime import timedelta

import pytest
from django.test import Client
from django.urls import reverse
from django.utils import timezone

from labs.models import Allocation, AuditEvent, LabSession, Node, ReservationSlot, UsageRecord
from labs.selectors.operations import cluster_state
from labs.selectors.sessions import session_event_payload
from labs.services.allocation import allocation_pass
from labs.services.controller import controller_run
from labs.services.evacuation import EvacuationRefused, evacuations_enforce, node_evacuate
from labs.services.operations import node_undrain
from labs.services.reservations import reservation_book, reservations_enforce
from labs.services.sessions import session_launch
from labs.tasks import evacuations_task
from tests.factories import TemplateFactory, UserFactory, course_with_students, node_with_cards

pytestmark = pytest.mark.django_db
GIB = 1024


@pytest.fixture(autouse=True)
def reservation_rules(settings):
    settings.LAB_RESERVATION_PRESTART_SECONDS = 600
    settings.LAB_RESERVATION_GRACE_SECONDS = 900


@pytest.fixture
def operator():
    return UserFactory(username="platform-op", is_superuser=True)


@pytest.fixture
def cluster():
    """n1 (one 64 GiB card) with the labs; CLASS (6 students, 25 % / 16 GiB labs). n2 comes later."""
    n1 = node_with_cards("n1", cards=1)
    course, _, students, instructor = course_with_students(
        6, quota={"instance_count": 4, "core_percent": 100, "memory_mib": 64 * GIB}, code="CLASS", templates=[]
    )
    lab = TemplateFactory(institution=course.institution, name="lab", slug="lab", core_percent=25, memory_mib=16 * GIB)
    course.templates.add(lab)
    return {"n1": n1, "course": course, "lab": lab, "students": students, "instructor": instructor}


def settle(predicate, timeout=20):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        controller_run()
        if predicate():
            return
        time.sleep(0.1)
    raise AssertionError("the controller did not get there")


def running_labs(world, n: int) -> list[LabSession]:
    sessions = [session_launch(student=s, course=world["course"], template=world["lab"]) for s in world["students"][:n]]
    allocation_pass()
    settle(lambda: LabSession.objects.filter(pk__in=[s.pk for s in sessions], state="running").count() == n)
    return [reload(s) for s in sessions]


def reload(session) -> LabSession:
    return LabSession.objects.select_related("course__quota", "template", "student", "allocation__card__node").get(pk=session.pk)


def node_text(name: str) -> str:
    return next(n for n in cluster_state() if n.name == name).evacuation_text


def released_once(sessions) -> bool:
    return all(
        Allocation.objects.get(session_id=s.pk).released_at is not None
        and UsageRecord.objects.filter(session_id=s.pk).count() == 1
        for s in sessions
    )


def test_students_on_the_node_are_warned_with_the_deadline_on_their_card_and_the_node_drains(cluster, operator):
    labs = running_labs(cluster, 2)
    versions = [s.version for s in labs]

    report = node_evacuate(node=cluster["n1"], by=operator, minutes=15, reason="vNPU plugin upgrade, ticket 12")

    node = Node.objects.get(pk=cluster["n1"].pk)
    assert node.drained and node.evacuate_at == report.deadline
    assert timedelta(minutes=14) < report.deadline - timezone.now() <= timedelta(minutes=15)
    assert sorted(report.warned) == sorted(str(s.pk) for s in labs)
    hhmm = timezone.localtime(report.deadline).strftime("%H:%M")
    for lab, version in zip(labs, versions, strict=True):
        warned = reload(lab)
        assert warned.state == "running" and warned.reclaim_at == report.deadline
        assert warned.reason_code == "session.evacuation_warned" and warned.reason_params == {"time": hhmm}
        assert f"stops at {hhmm}; save your work" in warned.reason
        assert warned.version > version  # the websocket pushes the change to the card
        payload = session_event_payload(warned, for_owner=True)
        assert payload["stops_at"] == report.deadline.isoformat()  # the card counts down to it
        assert payload["extensions_left"] == 0
    audit = AuditEvent.objects.get(action="node.evacuate")
    assert audit.actor == operator and audit.target == "node n1"
    assert audit.after["reason"] == "vNPU plugin upgrade, ticket 12" and audit.after["labs_warned"] == 2
    assert node_text("n1") == f"2 labs left, empty at {hhmm}"
    from tests.metrics.helpers import scrape, values

    assert values(scrape(), "npu_lab_reclaims_pending") == {(): 0}  # not a reclaim of borrowed capacity

    # The reclaim rule of the allocation pass does not withdraw the evacuation's warnings, and
    # nothing is stopped before the deadline.
    allocation_pass()
    assert [reload(s).reclaim_at for s in labs] == [report.deadline] * 2
    assert evacuations_task() == {"stopped": 0}
    assert [reload(s).state for s in labs] == ["running", "running"]


def test_labs_still_there_at_the_deadline_are_stopped_by_the_periodic_task_and_the_node_says_it_is_empty(
    cluster, operator
):
    labs = running_labs(cluster, 2)
    report = node_evacuate(node=cluster["n1"], by=operator, minutes=5, reason="plugin upgrade")
    Node.objects.filter(pk=cluster["n1"].pk).update(evacuate_at=timezone.now() - timedelta(seconds=1))

    assert evacuations_task() == {"stopped": 2}

    for lab in labs:
        stopped = reload(lab)
        assert stopped.state in ("stopping", "stopped") and stopped.reason_code == "session.evacuated"
        assert stopped.reason == "stopped: node emptied for maintenance" and stopped.reclaim_at is None
    assert evacuations_task() == {"stopped": 0}  # a second run stops nothing twice
    settle(lambda: LabSession.objects.filter(state="stopped").count() == 2)
    assert released_once(labs)
    assert not Allocation.objects.filter(card__node=cluster["n1"], released_at__isnull=True).exists()
    assert Node.objects.get(pk=cluster["n1"].pk).drained  # stays drained for the upgrade
    assert node_text("n1") == "empty — safe to upgrade the NPU plugin"
    assert report.deadline  # the students had been told


def test_a_node_with_an_agent_is_empty_only_once_the_agent_reports_no_instance(cluster, operator):
    Node.objects.filter(pk=cluster["n1"].pk).update(agent_url="http://agent.invalid:1", instances_reported=None)
    node_evacuate(node=cluster["n1"], by=operator, minutes=15, reason="plugin upgrade")

    assert node_text("n1") == "no lab left; waiting for the node's agent to report no instance"
    Node.objects.filter(pk=cluster["n1"].pk).update(instances_reported=1)  # e.g. an instance of another owner's pod
    assert node_text("n1") == "no lab left; waiting for the node's agent to report no instance"
    Node.objects.filter(pk=cluster["n1"].pk).update(instances_reported=0)
    assert node_text("n1") == "empty — safe to upgrade the NPU plugin"


def test_pre_started_class_labs_move_to_another_node_where_they_fit(cluster, operator):
    start = timezone.now() + timedelta(minutes=5)
    reservation_book(
        course=cluster["course"], template=cluster["lab"], count=2, slots=[(start, start + timedelta(minutes=60))]
    )
    old = [LabSession.objects.get(pk=pk) for pk in reservations_enforce().sessions]
    settle(lambda: LabSession.objects.filter(state="running").count() == 2)
    n2 = node_with_cards("n2", cards=1)

    report = node_evacuate(node=cluster["n1"], by=operator, minutes=15, reason="plugin upgrade")

    assert len(report.moved) == 2 and report.left == [] and report.slots_short == []
    for lab in old:
        assert reload(lab).reason_code == "session.evacuation_moved"
    settle(lambda: LabSession.objects.filter(pk__in=report.moved, state="running").count() == 2)
    moved = LabSession.objects.filter(pk__in=report.moved)
    assert {s.allocation.card.node_id for s in moved} == {n2.pk}
    assert {s.reservation_slot_id for s in moved} == {old[0].reservation_slot_id}
    assert all(s.claimed_at is None for s in moved)  # still the class's, to hand to students
    settle(lambda: LabSession.objects.filter(pk__in=[s.pk for s in old], state="stopped").count() == 2)
    assert released_once(old)
    assert not ReservationSlot.objects.filter(evacuation_shortfall__gt=0).exists()
    # A student of the class is handed a moved lab at once.
    handed = session_launch(student=cluster["students"][0], course=cluster["course"], template=cluster["lab"])
    assert str(handed.pk) in report.moved and handed.state == "running"


def test_class_labs_that_fit_nowhere_else_stay_and_the_instructor_is_told(cluster, operator):
    start = timezone.now() + timedelta(minutes=5)
    reservation_book(
        course=cluster["course"], template=cluster["lab"], count=2, slots=[(start, start + timedelta(minutes=60))]
    )
    tomorrow = start + timedelta(days=1)
    reservation_book(
        course=cluster["course"], template=cluster["lab"], count=4, slots=[(tomorrow, tomorrow + timedelta(minutes=60))]
    )
    reservations_enforce()
    settle(lambda: LabSession.objects.filter(state="running").count() == 2)
    node_with_cards("n2", cards=1, memory_mib=16 * GIB)  # room for one lab only

    report = node_evacuate(node=cluster["n1"], by=operator, minutes=15, reason="plugin upgrade")

    assert len(report.moved) == 1 and len(report.left) == 1
    today, later = ReservationSlot.objects.order_by("starts_at")
    assert (today.evacuation_shortfall, today.evacuated_node) == (1, "n1")
    assert (later.evacuation_shortfall, later.evacuated_node) == (3, "n1")
    assert sorted(report.slots_short) == [today.pk, later.pk]
    left = reload(LabSession(pk=report.left[0]))
    assert left.state == "running" and left.reason_code == "session.evacuation_warned"  # stays till the deadline

    client = Client()
    client.force_login(cluster["instructor"])
    page = client.get(reverse("labs:course-reservations", args=[cluster["course"].pk])).content.decode()
    assert "3 of these sessions could not be moved: n1 was emptied for maintenance" in page
    assert "1 of these sessions could not be moved: n1 was emptied for maintenance" in page


def test_undraining_cancels_the_evacuation_the_labs_run_on_and_the_marks_go(cluster, operator):
    labs = running_labs(cluster, 1)
    node_evacuate(node=cluster["n1"], by=operator, minutes=15, reason="plugin upgrade")
    version = reload(labs[0]).version

    assert node_undrain(node=Node.objects.get(pk=cluster["n1"].pk), by=operator, reason="upgrade postponed")

    node = Node.objects.get(pk=cluster["n1"].pk)
    assert not node.drained and node.evacuate_at is None
    kept = reload(labs[0])
    assert kept.reclaim_at is None and kept.reason_code == "" and kept.version > version
    assert evacuations_enforce(now=timezone.now() + timedelta(hours=1)) == []
    audit = AuditEvent.objects.get(action="node.undrain")
    assert audit.after["evacuation_cancelled"] is True and audit.after["labs_run_on"] == 1
    assert node_text("n1") == ""


@pytest.mark.parametrize("minutes", [0, 241, -5, "15", 7.5, True])
def test_a_bad_deadline_is_refused_and_changes_nothing(cluster, operator, minutes):
    with pytest.raises(EvacuationRefused, match="Give a deadline between 1 and 240 minutes"):
        node_evacuate(node=cluster["n1"], by=operator, minutes=minutes, reason="plugin upgrade")
    node = Node.objects.get(pk=cluster["n1"].pk)
    assert not node.drained and node.evacuate_at is None and not AuditEvent.objects.exists()


def test_a_node_already_being_emptied_is_not_emptied_again(cluster, operator):
    first = node_evacuate(node=cluster["n1"], by=operator, minutes=15, reason="plugin upgrade")
    with pytest.raises(EvacuationRefused, match="n1 is already being emptied, by"):
        node_evacuate(node=cluster["n1"], by=operator, minutes=60, reason="again")
    assert Node.objects.get(pk=cluster["n1"].pk).evacuate_at == first.deadline
    assert AuditEvent.objects.filter(action="node.evacuate").count() == 1
