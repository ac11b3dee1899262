"""URLs the portal calls on other servers: an LMS's keyset, access token, roster (NRPS) and score
(AGS) services, and webhook receivers. One rule for all of them, checked when a URL is saved
(a webhook subscription, an LTI registration): https, no user name or password, no fragment, and
not a local or private address written as such. Names are checked when a request is sent.

``OUTBOUND_ALLOW_HTTP`` allows plain http, ``OUTBOUND_ALLOW_PRIVATE_ADDRESSES`` local and private
addresses (both on under ``DEBUG``, and in the tests, whose fake LMSs and receivers listen on
127.0.0.1).
"""

from __future__ import annotations

import ipaddress
from urllib.parse import urlsplit

from django.conf import settings
from django.core.exceptions import ValidationError
from django.utils.translation import gettext as _

Address = ipaddress.IPv4Address | ipaddress.IPv6Address
# Addresses that carry an IPv4 address inside an IPv6 one: the IPv4 address is the one reached.
NAT64 = ipaddress.ip_network("64:ff9b::/96")


def validate_outbound_url(url: str) -> None:
    """Refuse a URL the portal should not call: not http(s), plain http (unless
    ``OUTBOUND_ALLOW_HTTP``), a user name or password in it, a fragment, or a local or private
    address written as such, ``localhost`` included (unless ``OUTBOUND_ALLOW_PRIVATE_ADDRESSES``).
    Names are checked when a request is sent, since where a name points can change."""
    parts = urlsplit(url)
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
