"""What the labs app calls after session events commit (``settings.LAB_SESSION_EVENT_HOOKS``)."""

from __future__ import annotations

from collections.abc import Sequence

from labs.models import LabSession, UsageRecord
from labs.services.events import SessionEvent
from webhooks.models import Delivery, Subscription
from webhooks.payloads import event_body, session_data, usage_data
from webhooks.services import deliveries_create


def session_events(events: Sequence[SessionEvent]) -> list[Delivery]:
    """Store a delivery for every active subscription that wants each of these events.

    One query finds the active subscriptions of the sessions' institutions; when there is none
    (most institutions, most of the time), that is all, however many sessions a pass changed.
    Nothing is cached, so a subscription made a moment ago gets the next event. Otherwise two or
    three more queries read the sessions and usage records; the deliveries take one INSERT.
    """
    if not events:
        return []
    session_ids = {e.session_id for e in events}
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
    usage = {str(u.session_id): u for u in UsageRecord.objects.filter(session_id__in=usage_ids)} if usage_ids else {}
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
