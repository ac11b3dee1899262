"""The client's address for login lockouts: X-Forwarded-For is believed only as far as
TRUSTED_PROXY_COUNT proxies vouch for it."""

from __future__ import annotations

import pytest
from django.test import RequestFactory, override_settings

from portal.proxies import client_address

PEER = "10.0.0.2"


def address(proxies: int, forwarded: str | None) -> str | None:
    headers = {} if forwarded is None else {"HTTP_X_FORWARDED_FOR": forwarded}
    request = RequestFactory().get("/", REMOTE_ADDR=PEER, **headers)
    with override_settings(TRUSTED_PROXY_COUNT=proxies):
        return client_address(request)


@pytest.mark.parametrize(
    ("proxies", "forwarded", "expected"),
    [
        (0, None, PEER),
        (0, "203.0.113.5", PEER),  # no proxy trusted: the header is the client's own words
        (1, "203.0.113.5", "203.0.113.5"),
        (1, "198.51.100.1, 203.0.113.5", "203.0.113.5"),  # the client wrote the first entry
        (2, "198.51.100.1, 203.0.113.5, 10.0.0.9", "203.0.113.5"),
        (2, "203.0.113.5", PEER),  # fewer entries than proxies: not the configured path
        (1, None, PEER),
        (1, "", PEER),
        (1, "not-an-address", PEER),
        (1, "2001:db8::1", "2001:db8::1"),
    ],
)
def test_the_client_is_the_entry_the_outermost_trusted_proxy_appended(proxies, forwarded, expected):
    assert address(proxies, forwarded) == expected
