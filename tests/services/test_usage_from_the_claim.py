"""A lab pre-started for a class is the course's until a student claims it and the student's after:
the ledger splits its usage at the claim, and the student's budget, fair order and usage rows,
the reports and the card's "started" all follow the split.

The figures are worked out by hand: a 25 % / 16 GiB lab pre-started at T, claimed at T + 30 min
and read at T + 60 min holds 25 %·h and 16 GiB·h in all, 12.5 %·h and 8 GiB·h on each side.
"""

from __future__ import annotations

import time
from datetime import timedelta

import pytest
from django.conf import settings
from django.test import Client
from django.utils import timezone

from api.selectors import course_usage_between
from labs.domain.reasons import Reason
from labs.models import Allocation, LabSession, UsageRecord
from labs.selectors.console import course_usage
from labs.selectors.sessions import session_event_payload
from labs.selectors.usage import recent_usage_core_percent_hours, student_budgets, usage_report, usage_spans, week_start
from labs.services.controller import controller_run
from labs.services.reservations import reservation_book, reservations_enforce
from labs.services.sessions import session_launch, session_stop
from tests.factories import TemplateFactory, course_with_students, node_with_cards
from webhooks.models import Delivery
from webhooks.services import subscription_create

pytestmark = pytest.mark.django_db
GIB = 1024
CORE, MIB = 25, 16 * GIB
HALF_HOUR = 1800


@pytest.fixture
def handed_over(settings):
    """CLASS's lab, pre-started 60 min before ``now`` and claimed by ``student`` 30 min before it."""
    if timezone.now() - week_start(timezone.now()) < timedelta(hours=2):
        pytest.skip("the week began less than two hours ago: no room for the hour these tests place in it")
    settings.LAB_RESERVATION_PRESTART_SECONDS = 600
    settings.LAB_RESERVATION_GRACE_SECONDS = 900
    settings.LAB_FAIR_SHARE_SECONDS_PER_PERCENT_HOUR = 30
    settings.LAB_FAIR_SHARE_MAX_DELAY_SECONDS = 3600
    node_with_cards(cards=1)
    course, _, students, instructor = course_with_students(
        3,
        quota={
            "instance_count": 2,
            "core_percent": 50,
            "memory_mib": 32 * GIB,
            "sessions_per_student": 2,
            "budget_core_percent_hours": 50,
        },
        code="CLASS",
        templates=[],
    )
    course.starts_on = timezone.localdate() - timedelta(days=7)
    course.save(update_fields=["starts_on"])
    lab = TemplateFactory(institution=course.institution, name="lab", slug="lab", core_percent=CORE, memory_mib=MIB)
    course.templates.add(lab)
    start = timezone.now() + timedelta(minutes=5)
    reservation = reservation_book(
        course=course, template=lab, count=1, slots=[(start, start + timedelta(minutes=90))], by=instructor
    )
    reservations_enforce()
    settle(lambda: LabSession.objects.filter(state="running").exists())
    student = students[0]
    session = session_launch(student=student, course=course, template=lab)
    assert session.claimed_at is not None and session.student == student
    now = timezone.now()
    prestart, claim = now - timedelta(seconds=2 * HALF_HOUR), now - timedelta(seconds=HALF_HOUR)
    Allocation.objects.filter(session=session).update(created_at=prestart)
    LabSession.objects.filter(pk=session.pk).update(started_at=prestart, claimed_at=claim, running_at=claim)
    return {
        "course": course,
        "lab": lab,
        "student": student,
        "holder": reservation.holder,
        "session": session,
        "prestart": prestart,
        "claim": claim,
        "now": now,
    }


def settle(predicate, timeout=20):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        controller_run()
        if predicate():
            return
        time.sleep(0.1)
    raise AssertionError("the controller did not get there")


def core_percent_hours(spans, since, until) -> float:
    return sum(s.core_percent * s.seconds_within(since, until) for s in spans) / 3600


