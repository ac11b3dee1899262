"""A course with a model endpoint in front of a fake OpenAI-compatible server, and keys."""

from __future__ import annotations

import pytest

from labs.devcluster.fake_openai import FakeOpenAI
from labs.models import CourseEndpoint, LabTemplate
from labs.services.gateway import endpoint_key_issue
from tests.factories import EnrollmentFactory, TemplateFactory, course_with_students


@pytest.fixture
def upstream():
    with FakeOpenAI(tokens=5, delay=0.0) as server:
        yield server


@pytest.fixture
def class_endpoint(transactional_db, upstream):
    """Course A with an endpoint on ``upstream``, its students, and a key for the first one."""
    course, _templates, students, instructor = course_with_students(2, code="LLM1")
    template = TemplateFactory(
        institution=course.institution,
        slug="vllm-8b",
        kind=LabTemplate.Kind.VLLM,
        model="Qwen/Qwen3-8B",
        core_percent=50,
        memory_mib=32768,
    )
    course.templates.add(template)
    endpoint = CourseEndpoint.objects.create(
        course=course,
        template=template,
        served_model_name="fake-model",
        upstream_url=upstream.url,
        requests_per_minute=100,
        weekly_tokens_per_student=None,
    )
    enrollment = students[0].enrollments.get(course=course)
    key = endpoint_key_issue(enrollment=enrollment)
    return {
        "course": course,
        "endpoint": endpoint,
        "students": students,
        "instructor": instructor,
        "enrollment": enrollment,
        "key": key,
        "template": template,
    }


def other_course_key(institution) -> str:
    """A key of a second course of the same institution, with an endpoint of its own."""
    enrollment = EnrollmentFactory(course__institution=institution, course__code="LLM2")
    template = TemplateFactory(
        institution=institution, slug="vllm-other", kind=LabTemplate.Kind.VLLM, core_percent=50, memory_mib=32768
    )
    CourseEndpoint.objects.create(
        course=enrollment.course, template=template, served_model_name="m", upstream_url="http://127.0.0.1:9/v1"
    )
    return endpoint_key_issue(enrollment=enrollment)


def chat(path_id: int, key: str | None, **extra) -> tuple[str, dict, dict]:
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    body = {"model": "fake-model", "messages": [{"role": "user", "content": "say five words"}], **extra}
    return f"/gateway/{path_id}/v1/chat/completions", headers, body
