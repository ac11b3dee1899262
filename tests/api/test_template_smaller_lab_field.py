"""The API shows whether a template offers a smaller lab while it waits (``offers_smaller_lab``),
through the ASGI application, in the catalogue, a course's list and one template, and the schema."""

from __future__ import annotations

import pytest

from tests.asgi_client import AsgiClient

pytestmark = pytest.mark.django_db(transaction=True)


def test_templates_say_whether_they_offer_a_smaller_lab(world, make_token):
    world["medium"].offers_smaller_lab = False
    world["medium"].save(update_fields=["offers_smaller_lab"])
    client = AsgiClient()
    headers = {"Authorization": f"Bearer {make_token(world['course'].institution)}"}
    course = world["course"].pk

    for path in ("templates/", f"courses/{course}/templates/"):
        answer = client.get(f"/api/v1/{path}", headers=headers)
        assert answer.status_code == 200, answer.text
        shown = {t["name"]: t["offers_smaller_lab"] for t in answer.json()["results"]}
        assert shown == {"small": True, "medium": False}, path
    one = client.get(f"/api/v1/courses/{course}/templates/{world['medium'].pk}/", headers=headers)
    assert one.status_code == 200 and one.json()["offers_smaller_lab"] is False

    schema = client.get("/api/v1/schema/?format=json")
    assert schema.status_code == 200, schema.text
    assert schema.json()["components"]["schemas"]["Template"]["properties"]["offers_smaller_lab"]["type"] == "boolean"
