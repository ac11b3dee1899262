"""Every 201 says where the new object is (Location), and the schema says that it does."""

from __future__ import annotations

from django.test import Client

from tests.api.test_sessions import launch_body


def test_a_201_carries_the_location_of_what_was_made(api, world):
    bodies = {
        "/api/v1/courses/": {"code": "AI201", "title": "Deep learning", "term": "2027 Spring"},
        "/api/v1/sessions/": launch_body(world),
        "/api/v1/webhooks/": {"url": "https://lms.example.edu/h", "event_types": ["session.ended"]},
    }
    for url, body in bodies.items():
        made = api.call("POST", url, body)
        assert made.status_code == 201, made.content
        assert made["Location"] == f"http://testserver{url}{made.json()['id']}/"
        again = api.call("GET", made["Location"])
        assert again.status_code == 200 and again.json()["id"] == made.json()["id"]


def test_an_offer_made_says_where_it_is_and_reads_back_there(api, world):
    course, template = world["course"], world["medium"]
    course.templates.remove(template)

    made = api.call("POST", f"/api/v1/courses/{course.pk}/templates/", {"template": template.slug})

    assert made.status_code == 201, made.content
    assert made["Location"] == f"http://testserver/api/v1/courses/{course.pk}/templates/{template.slug}/"
    again = api.call("GET", made["Location"])
    assert again.status_code == 200 and again.json()["id"] == template.pk
    assert api.call("DELETE", made["Location"]).status_code == 204
    assert api.call("GET", made["Location"]).status_code == 404


def test_the_schema_declares_location_on_every_201(db):
    paths = Client().get("/api/v1/schema/?format=json").json()["paths"]
    created = {
        (method, path): operation["responses"]["201"]
        for path, item in paths.items()
        for method, operation in item.items()
        if "201" in operation["responses"]
    }
    assert set(created) == {
        ("post", "/api/v1/courses/"),
        ("post", "/api/v1/courses/{course_id}/templates/"),
        ("post", "/api/v1/sessions/"),
        ("post", "/api/v1/webhooks/"),
    }
    for response in created.values():
        assert response["headers"]["Location"]["required"] is True
        assert response["headers"]["Location"]["schema"] == {"type": "string", "format": "uri"}