def test_the_student_is_charged_from_the_claim_and_the_course_before_it(handed_over):
    w = handed_over
    now, course = w["now"], w["course"]
    since = now - timedelta(hours=2)

    mine = list(usage_spans(since=since, until=now, students=[w["student"].pk], now=now))
    assert [(s.start, s.end) for s in mine] == [(w["claim"], now)]
    assert core_percent_hours(mine, since, now) == pytest.approx(12.5)
    courses = list(usage_spans(since=since, until=now, students=[w["holder"].pk], now=now))
    assert [(s.start, s.end) for s in courses] == [(w["prestart"], w["claim"])]
    assert core_percent_hours(courses, since, now) == pytest.approx(12.5)

    budget = student_budgets(pairs=[(course.pk, w["student"].pk)], now=now)[(course.pk, w["student"].pk)]
    assert budget.used.core_percent_hours == pytest.approx(12.5)
    assert budget.used.gib_hours == pytest.approx(8)
    assert budget.percent == 25  # of 50 %·h
    recent = recent_usage_core_percent_hours(
        course_id=course.pk, student_id=w["student"].pk, half_life_hours=settings.LAB_FAIR_SHARE_HALF_LIFE_HOURS, now=now
    )
    assert recent == pytest.approx(12.5)

    rows = {u.username: u for u in course_usage(course=course, now=now).students}
    assert (rows[w["student"].username].core_hours_week, rows[w["student"].username].gib_hours_week) == pytest.approx((12.5, 8))
    assert (rows[w["holder"].username].core_hours_week, rows[w["holder"].username].gib_hours_week) == pytest.approx((12.5, 8))
    report = next(r for r in usage_report(institutions=None, days=7, now=now).courses if r.course_id == course.pk)
    assert report.totals.core_percent_hours == pytest.approx(25) and report.totals.gib_hours == pytest.approx(16)
    assert report.students == 1  # the student; the course's own part is nobody's
    api_rows = {r.username: r for r in course_usage_between(course=course, since=since, until=now).rows}
    assert api_rows[w["student"].username].core_percent_hours == pytest.approx(12.5, abs=0.01)
    assert api_rows[w["holder"].username].core_percent_hours == pytest.approx(12.5, abs=0.01)


def test_a_second_launch_queues_behind_only_what_the_student_used_after_the_claim(handed_over):
    w = handed_over
    other = TemplateFactory(institution=w["course"].institution, name="other", slug="other", core_percent=5, memory_mib=4096)
    w["course"].templates.add(other)
    second = session_launch(student=w["student"], course=w["course"], template=other)
    # 30 s per %·h used: 12.5 %·h since the claim (and the moments since ``now``), not 25.
    assert (second.queue_at - second.created_at).total_seconds() == pytest.approx(12.5 * 30, abs=1)


def test_the_release_writes_the_courses_record_to_the_claim_and_the_students_from_it(handed_over):
    w = handed_over
    subscription_create(institution=w["course"].institution, url="https://lms.example.edu/h", event_types=["usage.recorded"])
    assert session_stop(session_id=w["session"].pk, reason=Reason.of("session.stopped_by", who="test"))
    settle(lambda: LabSession.objects.get(pk=w["session"].pk).state == "stopped")

    records = {r.student_id: r for r in UsageRecord.objects.filter(session=w["session"])}
    assert set(records) == {w["holder"].pk, w["student"].pk}
    course_part, student_part = records[w["holder"].pk], records[w["student"].pk]
    assert (course_part.started_at, course_part.ended_at) == (w["prestart"], w["claim"])
    assert (course_part.core_percent_seconds, course_part.memory_mib_seconds) == (CORE * HALF_HOUR, MIB * HALF_HOUR)
    assert student_part.started_at == w["claim"]
    held = round((student_part.ended_at - w["claim"]).total_seconds())
    assert HALF_HOUR <= held < HALF_HOUR + 20  # from the claim to the release, moments after ``now``
    assert (student_part.core_percent_seconds, student_part.memory_mib_seconds) == (CORE * held, MIB * held)
    assert student_part.allocation_id == course_part.allocation_id
    # The LMS hears of the student's part.
    usage = Delivery.objects.get(event_type="usage.recorded").payload["data"]
    assert usage["student"] == w["student"].username
    assert (usage["started_at"], usage["core_percent_seconds"]) == (w["claim"].isoformat().replace("+00:00", "Z"), CORE * held)


def test_the_card_says_the_lab_started_at_the_hand_over(handed_over):
    w = handed_over
    session = LabSession.objects.select_related("template", "course__quota", "student").get(pk=w["session"].pk)
    assert session_event_payload(session, for_owner=True)["started_at"] == w["claim"].isoformat()
    client = Client()
    client.force_login(w["student"])
    page = client.get("/").content.decode()
    assert f"started {timezone.localtime(w['claim']):%H:%M}" in page
    assert f"started {timezone.localtime(w['prestart']):%H:%M}" not in page
