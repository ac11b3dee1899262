"""Class reservations: a booking is checked against the cluster (refused with the reason, nothing
written), the course's guarantee is raised during its slots, the slot's sessions are pre-started a
lead time ahead, handed to the first students who launch, and stopped when nobody claims them."""

from __future__ import annotations

import time
from datetime import timedelta

import pytest
from django.contrib.auth import get_user_model
from django.utils import timezone

from labs.domain.quota import Resources
from labs.models import Allocation, AuditEvent, LabSession, Reservation, ReservationSlot, UsageRecord
from labs.services.allocation import allocation_pass, course_rules
from labs.services.controller import controller_run
from labs.services.reservations import (
    ReservationRefused,
    reservation_book,
    reservation_cancel,
    reservations_enforce,
    slot_label,
)
from labs.services.sessions import session_launch
from tests.factories import TemplateFactory, course_with_students, node_with_cards

pytestmark = pytest.mark.django_db
GIB = 1024


@pytest.fixture(autouse=True)
def reservation_rules(settings):
    settings.LAB_RESERVATION_PRESTART_SECONDS = 600
    settings.LAB_RESERVATION_GRACE_SECONDS = 900


@pytest.fixture
def one_card():
    """One 64 GiB card; CLASS (6 students, guarantee one 25 % / 16 GiB lab) and its template."""
    node_with_cards(cards=1)
    course, _, students, instructor = course_with_students(
        6, quota={"instance_count": 1, "core_percent": 25, "memory_mib": 16 * GIB}, code="CLASS", templates=[]
    )
    lab = TemplateFactory(institution=course.institution, name="lab", slug="lab", core_percent=25, memory_mib=16 * GIB)
    course.templates.add(lab)
    return {"course": course, "lab": lab, "students": students, "instructor": instructor}


def slot_in(minutes: float, length: int = 90):
    start = timezone.now() + timedelta(minutes=minutes)
    return (start, start + timedelta(minutes=length))


def book(world, count, *slots, template=None):
    return reservation_book(
        course=world["course"], template=template or world["lab"], count=count, slots=list(slots), by=world["instructor"]
    )


def settle(predicate, timeout=20):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        controller_run()
        if predicate():
            return
        time.sleep(0.1)
    raise AssertionError("the controller did not get there")


def test_a_booking_the_cluster_cannot_hold_is_refused_with_the_reason_and_nothing_is_written(one_card):
    users_before = get_user_model().objects.count()
    with pytest.raises(ReservationRefused) as refused:
        book(one_card, 5, slot_in(60 * 24), slot_in(60 * 48))
    message = refused.value.messages[0]
    assert "needs 5 instances of 25 % / 16 GiB; the cluster can hold 4 beside" in message
    assert not Reservation.objects.exists() and not ReservationSlot.objects.exists()
    assert not AuditEvent.objects.filter(action="reservation.create").exists()
    assert get_user_model().objects.count() == users_before  # no holder account either


def test_a_booking_that_fits_is_written_with_its_slots_and_audited(one_card):
    reservation = book(one_card, 4, slot_in(60 * 24), slot_in(60 * 48))
    assert reservation.slots.count() == 2 and reservation.count == 4
    assert not reservation.holder.is_active and not reservation.holder.has_usable_password()
    audit = AuditEvent.objects.get(action="reservation.create")
    assert audit.actor == one_card["instructor"] and audit.after["slots"] == 2


def test_the_refusal_names_the_first_slot_that_does_not_fit_beside_other_bookings(one_card):
    other, _, _, _ = course_with_students(4, quota={"instance_count": 0, "core_percent": 0, "memory_mib": 0}, code="OTHER")
    other.templates.add(one_card["lab"])
    tomorrow, later = slot_in(60 * 24), slot_in(60 * 48)
    reservation_book(course=other, template=one_card["lab"], count=3, slots=[later])
    book(one_card, 1, tomorrow, later)  # one more fits beside OTHER's three
    with pytest.raises(ReservationRefused, match="the cluster can hold 0 beside"):
        book(one_card, 1, slot_in(60 * 24 + 30), slot_in(60 * 48 + 30))  # the day after: overlaps both
    with pytest.raises(ReservationRefused) as refused:
        book(one_card, 2, slot_in(60 * 72), later)  # the first fits; the second has OTHER's three and CLASS's one
    assert refused.value.messages[0].startswith(f"{slot_label(*later)}: needs 2 instances")
    assert "the cluster can hold 0 beside" in refused.value.messages[0]
    assert Reservation.objects.count() == 2


