"""What a page gets to draw a session card: queue place, wait, deadline, share in words."""

from __future__ import annotations

import time
from datetime import datetime, timedelta

import pytest
from django.db import connection
from django.utils import timezone, translation

from labs.domain.lifecycle import Expire, Seen, decide
from labs.domain.reasons import Reason
from labs.domain.states import SessionState
from labs.models import Card, Enrollment, LabSession
from labs.selectors.sessions import (
    RECENT_ENDED,
    session_event_payload,
    session_event_payloads,
    session_for_user,
    sessions_for_events,
    sessions_of_student,
)
from labs.services.allocation import allocation_pass
from labs.services.controller import rounds
from labs.services.sessions import session_launch, session_stop, session_transition
from tests.factories import UserFactory, course_with_students, node_with_cards


def set_instances(course, count: int) -> None:
    course.quota.instance_count = count
    course.quota.save(update_fields=["instance_count"])


def running(session: LabSession, *, minutes_ago: float) -> None:
    """Move an admitted session to running, as if it came up ``minutes_ago``."""
    assert session_transition(session.pk, to=SessionState.STARTING)
    assert session_transition(session.pk, to=SessionState.RUNNING, access_url="http://lab/")
    LabSession.objects.filter(pk=session.pk).update(running_at=timezone.now() - timedelta(minutes=minutes_ago))


def payloads(sessions) -> dict[str, dict]:
    fresh = sessions_for_events([s.pk for s in sessions])
    return {p["id"]: p for p in session_event_payloads(fresh, for_owner=True)}


def test_queue_positions_follow_the_order_the_allocation_pass_takes_them(world):
    course = world["course"]
    sessions = [session_launch(student=s, course=course, template=world["small"]) for s in world["students"]]
    # Launch order is not queue order here: queue_at decides, then the id breaks a tie.
    base = timezone.now() - timedelta(minutes=5)
    for session, offset in zip(sessions, (3, 1, 1, 2), strict=True):
        LabSession.objects.filter(pk=session.pk).update(queue_at=base + timedelta(seconds=offset))
    tied = sorted([sessions[1], sessions[2]], key=lambda s: s.pk)
    expected = [*tied, sessions[3], sessions[0]]
    # A queued session of another course, older than all of them, is in its own queue.
    other_course, other_templates, other_students, _ = course_with_students(1, code="OTHER")
    other = session_launch(student=other_students[0], course=other_course, template=other_templates[0])
    LabSession.objects.filter(pk=other.pk).update(queue_at=base - timedelta(minutes=1))

    by_id = payloads([*sessions, other])
    assert [by_id[str(s.pk)]["queue_position"] for s in expected] == [1, 2, 3, 4]
    assert {by_id[str(s.pk)]["queue_length"] for s in expected} == {4}
    assert (by_id[str(other.pk)]["queue_position"], by_id[str(other.pk)]["queue_length"]) == (1, 1)

    set_instances(course, 1)
    admitted = set(allocation_pass().admitted)
    assert admitted == {str(expected[0].pk), str(other.pk)}  # each course admits the head of its own queue
    after = payloads(expected[1:])
    assert [after[str(s.pk)]["queue_position"] for s in expected[1:]] == [1, 2, 3]
    assert session_event_payload(sessions_for_events([expected[0].pk])[0], for_owner=True)["queue_position"] is None


def test_a_session_that_is_not_queued_has_no_queue_place_or_wait(world):
    session = session_launch(student=world["students"][0], course=world["course"], template=world["small"])
    allocation_pass()
    payload = payloads([session])[str(session.pk)]
    assert payload["state"] == "admitted"
    assert (payload["queue_position"], payload["queue_length"], payload["wait_seconds"]) == (None, None, None)


