"""Every endpoint but /healthz needs the bearer token; the token never reaches the log."""

from __future__ import annotations

import logging

import pytest

from tests.agent.helpers import NODE, TOKEN, call

PROTECTED = [
    ("GET", "/v1/inventory"),
    ("GET", "/v1/instances"),
    ("POST", "/v1/instances"),
    ("DELETE", "/v1/instances/pod-1"),
    ("POST", "/v1/instances/pod-1/demand"),
    ("GET", "/metrics"),
    ("GET", "/no/such/path"),
]


def test_healthz_answers_without_a_token(agent):
    response = call(agent, "GET", "/healthz", token=None)

    assert response.status == 200
    assert response.json() == {"ok": True, "node": NODE, "driver": "simulated"}


@pytest.mark.parametrize("method, path", PROTECTED)
def test_a_request_without_a_token_is_401(agent, method, path):
    response = call(agent, method, path, token=None)

    assert response.status == 401
    assert response.json() == {"error": "missing or wrong bearer token"}
    assert response.headers["WWW-Authenticate"] == "Bearer"


@pytest.mark.parametrize("method, path", PROTECTED)
def test_a_request_with_a_wrong_token_is_401(agent, method, path):
    assert call(agent, method, path, token=TOKEN + "x").status == 401
    assert call(agent, method, path, token=TOKEN[:-1]).status == 401


@pytest.mark.parametrize("authorization", [f"Basic {TOKEN}", TOKEN, f"Bearer{TOKEN}", "Bearer ", "Bearer tök"])
def test_other_authorization_forms_are_401(agent, authorization):
    response = call(agent, "GET", "/v1/inventory", token=None, headers={"Authorization": authorization})

    assert response.status == 401


def test_the_right_token_is_accepted_with_any_scheme_case(agent):
    response = call(agent, "GET", "/v1/inventory", token=None, headers={"Authorization": f"bearer {TOKEN}"})

    assert response.status == 200


def test_requests_are_logged_without_the_token(agent, caplog):
    with caplog.at_level(logging.INFO, logger="nodeagent"):
        call(agent, "GET", "/v1/inventory?x=1")
        call(agent, "GET", "/v1/inventory", token="wrong-token")

    assert "GET /v1/inventory 200" in caplog.text
    assert "GET /v1/inventory 401" in caplog.text
    assert TOKEN not in caplog.text
    assert "wrong-token" not in caplog.text
