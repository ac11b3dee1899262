"""The planner's reads: the whole cluster counts, but a reader sees other institutions' bookings
only as totals; the usual use comes from the ledger's past weeks; the CSV file has one row per
hour and card type plus the hour's whole cluster."""

from __future__ import annotations

import csv
import io
from datetime import datetime, time, timedelta

import pytest
from django.utils import timezone

from labs.domain.planner import Verdict
from labs.models import Allocation, Card, LabSession, UsageRecord
from labs.selectors.planner import PlannerScope, class_what_if, monday_of, plan_csv, term_plan
from labs.services.reservations import reservation_book
from tests.factories import (
    CourseFactory,
    CourseQuotaFactory,
    EnrollmentFactory,
    InstitutionFactory,
    TemplateFactory,
    node_with_cards,
)

pytestmark = pytest.mark.django_db


def next_week_monday():
    return monday_of(timezone.localdate()) + timedelta(weeks=1)


def at(day, hour: int) -> datetime:
    return datetime.combine(day, time(hour), tzinfo=timezone.get_default_timezone())


@pytest.fixture
def elsewhere(world):
    """Another institution's course with a class of 6 × "big" (20 %, 16 GiB) booked next Tuesday 10:00–12:00."""
    institution = InstitutionFactory(slug="elsewhere", name="Elsewhere University")
    course = CourseFactory(institution=institution, code="SECRET101")
    CourseQuotaFactory(course=course, core_percent=200, memory_mib=128 * 1024, instance_count=16)
    node_with_cards("n2")
    template = TemplateFactory(institution=institution, name="secret-big", slug="secret-big", core_percent=20, memory_mib=16384)
    course.templates.add(template)
    for _ in range(6):
        EnrollmentFactory(course=course)
    tuesday = next_week_monday() + timedelta(days=1)
    reservation_book(course=course, template=template, count=6, slots=[(at(tuesday, 10), at(tuesday, 12))])
    return course


def course_scope(course) -> PlannerScope:
    return PlannerScope(institutions=frozenset({course.institution_id}), courses=frozenset({course.pk}))


def test_an_instructor_sees_another_institutions_class_only_in_the_totals(world, elsewhere):
    report = term_plan(scope=course_scope(world["course"]), first=next_week_monday(), weeks=1)
    tuesday_10 = report.hours[24 + 10]
    assert timezone.localtime(tuesday_10.start).strftime("%a %H") == "Tue 10"
    assert tuesday_10.booked.instances == 6
    assert report.named(tuesday_10) == ["another institution's class"]
    assert report.mine(tuesday_10).instances == 0
    document = plan_csv(report)
    assert "SECRET101" not in document and "secret-big" not in document

    everyone = term_plan(scope=PlannerScope(institutions=None), first=next_week_monday(), weeks=1)
    assert everyone.named(everyone.hours[24 + 10]) == ["SECRET101: 6 × secret-big"]


def test_a_guarantee_is_held_in_every_hour_and_a_course_sees_its_own_share(world):
    tuesday = next_week_monday() + timedelta(days=1)
    reservation_book(course=world["course"], template=world["medium"], count=4, slots=[(at(tuesday, 14), at(tuesday, 15))])
    report = term_plan(scope=course_scope(world["course"]), first=next_week_monday(), weeks=1)
    quota = world["course"].quota
    monday_3 = report.hours[3]
    assert (monday_3.guaranteed.core_percent, monday_3.guaranteed.memory_mib) == (quota.core_percent, quota.memory_mib)
    tuesday_14 = report.hours[24 + 14]
    assert report.mine(tuesday_14).instances == 4
    assert report.named(tuesday_14) == [f"{world['course'].code}: 4 × medium"]
    assert tuesday_14.capacity.instances == 128  # one node of 8 cards: the node's cap


def hold(*, student, course, template, card, start: datetime, minutes: int) -> None:
    """A past session of ``template`` from ``start`` for ``minutes``, as its release leaves it in the ledger."""
    end = start + timedelta(minutes=minutes)
    session = LabSession.objects.create(
        student=student, course=course, template=template, state="stopped", end_state="stopped", ended_at=end
    )
    allocation = Allocation.objects.create(
        session=session,
        card=card,
        course=course,
        core_percent=template.core_percent,
        memory_mib=template.memory_mib,
        scenario="development",
    )
    Allocation.objects.filter(pk=allocation.pk).update(created_at=start, released_at=end)
    seconds = minutes * 60
    UsageRecord.objects.create(
        allocation=allocation,
        session=session,
        student=student,
        course=course,
        institution=course.institution,
        template=template,
        started_at=start,
        ended_at=end,
        core_percent=template.core_percent,
        memory_mib=template.memory_mib,
        core_percent_seconds=template.core_percent * seconds,
        memory_mib_seconds=template.memory_mib * seconds,
    )


def test_the_usual_use_of_an_hour_is_learnt_from_the_ledgers_past_weeks(world):
    card = Card.objects.filter(node=world["node"]).first()
    this_monday = monday_of(timezone.localdate())
    students = world["students"]
    # Wednesdays 20:00: 3 students in each of the last two weeks, 1 in the two before.
    for weeks_ago, count in ((1, 3), (2, 3), (3, 1), (4, 1)):
        wednesday = this_monday - timedelta(weeks=weeks_ago) + timedelta(days=2)
        for student in students[:count]:
            hold(student=student, course=world["course"], template=world["small"], card=card, start=at(wednesday, 20), minutes=45)
    report = term_plan(scope=course_scope(world["course"]), first=next_week_monday(), weeks=1, history_weeks=4)
    wednesday_20 = report.hours[2 * 24 + 20]
    # The 90th percentile of [1, 1, 3, 3]: rank 2.7, between 3 and 3.
    assert wednesday_20.usual.instances == 3
    assert wednesday_20.usual.core_percent == 15
    assert report.hours[2 * 24 + 21].usual.instances == 0
    # Learning from the last week only: 3 as well.
    assert (
        term_plan(scope=course_scope(world["course"]), first=next_week_monday(), weeks=1, history_weeks=1)
        .hours[2 * 24 + 20]
        .usual.instances
        == 3
    )


def test_the_csv_file_has_a_row_per_hour_and_card_type_and_one_for_the_whole_cluster(world):
    report = term_plan(scope=course_scope(world["course"]), first=next_week_monday(), weeks=1)
    rows = list(csv.DictReader(io.StringIO(plan_csv(report))))
    assert len(rows) == 168 * 2
    assert [r["card_type"] for r in rows[:2]] == ["Ascend910B", "all"]
    assert rows[1]["capacity_core_percent"] == "800"
    assert rows[1]["fits"] == "yes"


def test_a_what_if_names_the_booking_it_collides_with_only_as_far_as_the_reader_may_see(world, elsewhere):
    tuesday = next_week_monday() + timedelta(days=1)
    answer = class_what_if(
        scope=course_scope(world["course"]),
        course=world["course"],
        template=world["small"],
        count=4,
        weekday=1,
        start=time(11),
        end=time(13),
        first=tuesday,
        last=tuesday,
    )
    assert answer.verdict == Verdict.FITS
    assert [(timezone.localtime(h.start).hour, names) for h, names in answer.collisions()] == [
        (11, "another institution's class")
    ]