@pytest.mark.parametrize("template_minutes, expected_minutes", [(240, 180), (45, 45)])
def test_stops_at_is_the_deadline_the_controller_expires_the_session_at(world, template_minutes, expected_minutes):
    world["small"].max_lifetime_minutes = template_minutes
    world["small"].save(update_fields=["max_lifetime_minutes"])
    session = session_launch(student=world["students"][0], course=world["course"], template=world["small"])
    allocation_pass()
    running(session, minutes_ago=10)
    session.refresh_from_db()

    stops_at = datetime.fromisoformat(payloads([session])[str(session.pk)]["stops_at"])
    assert stops_at == session.running_at + timedelta(minutes=expected_minutes)
    desired = next(d for d in rounds._desired() if d.session_id == str(session.pk))
    assert desired.expires_at == pytest.approx(stops_at.timestamp(), abs=1e-6)
    seen = {desired.session_id: Seen(desired.session_id, "running")}
    assert not any(isinstance(a, Expire) for a in decide([desired], seen, now=stops_at.timestamp() - 1))
    assert Expire(str(session.pk), expected_minutes) in decide([desired], seen, now=stops_at.timestamp())


def test_a_session_not_yet_running_has_no_stop_time(world):
    session = session_launch(student=world["students"][0], course=world["course"], template=world["small"])
    allocation_pass()
    assert session_transition(session.pk, to=SessionState.STARTING)
    payload = payloads([session])[str(session.pk)]
    assert payload["started_at"] is not None
    assert payload["stops_at"] is None


def test_the_wait_is_the_time_until_the_courses_sessions_reach_their_deadlines(world):
    course = world["course"]
    set_instances(course, 2)
    extra = UserFactory(username="eve")
    Enrollment.objects.create(user=extra, course=course, role=Enrollment.Role.STUDENT)
    ada, bob, carol, dan = world["students"]
    holders = [session_launch(student=s, course=course, template=world["small"]) for s in (ada, bob)]
    allocation_pass()
    running(holders[0], minutes_ago=10)  # stops in 170 min (the course's 180)
    running(holders[1], minutes_ago=30)  # stops in 150 min
    queued = [session_launch(student=s, course=course, template=world["small"]) for s in (carol, dan, extra)]
    allocation_pass()
    by_id = payloads(queued)
    assert {p["reason_code"] for p in by_id.values()} == {"quota.instances"}
    waits = [by_id[str(s.pk)]["wait_seconds"] for s in queued]
    assert waits[0] == pytest.approx(150 * 60, abs=5)
    assert waits[1] == pytest.approx(170 * 60, abs=5)
    assert waits[2] is None  # only two sessions will give room back; the third place has no estimate


def test_no_wait_is_estimated_when_the_pass_has_not_said_what_the_session_waits_for(world):
    session = session_launch(student=world["students"][0], course=world["course"], template=world["small"])
    payload = payloads([session])[str(session.pk)]
    assert payload["reason_code"] == "session.queued"
    assert payload["queue_position"] == 1
    assert payload["wait_seconds"] is None


def test_no_wait_is_estimated_when_cards_not_the_course_quota_hold_the_session(world):
    Card.objects.exclude(index=0).update(healthy=False)
    big = world["medium"]
    big.memory_mib = 60 * 1024  # one per card
    big.save(update_fields=["memory_mib"])
    sessions = [session_launch(student=s, course=world["course"], template=big) for s in world["students"][:3]]
    assert len(allocation_pass().admitted) == 1
    waiting = [p for p in payloads(sessions).values() if p["state"] == "queued"]
    assert sorted(p["queue_position"] for p in waiting) == [1, 2]
    assert {p["reason_code"] for p in waiting} == {"card.memory"}
    assert all(p["wait_seconds"] is None for p in waiting)


def test_the_share_is_in_words_in_the_active_language(world):
    session = session_launch(student=world["students"][0], course=world["course"], template=world["small"])
    with translation.override("en"):
        assert payloads([session])[str(session.pk)]["share_text"] == "5\u00a0% of one NPU's AI Core guaranteed, 4\u00a0GiB memory"
    with translation.override("zh-hans"):
        payload = payloads([session])[str(session.pk)]
    assert payload["share_text"] == "保证单张 NPU 5\u00a0% 的 AI Core 算力，显存 4\u00a0GiB"
    assert payload["state_label"] == "排队中"


def test_the_students_sessions_carry_their_card_payload(world):
    student = world["students"][0]
    session = session_launch(student=student, course=world["course"], template=world["small"])
    (listed,) = sessions_of_student(user=student)
    assert listed.card["id"] == str(session.pk)
    assert listed.card["queue_position"] == 1


