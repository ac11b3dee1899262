"""The launch's one read: the student's enrolment in the course, locked, with its course, quota
and the template asked for (``labs.services.sessions.session_launch_of`` calls it in the launch's
transaction)."""

from __future__ import annotations

import itertools
from functools import cache

from django.db import connection

from labs.models import Course, CourseQuota, Enrollment, LabTemplate
from labs.selectors.rows import Conversion, column, conversion, converted, table


def enrollment_and_template_locked(*, student, course_id: int, template_id: int) -> tuple[Enrollment | None, LabTemplate | None]:
    """The student's enrolment in the course, locked until the transaction ends (as
    ``labs.services.sessions._enrollment_locked``), with its course and quota, and the template if it is one of the
    course's institution's: one statement written out (names from the models), not three
    composed by the ORM, whose composing cost the web process more than running them (issue 32:
    a class start is a burst of launches). The objects are the ORM's own (``Model.from_db``,
    related objects cached as ``select_related`` leaves them)."""
    db = connection.alias
    (e_names, c_names, q_names, t_names), plan = _launch_layout()
    ends = list(itertools.accumulate(len(names) for names in (e_names, c_names, q_names, t_names)))
    with connection.cursor() as cursor:
        cursor.execute(_launch_read_sql(), [template_id, student.pk, course_id])
        rows = list(converted(cursor.fetchall(), plan))
    if not rows:
        return None, None
    row = rows[0]
    enrollment = Enrollment.from_db(db, e_names, row[: ends[0]])
    course = Course.from_db(db, c_names, row[ends[0] : ends[1]])
    quota_values, template_values = row[ends[1] : ends[2]], row[ends[2] :]
    quota = None  # the left join found none: all its columns are NULL, its key too
    if quota_values[q_names.index(CourseQuota._meta.pk.attname)] is not None:
        quota = CourseQuota.from_db(db, q_names, quota_values)
        CourseQuota._meta.get_field("course").set_cached_value(quota, course)
    Course.quota.related.set_cached_value(course, quota)
    Enrollment._meta.get_field("course").set_cached_value(enrollment, course)
    Enrollment._meta.get_field("user").set_cached_value(enrollment, student)
    template = None
    if template_values[t_names.index(LabTemplate._meta.pk.attname)] is not None:
        template = LabTemplate.from_db(db, t_names, template_values)
    return enrollment, template


@cache
def _launch_layout() -> tuple[tuple[list[str], list[str], list[str], list[str]], Conversion]:
    """The columns of ``_launch_read_sql`` (attribute names of the enrolment's, the course's, the
    quota's and the template's fields) and how they are converted: worked out once per process."""
    metas = (Enrollment._meta, Course._meta, CourseQuota._meta, LabTemplate._meta)
    names = tuple([f.attname for f in meta.concrete_fields] for meta in metas)
    return names, conversion([f for meta in metas for f in meta.concrete_fields])  # type: ignore[return-value]


@cache
def _launch_read_sql() -> str:
    """The enrolment of a student in a course with its course, its quota (if any) and the
    template (if it is the course's institution's), the enrolment's row locked where the
    database locks rows (not SQLite, whose transactions here lock the whole database).
    Parameters: the template, the student, the course."""
    cols = lambda model, alias: ", ".join(column(model, f.name, alias) for f in model._meta.concrete_fields)  # noqa: E731
    lock = " FOR UPDATE OF e" if connection.features.has_select_for_update_of else ""
    return (
        f"SELECT {cols(Enrollment, 'e')}, {cols(Course, 'c')}, {cols(CourseQuota, 'q')}, {cols(LabTemplate, 't')}"
        f" FROM {table(Enrollment, 'e')}"
        f" INNER JOIN {table(Course, 'c')} ON {column(Course, 'id', 'c')} = {column(Enrollment, 'course', 'e')}"
        f" LEFT OUTER JOIN {table(CourseQuota, 'q')} ON {column(CourseQuota, 'course', 'q')} = {column(Course, 'id', 'c')}"
        f" LEFT OUTER JOIN {table(LabTemplate, 't')} ON {column(LabTemplate, 'id', 't')} = %s"
        f" AND {column(LabTemplate, 'institution', 't')} = {column(Course, 'institution', 'c')}"
        f" WHERE {column(Enrollment, 'user', 'e')} = %s AND {column(Enrollment, 'course', 'e')} = %s"
        f"{lock}"
    )
