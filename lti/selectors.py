"""LTI reads, each scoped to what the caller may see."""

from __future__ import annotations

from functools import cache
from urllib.parse import urlsplit

from django.db import connection
from django.db.models import Q

from labs.models import Course, LabSession, LabTemplate
from labs.selectors.operations import operator_scope
from labs.selectors.rows import column, table
from lti.models import ActivityProgress, Context, Registration, Score


def registrations_for(*, user):
    """The registrations of the institutions ``user`` operates (all of them for a platform operator)."""
    scope = operator_scope(user=user)
    if scope is None:
        return Registration.objects.none()
    rows = Registration.objects.select_related("institution").prefetch_related("deployments")
    return rows if scope.platform else rows.filter(institution_id__in=scope.institutions)


def registration_for(*, user, registration_id: int) -> Registration | None:
    return registrations_for(user=user).filter(pk=registration_id).first()


def frame_origins(registration: Registration | None) -> list[str]:
    """The origins allowed to frame the tool's LTI pages: the platform's issuer and login URL."""
    if registration is None:
        return []
    origins = set()
    for url in (registration.issuer, registration.auth_login_url):
        parts = urlsplit(url)
        if parts.scheme in ("http", "https") and parts.netloc:
            origins.add(f"{parts.scheme}://{parts.netloc}")
    return sorted(origins)


def deep_link_templates(*, course: Course):
    """What an instructor may put into the LMS: the course's templates and its institution's catalogue."""
    # One query with OR, not a union: SQLite (the demo's database) refuses a union of querysets
    # with an ordering (LabTemplate's own), which Deep Linking answered with a 500.
    offered = Q(pk__in=course.templates.values("pk"))
    return LabTemplate.objects.filter(offered | Q(course__isnull=True), institution_id=course.institution_id).order_by("name")


def context_of_course(*, course: Course) -> Context | None:
    return Context.objects.select_related("registration").filter(course=course).first()


def completed_score_waits(session_id) -> bool:
    """Whether the session has a ``Completed`` score still to be made due at its end (pending,
    no attempt set): what ``lti.grading.session_completed`` looks for on every end of a session,
    most of which (a session not launched from an LMS link) have none. One written-out statement
    (composed by the ORM, with the locking and the joins the score's handling needs, the check
    cost a web stop more CPU than the rest of its end); unlocked: the caller reads the row again,
    locked, when there is one."""
    field = LabSession._meta.pk
    params = [
        field.get_db_prep_value(field.to_python(session_id), connection),
        ActivityProgress.COMPLETED.value,
        Score.State.PENDING.value,
    ]
    with connection.cursor() as cursor:
        cursor.execute(_completed_score_sql(), params)
        return cursor.fetchone() is not None


@cache
def _completed_score_sql() -> str:
    """Parameters: the session, the ``Completed`` progress, the pending state."""
    s = lambda name: column(Score, name, "s")  # noqa: E731
    return (
        f"SELECT 1 FROM {table(Score, 's')} WHERE {s('session')} = %s AND {s('activity_progress')} = %s"
        f" AND {s('state')} = %s AND {s('next_attempt_at')} IS NULL LIMIT 1"
    )
