"""``usage_spans`` given students reads the open allocations from the students' sessions and the
reservations they hold (PostgreSQL: ``LATERAL``); without them, from the allocations. Both must
find the same spans: an ended session's record, an open session's allocation, a lab pre-started
for a class and claimed later (the holder's part before the claim, the student's after)."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.db import connection
from django.utils import timezone

from labs.selectors.usage import _usage_spans_sql, usage_spans
from tests.factories import course_with_students, node_with_cards, usage_ledger

pytestmark = pytest.mark.django_db


@pytest.fixture
def ledger():
    node_with_cards()
    course, templates, students, _ = course_with_students(4)
    return {"course": course, "students": students, "holder": usage_ledger(course, templates, students)["holder"]}


def _spans(now, **filters) -> list[tuple]:
    found = usage_spans(since=now - timedelta(days=1), until=now, now=now, **filters)
    return sorted((s.session_id, s.student_id, s.course_id, s.start, s.end, s.core_percent) for s in found)


def test_given_students_it_finds_what_it_finds_without_them(ledger):
    # One moment for every read: an open span ends at ``now``, and reads a second apart ended it differently.
    now = timezone.now().replace(microsecond=0)
    everyone = _spans(now)
    assert len(everyone) == 4  # the record, the open allocation, the claimed one's two parts
    people = [*ledger["students"], ledger["holder"]]
    for who in [[p.pk] for p in people] + [[p.pk for p in people[:2]], [people[2].pk, ledger["holder"].pk]]:
        assert _spans(now, students=who) == [s for s in everyone if s[1] in who], who
        assert _spans(now, students=who, courses=[ledger["course"].pk]) == [s for s in everyone if s[1] in who], who
        assert _spans(now, students=who, courses=[ledger["course"].pk + 1000]) == []


def test_on_postgresql_the_students_sessions_lead(ledger):
    if connection.vendor != "postgresql":
        pytest.skip("SQLite has no LATERAL: it reads from the allocations either way")
    assert "LATERAL" in _usage_spans_sql(1, 1, None)
    assert "LATERAL" not in _usage_spans_sql(1, None, None)
