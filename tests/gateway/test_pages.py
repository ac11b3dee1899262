"""The endpoint's pages through the ASGI application: a student sees the URL and gets a key shown
once; the instructor sets the endpoint and sees tokens per student; nobody else sees either, and
an instructor of one course never sees another's."""

from __future__ import annotations

import pytest
from django.contrib.auth import get_user_model

from labs.models import CourseEndpoint, EndpointKey, Enrollment, InstitutionRole
from labs.selectors.gateway import KEY_PATTERN
from labs.services.gateway import token_usage_record
from tests.asgi_client import AsgiClient
from tests.factories import CourseFactory, EnrollmentFactory, InstitutionFactory, UserFactory


def test_a_student_gets_a_key_shown_once_and_the_url_and_curl(class_endpoint):
    student, course = class_endpoint["students"][1], class_endpoint["course"]
    client = AsgiClient(user=student)
    home = client.get("/")
    assert f"/courses/{course.pk}/model/" in home.text
    page = client.get(f"/courses/{course.pk}/model/")
    assert page.status_code == 200
    assert f"http://testserver/gateway/{class_endpoint['endpoint'].pk}/v1" in page.text
    assert "You have no key yet." in page.text
    issued = client.post(f"/courses/{course.pk}/model/", {"action": "new"})
    assert issued.status_code == 200
    assert issued.headers["cache-control"] == "no-store"
    keys = KEY_PATTERN.findall(issued.text)
    assert len(set(keys)) == 1
    key = "npk_{}_{}".format(*keys[0])
    assert f"Bearer {key}" in issued.text  # the curl example carries it
    again = client.get(f"/courses/{course.pk}/model/")
    assert key not in again.text and keys[0][0] in again.text  # its id only, after
    assert EndpointKey.objects.filter(enrollment__user=student, revoked_at__isnull=True).count() == 1
    client.post(f"/courses/{course.pk}/model/", {"action": "revoke"})
    assert not EndpointKey.objects.filter(enrollment__user=student, revoked_at__isnull=True).exists()


def test_the_student_page_is_only_for_the_courses_members(class_endpoint):
    course = class_endpoint["course"]
    outsider = EnrollmentFactory(course__institution=course.institution).user
    assert AsgiClient(user=outsider).get(f"/courses/{course.pk}/model/").status_code == 404
    assert AsgiClient(user=outsider).post(f"/courses/{course.pk}/model/", {"action": "new"}).status_code == 404
    assert not EndpointKey.objects.filter(enrollment__user=outsider).exists()
    assert AsgiClient().get(f"/courses/{course.pk}/model/").status_code == 302  # to the login page


def test_the_instructor_sets_the_endpoint_and_sees_tokens_per_student(class_endpoint):
    course, instructor, endpoint = class_endpoint["course"], class_endpoint["instructor"], class_endpoint["endpoint"]
    for student, tokens in zip(class_endpoint["students"], (30, 7), strict=True):
        token_usage_record(
            course_id=course.pk,
            student_id=student.pk,
            institution_id=course.institution_id,
            prompt_tokens=tokens,
            completion_tokens=1,
        )
    client = AsgiClient(user=instructor)
    page = client.get(f"/courses/{course.pk}/endpoint/")
    assert page.status_code == 200
    assert 'data-field="week">31<' in page.text and 'data-field="term">8<' in page.text
    values = {
        "template": class_endpoint["template"].pk,
        "served_model_name": "qwen3-8b",
        "upstream_url": "http://vllm.test:8000/v1/",
        "requests_per_minute": "30",
        "weekly_tokens_per_student": "50000",
        "enabled": "on",
    }
    assert client.post(f"/courses/{course.pk}/endpoint/", values).status_code == 302
    endpoint.refresh_from_db()
    assert (endpoint.served_model_name, endpoint.upstream_url, endpoint.requests_per_minute) == (
        "qwen3-8b",
        "http://vllm.test:8000/v1",
        30,
    )
    assert endpoint.weekly_tokens_per_student == 50000


