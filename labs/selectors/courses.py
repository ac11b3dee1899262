"""Reads of courses for the dashboard and the instructor page, scoped to the user."""

from __future__ import annotations

from dataclasses import dataclass

from django.db.models import Count, Prefetch, Sum

from labs.models import Allocation, Course, Enrollment, LabTemplate


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


def course_quota_use(*, course: Course) -> QuotaUse:
    totals = Allocation.objects.filter(course=course, released_at__isnull=True).aggregate(
        core=Sum("core_percent"), memory=Sum("memory_mib"), instances=Count("id")
    )
    return QuotaUse(totals["core"] or 0, totals["memory"] or 0, totals["instances"])


def is_course_staff(*, user, course_id: int) -> bool:
    """Whether the user may watch the course's sessions: its instructors and assistants, its
    institution's operators, superusers."""
    return (
        user.is_superuser
        or Enrollment.objects.filter(user=user, course_id=course_id, role__in=Enrollment.STAFF_ROLES).exists()
        or Course.objects.filter(pk=course_id, institution__roles__user=user, institution__roles__role="operator").exists()
    )
