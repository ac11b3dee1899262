"""Offering a catalogue template in a course through the API (as the console's "Offer it" and
"Stop offering" do), through the ASGI application: scoped to the token's institution,
idempotent, and bad input refused with a clear message and nothing changed."""

from __future__ import annotations

import pytest
from django.utils import timezone

from labs.models import AuditEvent, LabTemplate
from tests.asgi_client import AsgiClient
from tests.factories import TemplateFactory

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def lms(world, make_token):
    client = AsgiClient()
    token = make_token(world["course"].institution)

    def call(method: str, path: str, body=None, token_: str | None = None):
        headers = {"Authorization": f"Bearer {token_ or token}"}
        return client.request(method, f"/api/v1/{path}", headers=headers, json=body)

    return call


@pytest.fixture
def big(world) -> LabTemplate:
    """A catalogue template the course does not offer yet."""
    return TemplateFactory(institution=world["course"].institution, name="big", slug="big", core_percent=50, memory_mib=32768)


def offered(course) -> set[str]:
    return set(course.templates.values_list("slug", flat=True))


def test_offer_by_slug_then_again_then_withdraw(world, lms, big):
    course = world["course"]
    response = lms("POST", f"courses/{course.pk}/templates/", {"template": "big"})
    assert response.status_code == 201, response.text
    assert response.json()["slug"] == "big" and response.json()["name"] == "big"
    assert "big" in offered(course)
    assert AuditEvent.objects.filter(action="template.offer", target__contains="big").count() == 1

    again = lms("POST", f"courses/{course.pk}/templates/", {"template": str(big.pk)})
    assert again.status_code == 200, again.text
    assert AuditEvent.objects.filter(action="template.offer", target__contains="big").count() == 1

    listed = lms("GET", f"courses/{course.pk}/templates/").json()["results"]
    assert "big" in {t["slug"] for t in listed}

    gone = lms("DELETE", f"courses/{course.pk}/templates/big/")
    assert gone.status_code == 204, gone.text
    assert "big" not in offered(course)
    assert lms("DELETE", f"courses/{course.pk}/templates/{big.pk}/").status_code == 204


def test_unknown_template_is_400_and_changes_nothing(world, lms):
    course = world["course"]
    before = offered(course)
    response = lms("POST", f"courses/{course.pk}/templates/", {"template": "no-such"})
    assert response.status_code == 400
    assert response.json()["error"]["fields"] == {"template": ["No such template in your institution."]}
    assert lms("POST", f"courses/{course.pk}/templates/", {}).status_code == 400
    assert lms("DELETE", f"courses/{course.pk}/templates/no-such/").status_code == 404
    assert offered(course) == before


def test_another_institutions_template_and_course_are_not_found(world, lms, make_token, elsewhere):
    course = world["course"]
    TemplateFactory(institution=elsewhere, name="theirs", slug="theirs")
    assert lms("POST", f"courses/{course.pk}/templates/", {"template": "theirs"}).status_code == 400
    other = make_token(elsewhere)
    assert lms("POST", f"courses/{course.pk}/templates/", {"template": "theirs"}, token_=other).status_code == 404
    assert lms("DELETE", f"courses/{course.pk}/templates/{world['small'].slug}/", token_=other).status_code == 404
    assert world["small"].slug in offered(course)


def test_refusals_are_409_with_the_reason(world, lms, big):
    course = world["course"]
    own = TemplateFactory(institution=course.institution, course=world["course"], name="own", slug="own")
    response = lms("POST", f"courses/{course.pk}/templates/", {"template": "own"})
    assert response.status_code == 409
    assert "catalogue templates" in response.json()["error"]["message"]
    assert own.slug not in offered(course)

    course.archived_at = timezone.now()
    course.save(update_fields=["archived_at"])
    response = lms("POST", f"courses/{course.pk}/templates/", {"template": "big"})
    assert response.status_code == 409
    assert response.json()["error"]["message"] == "This course is archived; unarchive it to change it."
    assert lms("DELETE", f"courses/{course.pk}/templates/{world['small'].slug}/").status_code == 409
    assert offered(course) == {world["small"].slug, world["medium"].slug}


def test_offering_needs_courses_write(world, make_token, big):
    def offer(scopes: list[str]):
        token = make_token(world["course"].institution, scopes=scopes)
        return AsgiClient().request(
            "POST",
            f"/api/v1/courses/{world['course'].pk}/templates/",
            headers={"Authorization": f"Bearer {token}"},
            json={"template": "big"},
        )

    assert offer(["templates:read"]).status_code == 403
    assert "big" not in offered(world["course"])
    assert offer(["courses:write"]).status_code == 201
    assert "big" in offered(world["course"])