@pytest.mark.parametrize(
    "change, message",
    [
        ({"requests_per_minute": "0"}, "Between 1 and 6000 requests a minute."),
        ({"upstream_url": "ftp://vllm.test/v1"}, "An http:// or https:// URL."),
        ({"template": "999999"}, "Select a valid choice."),
    ],
)
def test_a_wrong_value_is_refused_with_a_message_and_changes_nothing(class_endpoint, change, message):
    course, endpoint = class_endpoint["course"], class_endpoint["endpoint"]
    values = {
        "template": class_endpoint["template"].pk,
        "served_model_name": "other",
        "upstream_url": "http://vllm.test:8000/v1",
        "requests_per_minute": "30",
        "weekly_tokens_per_student": "",
        "enabled": "on",
        **change,
    }
    response = AsgiClient(user=class_endpoint["instructor"]).post(f"/courses/{course.pk}/endpoint/", values)
    assert response.status_code == 200
    assert message in response.text
    assert CourseEndpoint.objects.get(pk=endpoint.pk).served_model_name == "fake-model"


def test_a_jupyter_template_cannot_serve_the_endpoint(class_endpoint):
    course = class_endpoint["course"]
    jupyter = course.templates.first()
    values = {
        "template": jupyter.pk,
        "served_model_name": "x",
        "upstream_url": "http://vllm.test:8000/v1",
        "requests_per_minute": "30",
        "weekly_tokens_per_student": "",
        "enabled": "on",
    }
    response = AsgiClient(user=class_endpoint["instructor"]).post(f"/courses/{course.pk}/endpoint/", values)
    assert response.status_code == 200
    assert CourseEndpoint.objects.get(course=course).template_id == class_endpoint["template"].pk


def test_who_may_see_and_change_the_instructors_page(class_endpoint):
    course = class_endpoint["course"]
    path = f"/courses/{course.pk}/endpoint/"
    values = {
        "template": class_endpoint["template"].pk,
        "served_model_name": "changed",
        "upstream_url": "http://x.test/v1",
        "requests_per_minute": "5",
        "enabled": "on",
    }
    assistant = UserFactory()
    Enrollment.objects.create(user=assistant, course=course, role=Enrollment.Role.ASSISTANT)
    operator = UserFactory()
    InstitutionRole.objects.create(user=operator, institution=course.institution, role=InstitutionRole.Role.OPERATOR)
    elsewhere = UserFactory()
    InstitutionRole.objects.create(user=elsewhere, institution=InstitutionFactory(), role=InstitutionRole.Role.OPERATOR)
    other_instructor = UserFactory()
    Enrollment.objects.create(
        user=other_instructor, course=CourseFactory(institution=course.institution), role=Enrollment.Role.INSTRUCTOR
    )
    assert AsgiClient(user=class_endpoint["students"][0]).get(path).status_code == 404
    assert AsgiClient(user=other_instructor).get(path).status_code == 404
    assert AsgiClient(user=elsewhere).get(path).status_code == 404
    assert AsgiClient(user=assistant).get(path).status_code == 200
    assert AsgiClient(user=operator).get(path).status_code == 200
    for user in (assistant, class_endpoint["students"][0], other_instructor, elsewhere):
        assert AsgiClient(user=user).post(path, values).status_code in (403, 404)
    assert CourseEndpoint.objects.get(course=course).served_model_name == "fake-model"


def test_the_tokens_table_lists_only_the_courses_students(class_endpoint):
    course = class_endpoint["course"]
    other = EnrollmentFactory(course__institution=course.institution)
    token_usage_record(
        course_id=other.course_id,
        student_id=other.user_id,
        institution_id=course.institution_id,
        prompt_tokens=5,
        completion_tokens=5,
    )
    page = AsgiClient(user=class_endpoint["instructor"]).get(f"/courses/{course.pk}/endpoint/")
    assert other.user.username not in page.text
    assert get_user_model().objects.filter(pk=class_endpoint["students"][0].pk).get().username in page.text
