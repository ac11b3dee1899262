"""Canvas's developer-key JSON at /lti/canvas.json, as Canvas's "Enter URL" reads it: the keys
Canvas requires, every URL absolute and on the portal, the keyset it names reachable."""

from __future__ import annotations

import pytest
import requests

from tests.asgi_client import AsgiClient

pytestmark = pytest.mark.django_db(transaction=True)

REQUIRED = {"title", "description", "oidc_initiation_url", "target_link_uri", "scopes", "extensions"}
DEEP_LINKING = {"link_selection", "assignment_selection"}


def urls_in(value) -> list[str]:
    if isinstance(value, dict):
        return [url for item in value.values() for url in urls_in(item)]
    if isinstance(value, list):
        return [url for item in value for url in urls_in(item)]
    return [value] if isinstance(value, str) and "://" in value else []


def check_configuration(config: dict, portal: str) -> None:
    assert REQUIRED <= set(config), REQUIRED - set(config)
    assert config["oidc_initiation_url"] == portal + "/lti/login/"
    assert config["target_link_uri"] == portal + "/lti/launch/"
    assert config["public_jwk_url"] == portal + "/lti/jwks/"
    assert "https://purl.imsglobal.org/spec/lti-ags/scope/score" in config["scopes"]
    assert "https://purl.imsglobal.org/spec/lti-nrps/scope/contextmembership.readonly" in config["scopes"]
    (canvas,) = [e for e in config["extensions"] if e["platform"] == "canvas.instructure.com"]
    assert canvas["privacy_level"] == "public"
    placements = {p["placement"]: p for p in canvas["settings"]["placements"]}
    assert DEEP_LINKING <= set(placements)
    for name in DEEP_LINKING:
        assert placements[name]["message_type"] == "LtiDeepLinkingRequest"
    assert isinstance(config["custom_fields"], dict)
    scoped = [url for url in urls_in(config) if not url.startswith("https://purl.imsglobal.org/")]
    assert scoped and all(url.startswith(portal + "/lti/") for url in scoped), scoped


def test_canvas_json_names_the_portals_own_addresses_through_the_asgi_application():
    response = AsgiClient().get("/lti/canvas.json")

    assert response.status_code == 200 and response.headers["Content-Type"] == "application/json"
    check_configuration(response.json(), "http://testserver")


def test_canvas_json_follows_the_host_the_portal_is_reached_on_and_its_keyset_is_there(live_server):
    response = requests.get(live_server.url + "/lti/canvas.json", timeout=10)

    assert response.status_code == 200
    config = response.json()
    check_configuration(config, live_server.url)
    keys = requests.get(config["public_jwk_url"], timeout=10).json()["keys"]
    assert keys and all(key["kty"] == "RSA" and key["kid"] for key in keys)
