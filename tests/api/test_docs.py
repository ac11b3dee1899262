"""The schema and the docs page: served without a token, a valid OpenAPI document, and the page
works under the portal's CSP."""

from __future__ import annotations

import re

from django.test import Client
from openapi_spec_validator import validate


def test_the_schema_describes_every_endpoint(db):
    response = Client().get("/api/v1/schema/", HTTP_ACCEPT="application/vnd.oai.openapi+json")
    assert response.status_code == 200
    schema = response.json()
    assert {"/api/v1/courses/", "/api/v1/courses/{course_id}/roster/", "/api/v1/sessions/{session_id}/progress"} <= set(
        schema["paths"]
    )
    assert schema["components"]["securitySchemes"]["institutionToken"]["scheme"] == "bearer"
    assert "412" in schema["paths"]["/api/v1/courses/{course_id}/"]["patch"]["responses"]


def test_the_schema_is_a_valid_openapi_document(db):
    """Every default fits its own schema, every $ref resolves, every keyword is one the version has."""
    schema = Client().get("/api/v1/schema/?format=json").json()
    validate(schema)


def test_each_201_links_to_the_operations_on_what_it_made(db):
    paths = Client().get("/api/v1/schema/?format=json").json()["paths"]
    links = paths["/api/v1/courses/"]["post"]["responses"]["201"]["links"]
    assert links["courses_retrieve"] == {"operationId": "courses_retrieve", "parameters": {"course_id": "$response.body#/id"}}
    assert {"courses_quota_update", "courses_roster_update", "courses_usage_retrieve"} <= set(links)
    sessions = paths["/api/v1/sessions/"]["post"]["responses"]["201"]["links"]
    assert set(sessions) == {"sessions_retrieve", "sessions_progress_retrieve", "sessions_stop_create"}
    assert "webhooks_secret_create" in paths["/api/v1/webhooks/"]["post"]["responses"]["201"]["links"]


def test_the_docs_page_has_no_inline_script_or_style_and_its_files_load(db):
    client = Client()
    page = client.get("/api/v1/docs/")
    assert page.status_code == 200
    policy = page["Content-Security-Policy"]
    assert "script-src 'self'" in policy and "style-src 'self'" in policy
    html = page.content.decode()
    assert "<style" not in html
    scripts = re.findall(r"<script([^>]*)>", html)
    assert scripts and all("src=" in attributes for attributes in scripts)
    for url in re.findall(r'(?:src|href)="([^"]+)"', html):
        url = url.replace("&amp;", "&")
        loaded = client.get(url)
        assert loaded.status_code == 200, url
    init = client.get("/api/v1/docs/?script=")
    assert init["Content-Type"].startswith("application/javascript")
    assert "/api/v1/schema/" in init.content.decode()
