"""Session events become deliveries in the transaction of the change, for the subscriptions that
want them: of the session's institution only, filtered by event and course, none while paused,
none on a rollback; and a pass that changes 128 sessions costs one query when nobody subscribed."""

from __future__ import annotations

import pytest
from django.db import connection, transaction
from django.test.utils import CaptureQueriesContext

from labs.domain.reasons import Reason
from labs.domain.states import SessionState
from labs.models import Course, CourseQuota, Enrollment, LabSession
from labs.services.events import SessionEvent, events_batch
from labs.services.sessions import session_launch, session_stop, sessions_transition
from webhooks.hooks import session_events
from webhooks.models import Delivery
from webhooks.services import subscription_create

ALL = ["session.queued", "session.running", "session.ended", "usage.recorded"]


def subscribe(institution, events=ALL, **kwargs):
    return subscription_create(institution=institution, url="https://lms.example.edu/h", event_types=events, **kwargs)[0]


def launch(world, student=0, commits=None):
    with commits(execute=True):
        return session_launch(student=world["students"][student], course=world["course"], template=world["small"])


def test_a_launch_is_delivered_to_the_subscriptions_that_want_it_after_the_commit(
    world, elsewhere, django_capture_on_commit_callbacks
):
    mine = subscribe(world["course"].institution)
    subscribe(world["course"].institution, events=["session.ended"])
    theirs = subscribe(elsewhere)
    session = launch(world, commits=django_capture_on_commit_callbacks)
    delivery = Delivery.objects.get()
    assert (delivery.subscription, delivery.event_type, delivery.state) == (mine, "session.queued", "pending")
    data = delivery.payload["data"]
    assert delivery.payload["type"] == "session.queued" and delivery.payload["timestamp"].endswith("Z")
    assert data["session"] == str(session.pk) and data["state"] == "queued"
    assert data["course"]["code"] == world["course"].code and data["student"] == world["students"][0].username
    assert not Delivery.objects.filter(subscription=theirs).exists()


def test_a_stop_gives_the_end_with_its_reason_then_no_usage_when_nothing_was_held(world, django_capture_on_commit_callbacks):
    subscribe(world["course"].institution, events=["session.ended", "usage.recorded"])
    session = launch(world, commits=django_capture_on_commit_callbacks)
    with django_capture_on_commit_callbacks(execute=True):
        session_stop(session_id=session.pk, reason=Reason.of("session.stopped_by", who="Ms Li"))
    ended = Delivery.objects.get()
    assert ended.event_type == "session.ended"
    assert ended.payload["data"]["end_state"] == "stopped" and ended.payload["data"]["reason_code"] == "session.stopped_by"
    assert ended.payload["data"]["reason"] == "stopped by Ms Li"


def test_the_delivery_is_written_in_the_launchs_transaction_before_anything_runs_on_commit(
    world, django_capture_on_commit_callbacks
):
    subscribe(world["course"].institution, events=["session.queued"])
    with django_capture_on_commit_callbacks() as callbacks:  # captured, never run
        with transaction.atomic():
            session = session_launch(student=world["students"][0], course=world["course"], template=world["small"])
            # Still inside the launch's transaction: the delivery is there, written with the session.
            delivery = Delivery.objects.get()
    assert callbacks
    assert (delivery.event_type, delivery.ordering_key, delivery.state) == ("session.queued", str(session.pk), "pending")
    assert delivery.next_attempt_at is not None  # due: beat's sweep sends it if nothing else does


def test_a_course_filter_and_a_pause_hold_events_back(world, django_capture_on_commit_callbacks):
    other = Course.objects.create(institution=world["course"].institution, code="OTHER", title="o", term="T")
    subscribe(world["course"].institution, courses=[other])
    subscribe(world["course"].institution, active=False)
    launch(world, commits=django_capture_on_commit_callbacks)
    assert not Delivery.objects.exists()


def test_nothing_is_delivered_for_a_rolled_back_change(world, django_capture_on_commit_callbacks):
    subscribe(world["course"].institution)
    with django_capture_on_commit_callbacks(execute=True), pytest.raises(RuntimeError):
        with transaction.atomic():
            session_launch(student=world["students"][0], course=world["course"], template=world["small"])
            raise RuntimeError("rolled back")
    assert not Delivery.objects.exists()


@pytest.fixture
def starting_sessions(world):
    """128 sessions of the world's course, starting (as after one allocation pass)."""
    CourseQuota.objects.filter(course=world["course"]).update(sessions_per_student=200, instance_count=200)
    student = world["students"][0]
    Enrollment.objects.get_or_create(user=student, course=world["course"])
    return LabSession.objects.bulk_create(
        LabSession(student=student, course=world["course"], template=world["small"], state="starting", secret="x")
        for _ in range(128)
    )


def subscription_queries(queries) -> int:
    return sum('"webhooks_' in q["sql"] for q in queries)


def test_128_sessions_running_in_one_pass_cost_one_query_when_nobody_subscribed(
    transactional_db, world, elsewhere, starting_sessions
):
    subscribe(elsewhere)  # another institution's subscription changes nothing
    with CaptureQueriesContext(connection) as queries, events_batch():
        # As the controller's pass moves them: one transaction, one record of their events.
        sessions_transition({str(s.pk): {} for s in starting_sessions}, to=SessionState.RUNNING)
    assert LabSession.objects.filter(state="running").count() == 128
    assert subscription_queries(queries.captured_queries) == 1
    assert not Delivery.objects.exists()


def test_the_hook_takes_one_query_for_128_events_and_a_constant_few_with_a_subscriber(
    world, starting_sessions, django_assert_num_queries
):
    events = [SessionEvent("session.running", str(s.pk), s.created_at) for s in starting_sessions]
    with django_assert_num_queries(1):
        assert session_events(events) == []
    subscribe(world["course"].institution)
    with CaptureQueriesContext(connection) as queries:
        assert len(session_events(events)) == 128
    # whether any subscription is there, the subscriptions, their courses, the sessions, one
    # INSERT (and the savepoint around it)
    assert len(queries.captured_queries) <= 7, [q["sql"][:80] for q in queries.captured_queries]
