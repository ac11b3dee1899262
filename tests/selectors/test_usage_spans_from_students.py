"""``usage_spans`` given students reads the open allocations from the students' sessions and the
reservations they hold (PostgreSQL: ``LATERAL``); without them, from the allocations. Both must
find the same spans: an ended session's record, an open session's allocation, a lab pre-started
for a class and claimed later (the holder's part before the claim, the student's after)."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.contrib.auth import get_user_model
from django.db import connection
from django.utils import timezone

from labs.domain.reasons import Reason
from labs.models import Allocation, LabSession, Reservation, ReservationSlot
from labs.selectors.usage import _usage_spans_sql, usage_spans
from labs.services.allocation import allocation_pass
from labs.services.sessions import session_launch, session_stop
from tests.factories import course_with_students, node_with_cards

pytestmark = pytest.mark.django_db


@pytest.fixture
def ledger():
    node_with_cards()
    course, templates, students, _ = course_with_students(4)
    ended = session_launch(student=students[0], course=course, template=templates[1])
    session_launch(student=students[1], course=course, template=templates[0])
    holder = get_user_model().objects.create(username="reserved-class", is_active=False)
    reservation = Reservation.objects.create(
        course=course, template=templates[0], count=1, start_time=timezone.localtime().time(), minutes=90, holder=holder
    )
    slot = ReservationSlot.objects.create(
        reservation=reservation, starts_at=timezone.now() - timedelta(hours=1), ends_at=timezone.now() + timedelta(hours=1)
    )
    claimed = session_launch(student=students[2], course=course, template=templates[0])
    allocation_pass()
    Allocation.objects.update(created_at=timezone.now() - timedelta(hours=2))
    LabSession.objects.filter(pk=claimed.pk).update(reservation_slot=slot, claimed_at=timezone.now() - timedelta(minutes=30))
    session_stop(session_id=ended.pk, reason=Reason.of("session.stopped_by", who="test"))
    return {"course": course, "students": students, "holder": holder}


def _spans(**filters) -> list[tuple]:
    now = timezone.now().replace(microsecond=0)
    found = usage_spans(since=now - timedelta(days=1), until=now, now=now, **filters)
    return sorted((s.session_id, s.student_id, s.course_id, s.start, s.end, s.core_percent) for s in found)


def test_given_students_it_finds_what_it_finds_without_them(ledger):
    everyone = _spans()
    assert len(everyone) == 4  # the record, the open allocation, the claimed one's two parts
    people = [*ledger["students"], ledger["holder"]]
    for who in [[p.pk] for p in people] + [[p.pk for p in people[:2]], [people[2].pk, ledger["holder"].pk]]:
        assert _spans(students=who) == [s for s in everyone if s[1] in who], who
        assert _spans(students=who, courses=[ledger["course"].pk]) == [s for s in everyone if s[1] in who], who
        assert _spans(students=who, courses=[ledger["course"].pk + 1000]) == []


def test_on_postgresql_the_students_sessions_lead(ledger):
    if connection.vendor != "postgresql":
        pytest.skip("SQLite has no LATERAL: it reads from the allocations either way")
    assert "LATERAL" in _usage_spans_sql(1, 1, None)
    assert "LATERAL" not in _usage_spans_sql(1, None, None)
