"""Calls the portal makes to other servers: an LMS's keyset, access token, roster (NRPS) and score
(AGS) services, and webhook receivers. One policy for all of them, in two places:

- when a URL is saved (a webhook subscription, an LTI registration), ``validate_outbound_url``
  refuses what the URL itself shows: plain http, a user name or password, a fragment, a local or
  private address written as such;
- when a request is sent, ``http_session``'s adapter resolves the name once (with the resolver
  ``OUTBOUND_RESOLVER`` names), checks every address it got, and connects to the first of them,
  with the name kept for the ``Host`` header, TLS SNI and the certificate check. The name is not
  resolved a second time, so a DNS answer that changes between the check and the connection (DNS
  rebinding) cannot send the request to a local address. Every request is checked this way,
  redirects and URLs an LMS put in a launch (rosters, line items) included.

``OUTBOUND_ALLOW_HTTP`` allows plain http, ``OUTBOUND_ALLOW_PRIVATE_ADDRESSES`` local and private
addresses (both on under ``DEBUG``, and in the tests, whose fake LMSs and receivers listen on
127.0.0.1). With private addresses allowed the connection is still made to the address resolved.
"""

from __future__ import annotations

import ipaddress
import socket
from collections.abc import Callable
from functools import cache
from typing import Any
from urllib.parse import urlsplit

import requests
from django.conf import settings
from django.core.exceptions import ImproperlyConfigured, ValidationError
from django.utils.module_loading import import_string
from django.utils.translation import gettext as _
from requests.adapters import HTTPAdapter
from requests.structures import CaseInsensitiveDict
from urllib3.util.connection import allowed_gai_family

Address = ipaddress.IPv4Address | ipaddress.IPv6Address
# Addresses that carry an IPv4 address inside an IPv6 one: the IPv4 address is the one reached.
NAT64 = ipaddress.ip_network("64:ff9b::/96")


class AddressRefused(requests.RequestException):
    """The portal will not connect there (a local or private address, plain http); the message
    says why, for the log and the webhook delivery log."""


def validate_outbound_url(url: str) -> None:
    """Refuse a URL the portal should not call: not http(s), plain http (unless
    ``OUTBOUND_ALLOW_HTTP``), a user name or password in it, a fragment, or a local or private
    address written as such, ``localhost`` included (unless ``OUTBOUND_ALLOW_PRIVATE_ADDRESSES``).
    Names are checked when a request is sent, since where a name points can change."""
    try:
        parts = urlsplit(url)
        # Reading the port raises ValueError too: "https://h:x", "https://h:70000".
        if parts.port == 0:
            raise ValueError("port 0")
    except ValueError:  # also "https://[::1" (an unclosed IPv6 address)
        raise ValidationError(_("Enter a valid URL."), code="invalid") from None
    if parts.scheme not in ("https", "http"):
        raise ValidationError(_("The URL must start with https://."), code="scheme")
    if parts.scheme == "http" and not settings.OUTBOUND_ALLOW_HTTP:
        raise ValidationError(
            _("The URL must use https: the portal sends student data and keys over an encrypted connection only."),
            code="scheme",
        )
    if parts.username is not None or parts.password is not None:
        raise ValidationError(
            _("Put no user name or password in the URL: the portal would store and show them as plain text."),
            code="credentials",
        )
    if parts.fragment:
        raise ValidationError(_("The URL must not have a fragment (the part after #)."), code="fragment")
    if not settings.OUTBOUND_ALLOW_PRIVATE_ADDRESSES and _written_local(parts.hostname or ""):
        raise ValidationError(_("The URL points to a local or private address, which the portal does not call."), code="private")


def _written_local(host: str) -> bool:
    if host == "localhost" or host.endswith(".localhost"):
        return True
    try:
        return not is_public(ipaddress.ip_address(host))
    except ValueError:
        return False  # a name: resolved and checked when a request is sent


def is_public(address: Address) -> bool:
    """Whether ``address`` is on the public internet: not loopback, private, link-local (cloud
    metadata), shared (CGNAT), multicast or reserved, nor an IPv6 address carrying such an IPv4
    one (mapped, 6to4, NAT64)."""
    if isinstance(address, ipaddress.IPv6Address):
        inner = address.ipv4_mapped or address.sixtofour
        if inner is None and address in NAT64:
            inner = ipaddress.IPv4Address(int(address) & 0xFFFFFFFF)
        if inner is not None:
            return is_public(inner)
    return address.is_global and not address.is_multicast