def test_the_student_sees_open_sessions_newest_first_then_the_five_latest_ended_in_one_query(world, django_assert_num_queries):
    student, other = world["students"][:2]
    course, small = world["course"], world["small"]
    now = timezone.now()
    ended = []
    for i in range(RECENT_ENDED + 2):
        # Ended in an order other than their creation's.
        ended_at = now - timedelta(minutes=(i * 3) % 7)
        session = LabSession.objects.create(
            student=student, course=course, template=small, state="stopped", secret="s", ended_at=ended_at
        )
        ended.append(session)
    LabSession.objects.create(student=other, course=course, template=small, state="stopped", secret="s", ended_at=now)
    first = LabSession.objects.create(student=student, course=course, template=small, state="queued", secret="s")
    second = LabSession.objects.create(student=student, course=course, template=small, state="queued", secret="s")
    LabSession.objects.filter(pk=first.pk).update(created_at=now - timedelta(minutes=1))
    latest_ended = LabSession.objects.filter(pk__in=[s.pk for s in ended]).order_by("-ended_at")[:RECENT_ENDED]

    with django_assert_num_queries(2):  # the sessions, then the queue places
        listed = sessions_of_student(user=student)

    assert [s.pk for s in listed] == [second.pk, first.pk, *(s.pk for s in latest_ended)]
    assert {s.card["student"] for s in listed} == {student.get_username()}


def test_a_changed_session_and_those_behind_it_in_its_queue_are_read_in_one_query(db, django_assert_num_queries):
    node_with_cards()
    course, (small, _), students, _ = course_with_students(3, code="AI101", quota={"instance_count": 0})
    other, (other_small, _), other_students, _ = course_with_students(1, code="AI102", quota={"instance_count": 0})
    first, second, third = [session_launch(student=s, course=course, template=small) for s in students]
    waiting = session_launch(student=other_students[0], course=other, template=other_small)

    with django_assert_num_queries(1):
        unmoved = sessions_for_events([str(waiting.pk)])
    assert [s.pk for s in unmoved] == [waiting.pk]

    assert session_stop(session_id=first.pk, reason=Reason.of("session.stopped_by", who="s"))
    with django_assert_num_queries(1):
        moved = sessions_for_events([str(first.pk)])
    assert moved[0].pk == first.pk
    assert {s.pk for s in moved[1:]} == {second.pk, third.pk}


def test_the_sessions_read_for_events_carry_every_column_their_payloads_use(world, django_assert_num_queries):
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    from labs.selectors.sessions import _with_relations, queue_facts

    course, students = world["course"], world["students"]
    set_instances(course, 2)
    sessions = [session_launch(student=s, course=course, template=world["small"]) for s in students[:3]]
    allocation_pass()  # two admitted, one queued
    running(sessions[0], minutes_ago=5)
    assert session_stop(session_id=sessions[1].pk, reason=Reason.of("session.stopped_by", who="s"))
    ids = [s.pk for s in sessions]
    full = {s.pk: s for s in _with_relations(LabSession.objects.filter(pk__in=ids))}
    facts = queue_facts(list(full.values()))

    read = sessions_for_events(ids)
    with translation.override("zh-hans"), django_assert_num_queries(0):  # nothing deferred is touched
        narrow = {
            (s.pk, owner): session_event_payload(s, for_owner=owner, queue=facts.get(s.pk))
            for s in read
            for owner in (True, False)
        }

    assert {s.state for s in read} == {"running", "stopped", "queued"}
    assert narrow[(sessions[0].pk, True)]["placement"]  # where it runs, from its card and node
    with translation.override("zh-hans"):
        expected = {
            (s.pk, owner): session_event_payload(s, for_owner=owner, queue=facts.get(s.pk))
            for s in full.values()
            for owner in (True, False)
        }
    for payload in (*narrow.values(), *expected.values()):
        payload.pop("read_at_ms")
    assert narrow == expected

    # The dashboard's read of the same columns (the student is the user): its cards are the same.
    for session in sessions:
        with CaptureQueriesContext(connection) as facts_read:
            queue_facts([full[session.pk]])
        with translation.override("zh-hans"), django_assert_num_queries(1 + len(facts_read)):  # then queue_facts's
            (listed,) = sessions_of_student(user=session.student)
        listed.card.pop("read_at_ms")
        assert listed.card == expected[(session.pk, True)]


