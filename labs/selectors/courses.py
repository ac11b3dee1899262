"""Reads of courses for the dashboard and the instructor page, scoped to the user."""

from __future__ import annotations

from dataclasses import dataclass

from django.db.models import Count, Prefetch, Q, Sum

from labs.domain.states import TERMINAL
from labs.models import Allocation, Course, Enrollment, LabSession, LabTemplate


@dataclass(frozen=True)
class QuotaUse:
    core_percent: int
    memory_mib: int
    instances: int


def enrollments_of_user(*, user) -> list[Enrollment]:
    """The user's enrolments with course, quota and allowed templates loaded."""
    return list(
        Enrollment.objects.filter(user=user)
        .select_related("course__quota", "course__institution")
        .prefetch_related(Prefetch("course__templates", queryset=LabTemplate.objects.order_by("core_percent", "name")))
        .order_by("course__code")
    )


def course_for_staff(*, user, course_id: int) -> Course | None:
    """The course if ``user`` is its instructor or assistant (or a superuser)."""
    qs = Course.objects.select_related("quota", "institution")
    if not user.is_superuser:
        qs = qs.filter(enrollments__user=user, enrollments__role__in=Enrollment.STAFF_ROLES)
    return qs.filter(pk=course_id).first()


def course_quota_use(*, course: Course) -> QuotaUse:
    totals = Allocation.objects.filter(course=course, released_at__isnull=True).aggregate(
        core=Sum("core_percent"), memory=Sum("memory_mib"), instances=Count("id")
    )
    return QuotaUse(totals["core"] or 0, totals["memory"] or 0, totals["instances"])


def course_overview(*, course: Course) -> dict:
    counts = course.enrollments.aggregate(
        students=Count("id", filter=Q(role=Enrollment.Role.STUDENT)),
        staff=Count("id", filter=~Q(role=Enrollment.Role.STUDENT)),
    )
    sessions = list(
        LabSession.objects.filter(course=course)
        .exclude(state__in=TERMINAL)
        .select_related("student", "template", "course", "allocation__card__node")
        .order_by("created_at")
    )
    return {
        "course": course,
        "students": counts["students"],
        "staff": counts["staff"],
        "quota": getattr(course, "quota", None),
        "use": course_quota_use(course=course),
        "sessions": sessions,
    }


def is_course_staff(*, user, course_id: int) -> bool:
    return (
        user.is_superuser or Enrollment.objects.filter(user=user, course_id=course_id, role__in=Enrollment.STAFF_ROLES).exists()
    )
