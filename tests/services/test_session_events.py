"""What the pages are sent after a change: one message per group, queue places included."""

from __future__ import annotations

import json
from collections import Counter

import pytest
from channels.layers import get_channel_layer

from labs.domain.reasons import Reason
from labs.services.allocation import allocation_pass
from labs.services.sessions import session_launch, session_stop
from tests.factories import course_with_students, node_with_cards

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def sent(monkeypatch):
    """Every (group, message) the portal hands the channel layer, a page update's ``sessions`` read
    back from its text; the messages still go out as they are."""
    layer = get_channel_layer()
    original = layer.group_send
    record: list[tuple[str, dict]] = []

    async def group_send(group, message):
        record.append((group, {**message, "sessions": json.loads(message["text"])["sessions"]} if "text" in message else message))
        await original(group, message)

    monkeypatch.setattr(layer, "group_send", group_send)
    return record


def test_a_pass_admitting_128_sends_one_message_per_group_with_the_places_of_those_left(sent):
    node_with_cards()
    course, (small, _), students, _ = course_with_students(140, code="AI101")
    sessions = [session_launch(student=s, course=course, template=small) for s in students]
    sent.clear()

    result = allocation_pass()

    assert len(result.admitted) == 128
    groups = Counter(group for group, _ in sent)
    # every student's group and the course's once each, and one "changed" to the cluster page
    assert len(sent) == len(groups) == 140 + 1 + 1
    assert groups["cluster"] == 1
    payloads = {p["id"]: p for group, message in sent if group.startswith("student.") for p in message["sessions"]}
    still_queued = [str(s.pk) for s in sessions if str(s.pk) not in result.admitted]
    assert [payloads[pk]["queue_position"] for pk in still_queued] == list(range(1, 13))
    assert {payloads[pk]["queue_length"] for pk in still_queued} == {12}


def test_a_cancelled_queued_session_moves_those_behind_it_up_and_no_other_course_hears(sent):
    node_with_cards()
    course, (small, _), students, _ = course_with_students(3, code="AI101", quota={"instance_count": 0})
    other, (other_small, _), other_students, _ = course_with_students(1, code="AI102", quota={"instance_count": 0})
    first, second, third = [session_launch(student=s, course=course, template=small) for s in students]
    session_launch(student=other_students[0], course=other, template=other_small)
    sent.clear()

    assert session_stop(session_id=first.pk, reason=Reason.of("session.stopped_by", who="s"))

    by_group = {group: message["sessions"] for group, message in sent if group != "cluster"}
    assert f"student.{other_students[0].pk}" not in by_group and f"course.{other.pk}" not in by_group
    assert [p["queue_position"] for p in by_group[f"student.{second.student_id}"]] == [1]
    assert [p["queue_position"] for p in by_group[f"student.{third.student_id}"]] == [2]


def test_a_cancel_in_the_middle_of_the_queue_tells_those_behind_it_and_not_those_ahead(sent):
    node_with_cards()
    course, (small, _), students, _ = course_with_students(4, code="AI101", quota={"instance_count": 0})
    first, second, third, fourth = [session_launch(student=s, course=course, template=small) for s in students]
    sent.clear()

    assert session_stop(session_id=second.pk, reason=Reason.of("session.stopped_by", who="s"))

    by_group = {group: message["sessions"] for group, message in sent if group != "cluster"}
    assert f"student.{first.student_id}" not in by_group  # still first: its page has nothing new to show
    assert [p["state"] for p in by_group[f"student.{second.student_id}"]] == ["stopped"]
    assert [p["queue_position"] for p in by_group[f"student.{third.student_id}"]] == [2]
    assert [p["queue_position"] for p in by_group[f"student.{fourth.student_id}"]] == [3]
    assert {p["id"] for p in by_group[f"course.{course.pk}"]} == {str(second.pk), str(third.pk), str(fourth.pk)}


def test_an_admission_tells_every_session_still_queued_in_its_course(sent):
    node_with_cards()
    course, (small, _), students, _ = course_with_students(4, code="AI101", quota={"instance_count": 1})
    first, *rest = [session_launch(student=s, course=course, template=small) for s in students]
    sent.clear()

    result = allocation_pass()

    assert list(result.admitted) == [str(first.pk)]
    by_group = {group: message["sessions"] for group, message in sent if group != "cluster"}
    assert [p["queue_position"] for s in rest for p in by_group[f"student.{s.student_id}"]] == [1, 2, 3]


def test_a_batch_flushed_midway_sends_what_was_committed_so_far_and_the_rest_when_it_ends(sent):
    from labs.services.events import events_batch, events_flush

    node_with_cards()
    course, (small, _), students, _ = course_with_students(2, code="AI101", quota={"instance_count": 0})
    first, second = [session_launch(student=s, course=course, template=small) for s in students]
    sent.clear()
    stopped = Reason.of("session.stopped_by", who="s")

    def states_sent_to(student):
        return [p["state"] for g, m in sent if g == f"student.{student.pk}" for p in m["sessions"]]

    with events_batch():
        session_stop(session_id=first.pk, reason=stopped)
        assert sent == []
        events_flush()
        assert states_sent_to(students[0]) == ["stopped"]
        sent.clear()
        session_stop(session_id=second.pk, reason=stopped)
        assert sent == []
    assert states_sent_to(students[1]) == ["stopped"] and states_sent_to(students[0]) == []


def test_a_controller_round_tells_the_student_once_that_the_lab_is_starting_before_the_driver_answers(sent, monkeypatch):
    from labs.drivers import get_driver
    from labs.services import controller
    from labs.services.controller import execute

    node_with_cards()
    course, (small, _), students, _ = course_with_students(1, code="AI101")
    session_launch(student=students[0], course=course, template=small)
    sent.clear()
    seen_when_waiting = []
    wait = execute.wait

    def waiting(futures, timeout):  # the round waits for the driver's answers
        seen_when_waiting.extend(p["state"] for g, m in sent if g == f"student.{students[0].pk}" for p in m["sessions"])
        return wait(futures, timeout=timeout)

    monkeypatch.setattr(execute, "wait", waiting)
    try:
        controller.reconcile_once()
    finally:
        for ref in get_driver().list():
            get_driver().delete(ref)

    # admitted and starting in one message, sent before the round waits for the driver
    assert seen_when_waiting == ["starting"]


def test_the_cluster_page_hears_when_a_share_is_taken_or_given_back_not_of_every_step(sent):
    import time

    from labs.drivers import get_driver
    from labs.models import LabSession
    from labs.services.controller import reconcile_once

    def settle(until):
        deadline = time.monotonic() + 10
        while LabSession.objects.get(pk=session.pk).state != until:
            assert time.monotonic() < deadline, until
            reconcile_once()
            time.sleep(0.05)

    node_with_cards()
    course, (small, _), students, _ = course_with_students(1, code="AI101")
    try:
        session = session_launch(student=students[0], course=course, template=small)
        assert "cluster" not in {g for g, _ in sent}  # queued: no share yet
        reconcile_once()
        assert "cluster" in {g for g, _ in sent}  # admitted: a share taken
        settle("running")
        sent.clear()
        assert session_stop(session_id=session.pk, reason=Reason.of("session.stopped_by", who="s"))
        assert {g for g, _ in sent} == {f"student.{students[0].pk}", f"course.{course.pk}"}  # stopping: still held
        settle("stopped")
        assert "cluster" in {g for g, _ in sent}  # released
    finally:
        for ref in get_driver().list():
            get_driver().delete(ref)
