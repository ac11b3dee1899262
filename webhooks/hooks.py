"""What the labs app calls with session events, inside the transaction of the change
(``settings.LAB_SESSION_EVENT_HOOKS``): the deliveries are written there, the outbox."""

from __future__ import annotations

from collections.abc import Sequence
from functools import lru_cache

from django.db import connection
from django.db.models import F

from labs.models import Course, LabSession, UsageRecord
from labs.selectors.rows import column, marks, table
from labs.services.events import SessionEvent
from webhooks.models import Delivery, Subscription
from webhooks.payloads import event_body, session_data, usage_data
from webhooks.services import deliveries_create


def session_events(events: Sequence[SessionEvent]) -> list[Delivery]:
    """Store a delivery for every active subscription that wants each of these events, in the
    caller's transaction: they commit with the change, and a worker sends them after.

    One written-out statement asks whether the sessions' institutions have an active
    subscription at all; when none has (most institutions, most of the time), that is all,
    however many sessions a pass changed, and it is cheap: every launch and every stop of the
    web asks it (written out: composing the ORM's query cost more than running it). Nothing is
    cached, so a subscription made a moment ago gets the next event. Otherwise the subscriptions are read
    with their courses, then the sessions and usage records; the deliveries take one INSERT.
    """
    if not events:
        return []
    session_ids = {e.session_id for e in events}
    if not _any_subscription(session_ids):
        return []
    kinds = {e.kind for e in events}
    subscriptions = [
        s
        for s in Subscription.objects.filter(
            active=True, institution_id__in=LabSession.objects.filter(pk__in=session_ids).values("course__institution_id")
        ).prefetch_related("courses")
        if kinds & set(s.event_types)  # in Python: SQLite (the demo) has no JSON containment lookup
    ]
    if not subscriptions:
        return []
    sessions = {
        str(s.pk): s for s in LabSession.objects.filter(pk__in=session_ids).select_related("course", "student", "template")
    }
    usage_ids = {e.session_id for e in events if e.kind == "usage.recorded"}
    # The student's record: a lab pre-started for a class has the course's too, to the claim.
    records = UsageRecord.objects.filter(session_id__in=usage_ids, student_id=F("session__student_id")) if usage_ids else ()
    usage = {str(u.session_id): u for u in records}
    courses_of = {s.pk: {c.pk for c in s.courses.all()} for s in subscriptions}
    deliveries = []
    for event in events:
        session = sessions.get(event.session_id)
        if session is None:
            continue
        if event.kind == "usage.recorded":
            if event.session_id not in usage:
                continue
            data = usage_data(usage[event.session_id], session)
        else:
            data = session_data(event.kind, session)
        body = event_body(event.kind, event.at, data)
        for subscription in subscriptions:
            if (
                subscription.institution_id == session.course.institution_id
                and event.kind in subscription.event_types
                and (not courses_of[subscription.pk] or session.course_id in courses_of[subscription.pk])
            ):
                deliveries.append(
                    Delivery(subscription=subscription, event_type=event.kind, payload=body, ordering_key=event.session_id)
                )
    return deliveries_create(deliveries) if deliveries else []


def _any_subscription(session_ids: set[str]) -> bool:
    """Whether an active subscription belongs to the institution of any of these sessions."""
    field = LabSession._meta.pk
    params = [True, *(field.get_db_prep_value(field.to_python(pk), connection) for pk in session_ids)]
    with connection.cursor() as cursor:
        cursor.execute(_any_subscription_sql(len(session_ids)), params)
        return cursor.fetchone() is not None


@lru_cache(maxsize=256)  # one statement per number of sessions
def _any_subscription_sql(count: int) -> str:
    w = lambda name: column(Subscription, name, "w")  # noqa: E731
    c = lambda name: column(Course, name, "c")  # noqa: E731
    s = lambda name: column(LabSession, name, "s")  # noqa: E731
    return (
        f"SELECT 1 FROM {table(Subscription, 'w')}"
        f" WHERE {w('active')} = %s AND {w('institution')} IN ("
        f"SELECT {c('institution')} FROM {table(Course, 'c')}"
        f" INNER JOIN {table(LabSession, 's')} ON {s('course')} = {c('id')}"
        f" WHERE {s('id')} IN ({marks(count)})) LIMIT 1"
    )
