"""Who may scrape /metrics: the bearer of METRICS_TOKEN; with no token, nobody unless DEBUG is on."""

from __future__ import annotations

import pytest
from django.test import Client, override_settings

TOKEN = "s3cret-metrics-token"


def get(**headers):
    return Client().get("/metrics", **headers)


@pytest.fixture
def token(db):
    with override_settings(METRICS_TOKEN=TOKEN, DEBUG=False):
        yield TOKEN


def test_a_scrape_with_the_token_gets_the_metrics(token):
    response = get(HTTP_AUTHORIZATION=f"Bearer {token}")

    assert response.status_code == 200
    assert response["Content-Type"].startswith("text/plain; version=0.0.4")
    assert b"# TYPE npu_lab_sessions gauge" in response.content


def test_the_bearer_scheme_is_not_case_sensitive(token):
    assert get(HTTP_AUTHORIZATION=f"bearer {token}").status_code == 200


@pytest.mark.parametrize("authorization", [None, "", "Bearer", "Bearer wrong-token", f"Basic {TOKEN}", TOKEN])
def test_a_scrape_without_the_right_token_is_unauthorized(token, authorization):
    response = get(**({} if authorization is None else {"HTTP_AUTHORIZATION": authorization}))

    assert response.status_code == 401
    assert response["WWW-Authenticate"].startswith("Bearer")
    assert b"npu_lab" not in response.content


def test_the_token_is_needed_even_under_debug(db):
    with override_settings(METRICS_TOKEN=TOKEN, DEBUG=True):
        assert get().status_code == 401


def test_without_a_token_outside_debug_the_endpoint_is_closed_and_says_how_to_open_it(db):
    with override_settings(METRICS_TOKEN="", DEBUG=False):
        response = get(HTTP_AUTHORIZATION="Bearer anything")

    assert response.status_code == 403
    assert b"METRICS_TOKEN" in response.content
    assert b"npu_lab" not in response.content


def test_without_a_token_under_debug_the_endpoint_is_open(db):
    with override_settings(METRICS_TOKEN="", DEBUG=True):
        response = get()

    assert response.status_code == 200
    assert b"npu_lab_sessions" in response.content


def test_only_get_is_allowed(token):
    assert Client().post("/metrics", HTTP_AUTHORIZATION=f"Bearer {token}").status_code == 405