def test_other_courses_guarantees_are_kept_free(one_card):
    course_with_students(1, quota={"instance_count": 2, "core_percent": 50, "memory_mib": 32 * GIB}, code="GUARD")
    with pytest.raises(ReservationRefused, match="the cluster can hold 2 beside"):
        book(one_card, 3, slot_in(60 * 24))


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ("past", "is in the past"),
        ("roster", "more than the 6 students"),
        ("template", "is not offered in CLASS"),
        ("reversed", "must end after it starts"),
        ("none", "Choose at least one date"),
        ("zero", "at least one session"),
    ],
)
def test_a_booking_that_makes_no_sense_is_refused(one_card, change, message):
    count, slots, template = 2, [slot_in(60)], one_card["lab"]
    if change == "past":
        slots = [slot_in(-30)]
    elif change == "roster":
        count = 7
    elif change == "template":
        template = TemplateFactory(institution=one_card["course"].institution, slug="elsewhere", name="elsewhere")
    elif change == "reversed":
        start, end = slot_in(60)
        slots = [(end, start)]
    elif change == "none":
        slots = []
    elif change == "zero":
        count = 0
    with pytest.raises(ReservationRefused, match=message):
        book(one_card, count, *slots, template=template)
    assert not Reservation.objects.exists()


def test_overlapping_bookings_of_one_course_may_not_pass_its_roster(one_card):
    book(one_card, 3, slot_in(60))
    with pytest.raises(ReservationRefused, match="already has 3 sessions booked then"):
        book(one_card, 4, slot_in(90))


def test_the_guarantee_is_raised_from_the_pre_start_lead_to_the_end_of_the_slot(one_card):
    course = one_card["course"]
    book(one_card, 3, slot_in(15, length=60))
    assert course_rules({course.pk})[course.pk].guarantee == Resources(25, 16 * GIB, 1)  # 15 min ahead: not yet
    with_lead = timezone.now() + timedelta(minutes=6)
    from labs.services.reservations import reserved_demand

    assert reserved_demand({course.pk}, now=with_lead) == {course.pk: Resources(75, 48 * GIB, 3)}
    assert reserved_demand({course.pk}, now=timezone.now() + timedelta(minutes=76)) == {}


def test_during_the_slot_the_class_is_admitted_inside_its_raised_guarantee_and_borrowed_room_is_reclaimed(one_card, settings):
    settings.LAB_PLACEMENT = {**settings.LAB_PLACEMENT, "min_runtime_seconds": 0}
    course = one_card["course"]
    from labs.models import CourseQuota

    CourseQuota.objects.filter(course=course).update(cohort="dept")
    borrower, _, borrowers, _ = course_with_students(
        2, quota={"instance_count": 1, "core_percent": 25, "memory_mib": 16 * GIB, "cohort": "dept"}, code="BORROW"
    )
    borrower.templates.add(one_card["lab"])
    book(one_card, 3, slot_in(5))
    for student in borrowers:  # one inside BORROW's guarantee, one on CLASS's idle guarantee
        session_launch(student=student, course=borrower, template=one_card["lab"])
        allocation_pass()
    assert sorted(Allocation.objects.values_list("borrowed", flat=True)) == [False, True]

    report = reservations_enforce()
    assert len(report.sessions) == 3
    result = allocation_pass()
    assert len(result.admitted) == 2  # the card's two free places, inside the raised guarantee
    borrowed = Allocation.objects.get(borrowed=True).session
    assert result.reclaim.warned == [str(borrowed.pk)]  # the third needs what BORROW borrowed
    assert not Allocation.objects.filter(session__reservation_slot__isnull=False, borrowed=True).exists()


def test_pre_start_queues_exactly_n_sessions_a_lead_time_ahead_and_only_once(one_card):
    book(one_card, 2, slot_in(30))
    soon = book(one_card, 2, slot_in(5, length=20))
    assert reservations_enforce().sessions and LabSession.objects.count() == 2  # the slot in 30 min waits
    assert reservations_enforce().sessions == [] and LabSession.objects.count() == 2
    sessions = LabSession.objects.all()
    assert {s.student_id for s in sessions} == {soon.holder_id}
    assert {s.reservation_slot.reservation_id for s in sessions} == {soon.pk}
    settle(lambda: LabSession.objects.filter(state="running").count() == 2)
    assert LabSession.objects.count() == 2 and Allocation.objects.filter(released_at__isnull=True).count() == 2


def test_the_first_students_who_launch_get_a_running_lab_at_once(one_card):
    book(one_card, 2, slot_in(5, length=30))
    made = set(reservations_enforce().sessions)
    settle(lambda: LabSession.objects.filter(state="running").count() == 2)
    first, second, third = one_card["students"][:3]

    got = [session_launch(student=s, course=one_card["course"], template=one_card["lab"]) for s in (first, second)]
    assert [g.state for g in got] == ["running", "running"]
    assert {str(g.pk) for g in got} == made
    assert [g.student for g in got] == [first, second] and all(g.claimed_at for g in got)
    late = session_launch(student=third, course=one_card["course"], template=one_card["lab"])
    assert late.state == "queued" and late.reservation_slot_id is None  # all claimed: queued as usual
    again = session_launch(student=one_card["students"][3], course=one_card["course"], template=one_card["lab"])
    assert again.reservation_slot_id is None


