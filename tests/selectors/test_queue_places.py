"""Queue places (``labs.selectors.sessions._queue_places``) in the allocation pass's order: one
session's counted, several sessions' courses' queues numbered once however many are asked about."""

from __future__ import annotations

import random
from datetime import timedelta

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from labs.domain.states import SessionState
from labs.models import LabSession
from labs.selectors.sessions import _queue_places, queue_facts
from tests.factories import course_with_students

pytestmark = pytest.mark.django_db


def _class(code: str, students: int, *, start, rng: random.Random) -> list[LabSession]:
    """A course whose students each have a session: most queued (several at the same instant:
    the id decides), some admitted in between."""
    course, templates, users, _ = course_with_students(students, code=code)
    states = [SessionState.QUEUED] * 3 + [SessionState.ADMITTED]
    return LabSession.objects.bulk_create(
        LabSession(
            student=user,
            course=course,
            template=templates[0],
            state=rng.choice(states),
            queue_at=start + timedelta(seconds=rng.randrange(8)),
            secret=f"s-{code}-{i}",
        )
        for i, user in enumerate(users)
    )


def _expected(sessions: list[LabSession], asked: list[LabSession]) -> dict:
    """The places as the pass takes them, counted one by one."""
    queued = [s for s in sessions if s.state == SessionState.QUEUED]
    places = {}
    for s in asked:
        if s.state != SessionState.QUEUED:
            continue
        mine = [q for q in queued if q.course_id == s.course_id]
        ahead = [q for q in mine if (q.queue_at, str(q.pk)) < (s.queue_at, str(s.pk))]
        places[s.pk] = (len(ahead) + 1, len(mine))
    return places


def test_places_follow_the_pass_s_order_in_each_course_and_only_queued_sessions_have_one():
    rng = random.Random(7)
    start = timezone.now()
    sessions = _class("QA101", 30, start=start, rng=rng) + _class("QB202", 20, start=start, rng=rng)
    asked = rng.sample(sessions, 25)
    assert any(s.state != SessionState.QUEUED for s in asked) and len({s.course_id for s in asked}) == 2

    places = _queue_places([s.pk for s in asked])

    assert places == _expected(sessions, asked)
    for one in asked[:8]:  # one session at a time (a launch's answer): counted, not numbered
        assert _queue_places([one.pk]) == _expected(sessions, [one])
    course = sessions[0].course_id
    in_first = sorted(p for pk, p in places.items() if next(s for s in sessions if s.pk == pk).course_id == course)
    assert len({length for _, length in in_first}) == 1  # one length per course


def test_the_order_is_the_allocation_pass_s():
    rng = random.Random(11)
    sessions = _class("QC303", 24, start=timezone.now(), rng=rng)
    queued = list(
        LabSession.objects.filter(state=SessionState.QUEUED, course_id=sessions[0].course_id).order_by("queue_at", "id")
    )
    places = _queue_places([s.pk for s in queued])
    assert [places[s.pk][0] for s in queued] == list(range(1, len(queued) + 1))


def test_a_publish_of_many_queued_sessions_reads_their_places_in_one_statement():
    rng = random.Random(3)
    sessions = _class("QD404", 40, start=timezone.now(), rng=rng)
    queued = [s for s in sessions if s.state == SessionState.QUEUED]
    with CaptureQueriesContext(connection) as queries:
        facts = queue_facts(queued)
    assert len(queries.captured_queries) == 1  # no quota-bound reason: no release read
    assert {pk: (f.position, f.length) for pk, f in facts.items()} == _expected(sessions, queued)
