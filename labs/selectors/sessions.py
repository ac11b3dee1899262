"""Reads of lab sessions, always scoped to the user asking."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from django.db.models import Q, QuerySet

from labs.domain.states import TERMINAL
from labs.models import Enrollment, LabSession

RECENT_ENDED = 5


def _with_relations(qs: QuerySet[LabSession]) -> QuerySet[LabSession]:
    return qs.select_related("template", "course", "student", "allocation__card__node")


def sessions_for_events(session_ids: Iterable[str]) -> QuerySet[LabSession]:
    return _with_relations(LabSession.objects.filter(pk__in=list(session_ids)))


def sessions_of_student(*, user) -> list[LabSession]:
    """The student's open sessions, then their few most recently ended ones."""
    base = _with_relations(LabSession.objects.filter(student=user))
    open_sessions = list(base.exclude(state__in=TERMINAL).order_by("-created_at"))
    ended = list(base.filter(state__in=TERMINAL).order_by("-ended_at")[:RECENT_ENDED])
    return open_sessions + ended


def session_for_user(*, user, session_id) -> LabSession | None:
    """The session if ``user`` owns it or teaches its course; ``None`` otherwise."""
    staff_courses = Enrollment.objects.filter(user=user, role__in=Enrollment.STAFF_ROLES).values("course_id")
    return (
        _with_relations(LabSession.objects.filter(pk=session_id)).filter(Q(student=user) | Q(course_id__in=staff_courses)).first()
    )


def session_event_payload(session: LabSession, *, for_owner: bool) -> dict[str, Any]:
    """What a page needs to draw a session card. Only the owner gets the access URL (it holds the secret)."""
    allocation = getattr(session, "allocation", None)
    placement = ""
    if allocation is not None and allocation.released_at is None:
        placement = allocation.placement
    return {
        "id": str(session.pk),
        "version": session.version,
        "state": session.state,
        "state_label": str(LabSession.State(session.state).label),
        "reason": session.reason,
        "reason_code": session.reason_code,
        "reason_params": session.reason_params,
        "template": session.template.name,
        "course_id": session.course_id,
        "course": session.course.code,
        "student": session.student.get_username(),
        "core_percent": session.template.core_percent,
        "memory_mib": session.template.memory_mib,
        "placement": placement,
        "can_stop": session.can_stop,
        "access_url": session.access_url if for_owner and session.state == LabSession.State.RUNNING else "",
        "created_at": session.created_at.isoformat(),
    }
