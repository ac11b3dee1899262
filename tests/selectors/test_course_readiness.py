"""``course_readiness``: the checklist's conditions are the ones ``session_launch`` refuses on."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from labs.models import Course, CourseQuota, Enrollment
from labs.selectors.courses import course_readiness
from labs.services.sessions import LaunchRefused, session_launch


def test_a_course_with_quota_template_student_and_no_archive_is_ready_and_takes_a_launch(world):
    course, student = world["course"], world["students"][0]
    readiness = course_readiness(course=course)
    assert readiness.ready and readiness.missing == [] and readiness.in_dates
    assert session_launch(student=student, course=course, template=world["small"]) is not None


def test_without_a_quota_the_quota_step_is_missing_and_a_launch_is_refused(world):
    course = world["course"]
    CourseQuota.objects.filter(course=course).delete()
    course = Course.objects.get(pk=course.pk)
    assert course_readiness(course=course).missing == ["quota"]
    with pytest.raises(LaunchRefused):
        session_launch(student=world["students"][0], course=course, template=world["small"])


def test_without_a_template_offered_the_templates_step_is_missing_and_a_launch_is_refused(world):
    course = world["course"]
    course.templates.clear()
    assert course_readiness(course=course).missing == ["templates"]
    with pytest.raises(LaunchRefused):
        session_launch(student=world["students"][0], course=course, template=world["small"])


def test_without_a_student_the_students_step_is_missing_and_nobody_may_launch(world):
    course = world["course"]
    Enrollment.objects.filter(course=course, role=Enrollment.Role.STUDENT).delete()
    assert course_readiness(course=course).missing == ["students"]
    with pytest.raises(LaunchRefused):
        session_launch(student=world["students"][0], course=course, template=world["small"])


def test_an_instructor_alone_does_not_count_as_a_student(world):
    course = world["course"]
    Enrollment.objects.filter(course=course, role=Enrollment.Role.STUDENT).delete()
    assert Enrollment.objects.filter(course=course).exists()
    assert not course_readiness(course=course).students


def test_an_archived_course_misses_the_open_step_and_refuses_a_launch(world):
    course = world["course"]
    Course.objects.filter(pk=course.pk).update(archived_at=timezone.now())
    course = Course.objects.get(pk=course.pk)
    assert course_readiness(course=course).missing == ["open"]
    with pytest.raises(LaunchRefused):
        session_launch(student=world["students"][0], course=course, template=world["small"])


def test_a_course_missing_everything_lists_every_step_in_setup_order(world):
    course = world["course"]
    CourseQuota.objects.filter(course=course).delete()
    course.templates.clear()
    Enrollment.objects.filter(course=course, role=Enrollment.Role.STUDENT).delete()
    Course.objects.filter(pk=course.pk).update(archived_at=timezone.now())
    readiness = course_readiness(course=Course.objects.get(pk=course.pk))
    assert readiness.missing == ["quota", "templates", "students", "open"] and not readiness.ready


@pytest.mark.parametrize(
    ("starts", "ends", "inside"),
    [(None, None, True), (-7, 7, True), (0, 0, True), (1, None, False), (None, -1, False), (-30, -1, False)],
)
def test_the_dates_are_advice_a_launch_outside_them_is_still_accepted(world, starts, ends, inside):
    course, today = world["course"], timezone.localdate()
    course.starts_on = None if starts is None else today + timedelta(days=starts)
    course.ends_on = None if ends is None else today + timedelta(days=ends)
    course.save(update_fields=["starts_on", "ends_on"])
    readiness = course_readiness(course=course)
    assert readiness.in_dates is inside and readiness.ready
    assert session_launch(student=world["students"][0], course=course, template=world["small"]) is not None
