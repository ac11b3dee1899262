"""The dashboard's enrolments: the same objects the ORM's select_related and prefetch gave, in two queries."""

from __future__ import annotations

import pytest
from django.db.models import Prefetch

from labs.models import Course, Enrollment, LabTemplate
from labs.selectors.courses import enrollments_of_user
from tests.factories import CourseFactory as MakeCourse
from tests.factories import EnrollmentFactory, TemplateFactory, UserFactory, course_with_students

pytestmark = pytest.mark.django_db


def orm_read(user) -> list[Enrollment]:
    """What enrollments_of_user read before it was written out."""
    return sorted(
        Enrollment.objects.filter(user=user)
        .select_related("course__quota")
        .prefetch_related(Prefetch("course__templates", queryset=LabTemplate.objects.order_by("core_percent", "name")))
        .order_by(),
        key=lambda e: (e.course.code, e.pk),
    )


def fields_of(template: LabTemplate) -> list[tuple]:
    return [(f.attname, getattr(template, f.attname)) for f in LabTemplate._meta.concrete_fields]


def shown(enrollments: list[Enrollment]) -> list[tuple]:
    """Everything of them the dashboard can read, as plain values."""
    rows = []
    for e in enrollments:
        quota = getattr(e.course, "quota", None)
        rows.append(
            (
                [(f.attname, getattr(e, f.attname)) for f in Enrollment._meta.concrete_fields],
                [(f.attname, getattr(e.course, f.attname)) for f in Course._meta.concrete_fields],
                None if quota is None else [(f.attname, getattr(quota, f.attname)) for f in quota._meta.concrete_fields],
                [fields_of(t) for t in e.course.templates.all()],
                e.user_id,
            )
        )
    return rows


def test_a_student_and_teacher_s_enrolments_are_read_whole_in_two_queries(django_assert_num_queries):
    course, templates, students, instructor = course_with_students(2, code="AI101")
    other = MakeCourse(institution=course.institution, code="AI050")  # no quota, no templates
    EnrollmentFactory(user=students[0], course=other, role=Enrollment.Role.STUDENT)
    third = MakeCourse(institution=course.institution, code="AI200")  # taught by the student, as an assistant
    third.templates.add(TemplateFactory(institution=course.institution, name="big", slug="big", core_percent=50))
    third.templates.add(templates[0])
    EnrollmentFactory(user=students[0], course=third, role=Enrollment.Role.ASSISTANT)

    with django_assert_num_queries(2):
        read = enrollments_of_user(user=students[0])
        values = shown(read)  # the course, its quota, its templates: nothing more is read

    assert [e.course.code for e in read] == ["AI050", "AI101", "AI200"]
    assert values == shown(orm_read(students[0]))
    assert [t.name for t in read[2].course.templates.all()] == ["small", "big"]  # cheapest first
    assert getattr(read[0].course, "quota", None) is None and read[1].course.quota.course is read[1].course


def test_someone_enrolled_nowhere_costs_one_query(django_assert_num_queries):
    course_with_students(1)
    nobody = UserFactory(username="nobody")
    with django_assert_num_queries(1):
        assert enrollments_of_user(user=nobody) == []
