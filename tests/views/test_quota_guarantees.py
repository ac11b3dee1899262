"""The quota page shows what the other courses already guarantee, and refuses a guarantee that
cannot be kept beside them, naming the courses; with overcommit allowed it is saved and the page
says it is a priority, not a guarantee. Through the ASGI application, in English and Chinese."""

from __future__ import annotations

import re
from html import unescape

import pytest
from django.utils import translation

from labs.models import CourseQuota, InstitutionRole
from tests.asgi_client import AsgiClient
from tests.factories import CourseFactory, EnrollmentFactory

pytestmark = pytest.mark.django_db(transaction=True)  # the page is served in the ASGI handler's threads

LANGUAGES = ["en", "zh-hans"]
QUOTA = {
    "instance_count": "32",
    "core_percent": "320",
    "memory_mib": "128",
    "sessions_per_student": "1",
    "max_session_minutes": "90",
}


def t(language: str, text: str) -> str:
    with translation.override(language):
        return translation.gettext(text)


def text_of(html: str, testid: str) -> str:
    found = re.search(rf'data-testid="{testid}"[^>]*>(.*?)</(?:p|ul)>', html, re.S)
    assert found, f"no {testid} on the page"
    return " ".join(unescape(re.sub(r"<[^>]+>", " ", found.group(1))).split())


@pytest.fixture
def second_course(world):
    """AI101 (the world's course) guarantees the whole 8-card node; AI102 of the same institution has no quota yet."""
    ai101 = world["course"]
    ai101.code = "AI101"
    ai101.save(update_fields=["code"])
    course = CourseFactory(institution=ai101.institution, code="AI102")
    EnrollmentFactory(user=world["instructor"], course=course, role="instructor")
    InstitutionRole.objects.get_or_create(user=world["instructor"], institution=ai101.institution, role="instructor")
    return course


@pytest.mark.parametrize("language", LANGUAGES)
def test_the_page_shows_what_the_other_courses_guarantee_and_refuses_what_is_not_left(world, second_course, language):
    client = AsgiClient(user=world["instructor"], language=language)
    url = f"/courses/{second_course.pk}/quota/"

    page = client.get(url).text
    assert f'lang="{language}"' in page and t(language, "Quota") in page
    assert "128" in text_of(page, "held-cluster") and "800" in text_of(page, "held-cluster")
    assert "AI101" in text_of(page, "held-courses")

    refused = client.post(url, QUOTA)
    assert refused.status_code == 200
    field = refused.text[refused.text.index('id="id_instance_count"') :]
    error = unescape(re.search(r'<p class="error small" role="alert">(.*?)</p>', field, re.S).group(1))
    assert "AI101" in error and "128" in error
    assert not CourseQuota.objects.filter(course=second_course).exists()


@pytest.mark.parametrize("language", LANGUAGES)
def test_with_overcommit_allowed_the_value_is_saved_and_the_page_calls_it_a_priority(world, second_course, language):
    second_course.institution.allow_overcommit = True
    second_course.institution.save(update_fields=["allow_overcommit"])
    client = AsgiClient(user=world["instructor"], language=language)
    url = f"/courses/{second_course.pk}/quota/"

    assert client.post(url, QUOTA).status_code == 302
    assert CourseQuota.objects.get(course=second_course).instance_count == 32
    page = client.get(url).text
    assert text_of(page, "overcommit") == t(
        language,
        "This course's guarantee is more than the cluster holds beside the other courses' guarantees: it is a priority, "
        "not a guarantee. Your institution's operator allows that (overcommit).",
    )


def test_the_platform_operator_allows_overcommit_on_the_tenancy_page_and_the_institutions_operator_sees_it(world):
    from django.contrib.auth.models import Permission

    from tests.factories import UserFactory

    institution = world["course"].institution
    platform = UserFactory(username="platform")
    platform.user_permissions.add(Permission.objects.get(codename="operate_platform"))
    operator = UserFactory(username="op")
    InstitutionRole.objects.create(user=operator, institution=institution, role="operator")
    allotment = {"action": "allotment", "institution": str(institution.pk), "allot_instances": "200"}

    assert AsgiClient(user=operator).post("/ops/tenancy/", {**allotment, "allow_overcommit": "on"}).status_code == 403
    institution.refresh_from_db()
    assert not institution.allow_overcommit

    client = AsgiClient(user=platform)
    assert client.post("/ops/tenancy/", {**allotment, "allow_overcommit": "on"}).status_code == 302
    institution.refresh_from_db()
    assert institution.allow_overcommit and institution.allot_instances == 200
    page = AsgiClient(user=operator).get("/ops/tenancy/").text
    assert text_of(page, "overcommit") == "Overcommit allowed: guarantees past what the cluster holds are priorities."

    assert client.post("/ops/tenancy/", allotment).status_code == 302  # the box left unticked: off again
    institution.refresh_from_db()
    assert not institution.allow_overcommit