def test_a_student_of_another_course_or_template_is_not_handed_one(one_card):
    book(one_card, 2, slot_in(5, length=30))
    reservations_enforce()
    other_lab = TemplateFactory(institution=one_card["course"].institution, slug="other-lab", core_percent=5, memory_mib=4096)
    one_card["course"].templates.add(other_lab)
    session = session_launch(student=one_card["students"][0], course=one_card["course"], template=other_lab)
    assert session.reservation_slot_id is None
    assert LabSession.objects.filter(claimed_at__isnull=False).count() == 0


def test_unclaimed_sessions_stop_after_the_grace_with_the_reason_and_release_once(one_card):
    book(one_card, 3, slot_in(5, length=60))
    reservations_enforce()
    settle(lambda: LabSession.objects.filter(state="running").count() == 3)
    kept = session_launch(student=one_card["students"][0], course=one_card["course"], template=one_card["lab"])
    slot = ReservationSlot.objects.get()

    assert reservations_enforce(now=slot.starts_at + timedelta(seconds=899)).unclaimed == []
    report = reservations_enforce(now=slot.starts_at + timedelta(seconds=901))
    assert len(report.unclaimed) == 2 and str(kept.pk) not in report.unclaimed
    assert reservations_enforce(now=slot.starts_at + timedelta(seconds=960)).unclaimed == []
    settle(lambda: LabSession.objects.filter(pk__in=report.unclaimed, state="stopped").count() == 2)
    for stopped in LabSession.objects.filter(pk__in=report.unclaimed):
        assert stopped.reason_code == "session.reservation_unclaimed"
        assert "not claimed by a student within 15 minutes" in stopped.reason
        assert Allocation.objects.get(session=stopped).released_at is not None
        assert UsageRecord.objects.filter(session=stopped).count() == 1
    assert LabSession.objects.get(pk=kept.pk).state == "running"
    from tests.metrics.helpers import scrape, values

    samples = scrape()
    assert values(samples, "npu_lab_reservation_starts_total") == {(): 3}
    assert values(samples, "npu_lab_reservation_claims_total") == {(): 1}
    assert values(samples, "npu_lab_reservation_unclaimed_total") == {(): 2}


def test_a_cancelled_reservation_pre_starts_nothing_and_stops_what_nobody_claimed(one_card):
    later = book(one_card, 2, slot_in(5, length=30), slot_in(60 * 24))
    reservations_enforce()
    assert LabSession.objects.count() == 2
    gone = reservation_cancel(reservation=later, by=one_card["instructor"])
    assert gone == 1  # tomorrow's slot; today's was pre-started and stays for the history
    assert ReservationSlot.objects.count() == 1
    assert set(LabSession.objects.values_list("reason_code", flat=True)) == {"session.reservation_cancelled"}
    assert reservations_enforce(now=timezone.now() + timedelta(days=1)).sessions == []
    assert AuditEvent.objects.get(action="reservation.cancel").actor == one_card["instructor"]
    with pytest.raises(ReservationRefused):
        reservation_cancel(reservation=later, by=one_card["instructor"])

    fresh = book(one_card, 2, slot_in(5, length=30))
    reservation_cancel(reservation=fresh, by=one_card["instructor"])
    assert reservations_enforce().sessions == []
    assert course_rules({one_card["course"].pk})[one_card["course"].pk].guarantee == Resources(25, 16 * GIB, 1)


def test_a_slot_whose_claim_window_closed_is_not_pre_started(one_card):
    book(one_card, 2, slot_in(5, length=30))
    assert reservations_enforce(now=timezone.now() + timedelta(minutes=5 + 16)).sessions == []


def test_an_unclaimed_pre_started_lab_is_neither_culled_as_idle_nor_charged_to_a_budget(one_card):
    from labs.models import CourseQuota
    from labs.services.activity import activity_check
    from labs.services.budgets import budgets_enforce

    one_card["lab"].idle_timeout_minutes = 1
    one_card["lab"].save(update_fields=["idle_timeout_minutes"])
    CourseQuota.objects.filter(course=one_card["course"]).update(budget_core_percent_hours=1)
    book(one_card, 2, slot_in(5, length=60))
    reservations_enforce()
    settle(lambda: LabSession.objects.filter(state="running").count() == 2)
    UsageRecord.objects.all().delete()  # nothing ended yet; the open allocations are the usage
    later = timezone.now() + timedelta(hours=3)

    assert activity_check(now=later).looked == 0
    report = budgets_enforce(now=later)
    assert report.warned == report.stopping == report.stopped == []
    assert set(LabSession.objects.values_list("state", "cull_at", "budget_stop_at")) == {("running", None, None)}


