"""Reads of courses for the dashboard and the instructor page, scoped to the user."""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache, lru_cache

from django.db import connection
from django.db.models import Count, Q, QuerySet, Sum
from django.utils import timezone

from labs.models import Allocation, Course, CourseQuota, Enrollment, InstitutionRole, LabTemplate
from labs.selectors.rows import Conversion, column, conversion, converted, marks, table


@dataclass(frozen=True)
class QuotaUse:
    core_percent: int
    memory_mib: int
    instances: int


def enrollments_of_user(*, user) -> list[Enrollment]:
    """The user's enrolments with course, quota and allowed templates loaded (the dashboard's).

    Two statements written out (names from the models), not composed: the ORM's
    ``select_related`` and its prefetch of the courses' templates were a tenth of the web's
    CPU under ``make load``, every dashboard load. The objects are the ORM's own
    (``Model.from_db``, related objects and the templates cached as ``select_related`` and
    ``prefetch_related`` leave them): ``e.course.quota`` and ``e.course.templates.all`` cost no query.
    """
    db = connection.alias
    (e_names, c_names, q_names), plan = _enrollment_layout()
    e_end, c_end = len(e_names), len(e_names) + len(c_names)
    q_pk = q_names.index(CourseQuota._meta.pk.attname)
    with connection.cursor() as cursor:
        cursor.execute(_enrollments_sql(), [user.pk])
        rows = list(converted(cursor.fetchall(), plan))
    found = []
    courses: dict[int, Course] = {}
    for row in rows:
        e = Enrollment.from_db(db, e_names, row[:e_end])
        c = Course.from_db(db, c_names, row[e_end:c_end])
        quota_values = row[c_end:]
        q = None  # the left join found no quota: all its columns are NULL, its key too
        if quota_values[q_pk] is not None:
            q = CourseQuota.from_db(db, q_names, quota_values)
        Course.quota.related.set_cached_value(c, q)
        if q is not None:
            CourseQuota._meta.get_field("course").set_cached_value(q, c)
        Enrollment._meta.get_field("course").set_cached_value(e, c)
        Enrollment._meta.get_field("user").set_cached_value(e, user)
        courses[c.pk] = c
        found.append(e)
    offered: dict[int, list[LabTemplate]] = {pk: [] for pk in courses}
    if courses:
        t_names, t_plan = _template_layout()
        with connection.cursor() as cursor:
            cursor.execute(_templates_sql(len(courses)), list(courses))
            for course_id, *values in converted(cursor.fetchall(), t_plan):
                offered[course_id].append(LabTemplate.from_db(db, t_names, values))
    for pk, c in courses.items():
        # As prefetch_related leaves it: the manager's all() is this, already read.
        templates = LabTemplate.objects.all()
        templates._result_cache, templates._prefetch_done = offered[pk], True
        c._prefetched_objects_cache = {Course.templates.field.name: templates}
    # Sorted here, not by the database: as the ORM's read was.
    return sorted(found, key=lambda e: (e.course.code, e.pk))


@cache
def _enrollment_layout() -> tuple[tuple[list[str], list[str], list[str]], Conversion]:
    """The columns of ``_enrollments_sql`` (attribute names of the enrolment's, the course's and
    the quota's fields) and how they are converted: worked out once per process."""
    metas = (Enrollment._meta, Course._meta, CourseQuota._meta)
    names = tuple([f.attname for f in meta.concrete_fields] for meta in metas)
    return names, conversion([f for meta in metas for f in meta.concrete_fields])


@cache
def _template_layout() -> tuple[list[str], Conversion]:
    """The template columns of ``_templates_sql`` (after the course id) and how the row is converted."""
    fields = LabTemplate._meta.concrete_fields
    return [f.attname for f in fields], conversion([None, *fields])


@cache
def _enrollments_sql() -> str:
    """The user's enrolments, each with its course and the course's quota (if any). Parameter: the user."""
    cols = lambda model, alias: ", ".join(column(model, f.name, alias) for f in model._meta.concrete_fields)  # noqa: E731
    return (
        f"SELECT {cols(Enrollment, 'e')}, {cols(Course, 'c')}, {cols(CourseQuota, 'q')}"
        f" FROM {table(Enrollment, 'e')}"
        f" INNER JOIN {table(Course, 'c')} ON {column(Course, 'id', 'c')} = {column(Enrollment, 'course', 'e')}"
        f" LEFT OUTER JOIN {table(CourseQuota, 'q')} ON {column(CourseQuota, 'course', 'q')} = {column(Course, 'id', 'c')}"
        f" WHERE {column(Enrollment, 'user', 'e')} = %s"
    )


@lru_cache(maxsize=32)  # one per number of courses
def _templates_sql(courses: int) -> str:
    """The templates the courses offer, as ``(course id, template's columns...)``, cheapest first.
    Parameters: the courses."""
    quote = connection.ops.quote_name
    offered = Course._meta.get_field("templates")
    link_course, link_template = quote(offered.m2m_column_name()), quote(offered.m2m_reverse_name())
    cols = ", ".join(column(LabTemplate, f.name, "t") for f in LabTemplate._meta.concrete_fields)
    t = lambda name: column(LabTemplate, name, "t")  # noqa: E731
    return (
        f"SELECT o.{link_course}, {cols} FROM {table(LabTemplate, 't')}"
        f" INNER JOIN {quote(offered.m2m_db_table())} o ON o.{link_template} = {t('id')}"
        f" WHERE o.{link_course} IN ({marks(courses)})"
        f" ORDER BY {t('core_percent')}, {t('name')}"
    )


def course_quota_use(*, course: Course) -> QuotaUse:
    totals = Allocation.objects.filter(course=course, released_at__isnull=True).aggregate(
        core=Sum("core_percent"), memory=Sum("memory_mib"), instances=Count("id")
    )
    return QuotaUse(totals["core"] or 0, totals["memory"] or 0, totals["instances"])


@dataclass(frozen=True)
class CourseReadiness:
    """What a course lacks before its students can launch, in the order an instructor sets it up.

    ``quota``, ``templates`` and ``open`` are the course's own conditions ``session_launch``
    refuses a launch on (no quota, the template not offered, archived); ``students`` is the one
    it refuses a visitor on (not enrolled). ``in_dates`` is advice only: a launch before the
    first day or after the last is accepted (a course is tried out before its term).
    """

    quota: bool
    templates: bool
    students: bool
    open: bool
    in_dates: bool

    STEPS = ("quota", "templates", "students", "open")

    @property
    def missing(self) -> list[str]:
        """The unmet steps, in setup order: what the checklist shows."""
        return [step for step in self.STEPS if not getattr(self, step)]

    @property
    def ready(self) -> bool:
        return not self.missing


def course_readiness(*, course: Course) -> CourseReadiness:
    """Whether ``course`` can take a launch, step by step (see ``CourseReadiness``). Three queries."""
    today = timezone.localdate()
    return CourseReadiness(
        quota=CourseQuota.objects.filter(course=course).exists(),
        templates=course.templates.exists(),
        students=course.enrollments.filter(role=Enrollment.Role.STUDENT).exists(),
        open=course.archived_at is None,
        in_dates=(course.starts_on is None or course.starts_on <= today) and (course.ends_on is None or today <= course.ends_on),
    )


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
