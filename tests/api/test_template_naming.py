"""A session names its template as the pages do (its name, `template_name`) next to the
identifier a launch takes (`template`, the slug), in the API and in webhook payloads."""

from __future__ import annotations

import pytest

from labs.models import LabSession
from tests.asgi_client import AsgiClient
from webhooks.payloads import session_data

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def session(world) -> LabSession:
    template = world["small"]
    template.name = "Small JupyterLab"
    template.save(update_fields=["name"])
    return LabSession.objects.create(
        student=world["students"][0], course=world["course"], template=template, state="running", secret="x"
    )


def test_a_session_names_its_template_as_the_pages_do(world, session, make_token):
    headers = {"Authorization": f"Bearer {make_token(world['course'].institution)}"}
    client = AsgiClient()
    detail = client.get(f"/api/v1/sessions/{session.pk}/", headers=headers).json()
    assert (detail["template"], detail["template_name"]) == (world["small"].slug, "Small JupyterLab")
    (listed,) = client.get("/api/v1/sessions/", headers=headers).json()["results"]
    assert listed["template_name"] == "Small JupyterLab"
    page = AsgiClient(user=world["instructor"]).get(f"/courses/{world['course'].pk}/")
    assert page.status_code == 200, page.status_code
    assert "Small JupyterLab" in page.text and world["small"].slug not in page.text


def test_a_webhook_payload_names_its_template_as_the_pages_do(session):
    data = session_data("session.started", session)
    assert (data["template"], data["template_name"]) == (session.template.slug, "Small JupyterLab")