def test_a_run_that_listed_the_slot_before_another_pre_started_it_makes_nothing(one_card):
    from labs.services.reservations import reservation_slot_prestart

    reservation = book(one_card, 2, slot_in(5, length=30))
    slot = reservation.slots.get()
    assert len(reservation_slot_prestart(slot_id=slot.pk)) == 2
    assert reservation_slot_prestart(slot_id=slot.pk) == []  # as a run that read the due slots too early
    reservation_cancel(reservation=reservation)
    assert LabSession.objects.count() == 2


def test_a_refusal_names_the_bookings_and_guarantees_in_the_way_and_how_much_each_holds(one_card):
    # The card holds four 25 % / 16 GiB labs. OTHER booked two at the time; GUARD is guaranteed one more.
    other, _, _, _ = course_with_students(4, quota={"instance_count": 0, "core_percent": 0, "memory_mib": 0}, code="OTHER")
    other.templates.add(one_card["lab"])
    course_with_students(1, quota={"instance_count": 1, "core_percent": 25, "memory_mib": 16 * GIB}, code="GUARD")
    slot = slot_in(60 * 24)
    reservation_book(course=other, template=one_card["lab"], count=2, slots=[slot])
    with pytest.raises(ReservationRefused) as refused:
        book(one_card, 2, slot)
    message = refused.value.messages[0]
    assert "the cluster can hold 1 beside the other bookings and guarantees." in message
    assert (
        f"In the way then: OTHER's booking {slot_label(*slot)} holds 2 × lab, 50 % / 32 GiB; "
        "GUARD's guarantee holds 25 % / 16 GiB."
    ) in message
    assert Reservation.objects.count() == 1


def test_on_an_idle_cluster_the_refusal_names_the_guarantees_that_hold_it(one_card):
    course_with_students(1, quota={"instance_count": 4, "core_percent": 100, "memory_mib": 64 * GIB}, code="AI101")
    with pytest.raises(ReservationRefused) as refused:
        book(one_card, 1, slot_in(60 * 24))
    message = refused.value.messages[0]
    assert "the cluster can hold 0 beside" in message
    assert "In the way then: AI101's guarantee holds 100 % / 64 GiB." in message
    assert "With nothing else" not in message  # alone, the cluster would hold the class


def test_a_class_bigger_than_the_whole_cluster_is_told_so(one_card):
    from labs.models import Enrollment
    from tests.factories import UserFactory

    for i in range(4):
        Enrollment.objects.create(course=one_card["course"], user=UserFactory(username=f"more-{i}"), role="student")
    with pytest.raises(ReservationRefused) as refused:
        book(one_card, 6, slot_in(60 * 24))
    message = refused.value.messages[0]
    assert message.endswith(
        "the cluster can hold 4 beside the other bookings and guarantees. With nothing else booked or guaranteed it holds 4."
    )


def test_a_one_off_class_in_the_past_is_refused_clearly(one_card):
    past = slot_in(-30)
    with pytest.raises(ReservationRefused) as refused:
        book(one_card, 1, past)
    assert refused.value.messages[0] == f"{slot_label(*past)} is in the past: only a class still to come can be booked."
    assert not Reservation.objects.exists()


def test_a_weekly_class_whose_first_date_is_past_is_booked_from_the_next_meeting(one_card):
    from datetime import time as clock

    from labs.services.reservations import weekly_slots

    now = timezone.localtime()
    # Every day at the current minute, from a week ago to a week ahead: today's class has begun.
    slots = weekly_slots(
        start=clock(now.hour, now.minute),
        minutes=30,
        weekdays=range(7),
        first=now.date() - timedelta(days=7),
        last=now.date() + timedelta(days=7),
        now=now,
    )
    assert [timezone.localtime(s).date() for s, _ in slots] == [now.date() + timedelta(days=d) for d in range(1, 8)]
    reservation = book(one_card, 1, *slots)
    assert reservation.slots.count() == 7


def test_other_institutions_courses_are_not_named_only_what_they_hold(one_card):
    from tests.factories import CourseFactory, CourseQuotaFactory, InstitutionFactory

    elsewhere = CourseFactory(institution=InstitutionFactory(slug="uni-elsewhere"), code="SECRET")
    CourseQuotaFactory(course=elsewhere, instance_count=2, core_percent=50, memory_mib=32 * GIB)
    with pytest.raises(ReservationRefused) as refused:
        book(one_card, 3, slot_in(60 * 24))
    message = refused.value.messages[0]
    assert "In the way then: other institutions' courses hold 50 % / 32 GiB." in message
    assert "SECRET" not in message
