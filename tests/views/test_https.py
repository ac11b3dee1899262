"""With HTTPS's settings on, over HTTP: plain requests are redirected (not the in-cluster metrics
scrape), HTTPS ones carry HSTS, and behind a proxy its X-Forwarded-Proto says which is which."""

from __future__ import annotations

import pytest
from django.test import Client, override_settings

HTTPS_ON = {
    "SECURE_SSL_REDIRECT": True,
    "SECURE_HSTS_SECONDS": 31536000,
    "SECURE_HSTS_INCLUDE_SUBDOMAINS": True,
    "SECURE_PROXY_SSL_HEADER": ("HTTP_X_FORWARDED_PROTO", "https"),
}
HSTS = "max-age=31536000; includeSubDomains"

pytestmark = pytest.mark.django_db


@override_settings(**HTTPS_ON)
def test_plain_http_is_redirected_to_https():
    response = Client().get("/accounts/login/?next=/")
    assert response.status_code == 301
    assert response["Location"] == "https://testserver/accounts/login/?next=/"


@override_settings(**HTTPS_ON)
def test_an_https_page_carries_hsts_and_is_served():
    response = Client().get("/accounts/login/", secure=True)
    assert response.status_code == 200
    assert response["Strict-Transport-Security"] == HSTS


@override_settings(**HTTPS_ON)
def test_the_proxys_x_forwarded_proto_marks_a_request_as_https():
    response = Client().get("/accounts/login/", HTTP_X_FORWARDED_PROTO="https")
    assert response.status_code == 200
    assert response["Strict-Transport-Security"] == HSTS


# The token in the decorator, not through pytest-django's ``settings`` fixture: the two undone
# in the wrong order would leave HTTPS_ON in force for every later test.
@override_settings(**HTTPS_ON, METRICS_TOKEN="scrape-token-0123456789")
def test_the_metrics_scrape_over_plain_http_is_not_redirected():
    response = Client().get("/metrics", HTTP_AUTHORIZATION="Bearer scrape-token-0123456789")
    assert response.status_code == 200  # answered over plain HTTP, not sent to https://
    assert "Strict-Transport-Security" not in response