def system_resolve(host: str, port: int) -> list[str]:
    """The addresses of ``host`` from the system's resolver (``getaddrinfo``), in its order; IPv4
    only on a host without IPv6, as urllib3 itself would ask (only the first address is tried)."""
    infos = socket.getaddrinfo(host, port, family=allowed_gai_family(), type=socket.SOCK_STREAM)
    return list(dict.fromkeys(str(info[4][0]) for info in infos))


@cache
def _resolver(path: str) -> Callable[[str, int], list[str]]:
    try:
        return import_string(path)
    except ImportError as exc:
        raise ImproperlyConfigured(f"OUTBOUND_RESOLVER={path!r} cannot be imported: {exc}") from exc


def pinned_address(host: str, port: int) -> str:
    """The one address a request to ``host`` connects to: ``host`` itself when it is an IP
    address, else the first address the resolver gives, once every address it gave is checked.

    Raises ``AddressRefused`` when an address is local or private (unless
    ``OUTBOUND_ALLOW_PRIVATE_ADDRESSES``), ``requests.ConnectionError`` when the name does not resolve.
    """
    addresses = _literal(host) or _resolved(host, port)
    if not settings.OUTBOUND_ALLOW_PRIVATE_ADDRESSES:
        for address in addresses:
            if not is_public(address):
                raise AddressRefused(
                    f"refused: {host} is {address}, a local or private address (OUTBOUND_ALLOW_PRIVATE_ADDRESSES)"
                )
    return str(addresses[0])


def _literal(host: str) -> list[Address]:
    try:
        return [ipaddress.ip_address(host)]
    except ValueError:
        return []


def _resolved(host: str, port: int) -> list[Address]:
    try:
        answers = _resolver(settings.OUTBOUND_RESOLVER)(host, port)
    except OSError as exc:
        # Not chained: the delivery log shows the root cause, which should name the host.
        raise requests.ConnectionError(f"could not resolve {host}: {exc}") from None
    if not answers:
        raise requests.ConnectionError(f"could not resolve {host}: no address")
    return [ipaddress.ip_address(answer.split("%", 1)[0]) for answer in answers]  # without an IPv6 zone


class PinnedAddressAdapter(HTTPAdapter):
    """requests' adapter, connecting to ``pinned_address`` of the URL's host.

    The connection pool is chosen by that address; the URL's host stays in the ``Host`` header
    and, over TLS, in the SNI and the name the certificate must carry, so the server sees the
    request it would have seen and a certificate for another name is still refused.
    """

    def build_connection_pool_key_attributes(self, request, verify, cert=None) -> tuple[dict[str, Any], dict[str, Any]]:
        host_params, pool_kwargs = super().build_connection_pool_key_attributes(request, verify, cert)
        scheme, host, port = host_params["scheme"], host_params["host"], host_params["port"]
        if not host:
            raise requests.exceptions.InvalidURL(f"no host in {request.url!r}")
        if scheme == "http" and not settings.OUTBOUND_ALLOW_HTTP:
            raise AddressRefused(f"refused: {request.url} is plain http (OUTBOUND_ALLOW_HTTP)")
        host_params["host"] = pinned_address(host, port or (443 if scheme == "https" else 80))
        # A copy: the headers may be shared with other requests (a session's, a caller's dict).
        request.headers = CaseInsensitiveDict(request.headers or {})
        shown = f"[{host}]" if ":" in host else host
        request.headers["Host"] = f"{shown}:{port}" if port else shown
        if scheme == "https":
            pool_kwargs["server_hostname"] = host
            pool_kwargs["assert_hostname"] = host
        return host_params, pool_kwargs


class _TimeoutSession(requests.Session):
    """A session whose requests time out after ``timeout`` seconds unless the caller says otherwise:
    PyLTI1p3 calls the platform without a timeout, and a server that hangs must not hold a web
    request or a worker for ever."""

    def __init__(self, timeout: float) -> None:
        super().__init__()
        self.timeout = timeout

    def request(self, method, url, **kwargs):
        kwargs.setdefault("timeout", self.timeout)
        return super().request(method, url, **kwargs)


def http_session(*, timeout: float, user_agent: str) -> requests.Session:
    """A ``requests.Session`` for calls to other servers: every request checked and pinned by
    ``PinnedAddressAdapter``, with a default timeout (seconds) and the portal's ``User-Agent``."""
    session = _TimeoutSession(timeout)
    session.headers["User-Agent"] = user_agent
    adapter = PinnedAddressAdapter()
    session.mount("https://", adapter)
    session.mount("http://", adapter)
    return session
