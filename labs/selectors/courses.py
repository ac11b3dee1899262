"""Reads of courses for the dashboard and the instructor page, scoped to the user."""

from __future__ import annotations

from dataclasses import dataclass

from django.db.models import Count, Prefetch, Q, QuerySet, Sum

from labs.models import Allocation, Course, Enrollment, InstitutionRole, LabTemplate


@dataclass(frozen=True)
class QuotaUse:
    core_percent: int
    memory_mib: int
    instances: int


def enrollments_of_user(*, user) -> list[Enrollment]:
    """The user's enrolments with course, quota and allowed templates loaded."""
    # Sorted here, not by the database: under an ORDER BY Django hashes every selected column of the joins.
    return sorted(
        Enrollment.objects.filter(user=user)
        .select_related("course__quota")
        .prefetch_related(Prefetch("course__templates", queryset=LabTemplate.objects.order_by("core_percent", "name")))
        .order_by(),
        key=lambda e: (e.course.code, e.pk),
    )


def course_quota_use(*, course: Course) -> QuotaUse:
    totals = Allocation.objects.filter(course=course, released_at__isnull=True).aggregate(
        core=Sum("core_percent"), memory=Sum("memory_mib"), instances=Count("id")
    )
    return QuotaUse(totals["core"] or 0, totals["memory"] or 0, totals["instances"])


def staff_courses(*, user) -> QuerySet[Course]:
    """The courses whose sessions ``user`` may watch: those they teach or assist in, their
    institutions' courses for operators, every course for superusers. (What they may change in
    one of them is ``selectors.console.course_role``.)"""
    if user.is_superuser:
        return Course.objects.all()
    return Course.objects.filter(
        Q(enrollments__user=user, enrollments__role__in=Enrollment.STAFF_ROLES)
        | Q(institution__roles__user=user, institution__roles__role=InstitutionRole.Role.OPERATOR)
    ).distinct()


def is_course_staff(*, user, course_id: int) -> bool:
    """Whether the user may watch the course's sessions (see :func:`staff_courses`)."""
    return staff_courses(user=user).filter(pk=course_id).exists()
