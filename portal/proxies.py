"""The client's address behind a known number of reverse proxies.

Each proxy appends the address it received the request from to ``X-Forwarded-For``, so with
``TRUSTED_PROXY_COUNT`` proxies in front of the portal the client is the entry that many places
from the right; whatever is left of it came from the client and is not believed. With 0 (the
default) the header is ignored and the address is the connection's own (``REMOTE_ADDR``).
"""

from __future__ import annotations

import ipaddress

from django.conf import settings
from django.http import HttpRequest


def client_address(request: HttpRequest) -> str | None:
    """The client's IP address (django-axes' ``AXES_CLIENT_IP_CALLABLE``).

    ``REMOTE_ADDR`` when no proxy is trusted, or when the header has fewer entries than trusted
    proxies or its entry is not an IP address (the request did not come through them all as
    configured): the nearest peer is then the only address known to be true.
    """
    remote = request.META.get("REMOTE_ADDR")
    count = settings.TRUSTED_PROXY_COUNT
    if not count:
        return remote
    forwarded = [entry.strip() for entry in request.META.get("HTTP_X_FORWARDED_FOR", "").split(",")]
    forwarded = [entry for entry in forwarded if entry]
    if len(forwarded) < count:
        return remote
    candidate = forwarded[-count]
    try:
        return str(ipaddress.ip_address(candidate))
    except ValueError:
        return remote