def test_a_publisher_that_knows_no_queue_moved_reads_only_its_sessions(db, django_assert_num_queries):
    node_with_cards()
    course, (small, _), students, _ = course_with_students(2, code="AI101", quota={"instance_count": 0})
    first, second = [session_launch(student=s, course=course, template=small) for s in students]
    assert session_stop(session_id=first.pk, reason=Reason.of("session.stopped_by", who="s"))

    with django_assert_num_queries(1):
        told = sessions_for_events([str(first.pk)], queues_moved=False)

    assert [s.pk for s in told] == [first.pk]  # second, behind it, is the caller's to leave out
    assert {s.pk for s in sessions_for_events([str(first.pk)])} == {first.pk, second.pk}


def test_only_an_admission_or_an_end_makes_the_publish_look_behind_the_session(world, django_capture_on_commit_callbacks):
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    def publish_read(change) -> str:
        """The SQL of the publish's read of the sessions (outside a batch), after ``change`` commits."""
        with CaptureQueriesContext(connection) as queries, django_capture_on_commit_callbacks(execute=True):
            change()
        sql = [q["sql"] for q in queries.captured_queries]
        (read,) = [q for q in sql if q.startswith("SELECT") and 'n."card_truth"' in q and "reason_code" in q]
        return read

    course, students, small = world["course"], world["students"], world["small"]
    looks_behind = 'IN (SELECT m."course_id"'
    stopped_by = Reason.of("session.stopped_by", who="s")
    waiting = session_launch(student=students[0], course=course, template=small)
    assert looks_behind in publish_read(lambda: session_stop(session_id=waiting.pk, reason=stopped_by))  # left the queue

    session = session_launch(student=students[1], course=course, template=small)
    allocation_pass()
    assert looks_behind not in publish_read(lambda: session_transition(session.pk, to=SessionState.STARTING))
    assert looks_behind not in publish_read(lambda: session_transition(session.pk, to=SessionState.RUNNING))
    assert looks_behind not in publish_read(lambda: session_stop(session_id=session.pk, reason=stopped_by))  # to stopping
    assert looks_behind in publish_read(lambda: session_transition(session.pk, to=SessionState.STOPPED))


def test_a_payload_is_stamped_before_its_session_was_read(world):
    # A page keeps the payload with the later read_at_ms (a queue place changes without the
    # session's row): stamped after the read, a slow request's payload read before a stop
    # committed could be newer than the stop's message and put the card back at its old place.
    course = world["course"]
    set_instances(course, 0)
    queued = session_launch(student=world["students"][0], course=course, template=world["small"])
    statements: list[float] = []

    def timed(execute, sql, params, many, context):
        if "labs_labsession" in sql:
            statements.append(time.time() * 1000)
        return execute(sql, params, many, context)

    with connection.execute_wrapper(timed):
        time.sleep(0.002)  # the clock moves between the read and the payload made after it
        by_events = sessions_for_events([queued.pk])
        time.sleep(0.002)
        event = session_event_payloads(by_events, for_owner=True)[0]
        first_event_read = statements[0]
        statements.clear()
        (listed,) = sessions_of_student(user=queued.student)
        first_list_read = statements[0]
        statements.clear()
        found = session_for_user(user=queued.student, session_id=queued.pk)
        time.sleep(0.002)
        detail = session_event_payload(found, for_owner=True)
        first_detail_read = statements[0]

    assert event["read_at_ms"] <= first_event_read
    assert listed.card["read_at_ms"] <= first_list_read
    assert detail["read_at_ms"] <= first_detail_read
    # Microseconds: a payload read just before a change and the change's message a moment after
    # it differ, not tie on the same millisecond (a tie keeps the card as it is).
    assert event["read_at_ms"] != int(event["read_at_ms"]) or listed.card["read_at_ms"] != int(listed.card["read_at_ms"])
