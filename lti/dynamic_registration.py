"""LTI Dynamic Registration 1.0: an LMS registers the tool itself, into the institution of a
one-time link an operator made, and the registration waits for an operator's approval.

Who may start it: only whoever holds a registration link (``link_create``), made by an operator
of the institution and shown once. The link says which institution the LMS belongs to (an
anonymous registration URL could not), and nobody without one can make the portal call out.
A link is good for ``LINK_LIFETIME`` and ``LINK_MAX_ATTEMPTS`` openings, failed ones included,
and for one registration. Every URL the LMS names follows the rule of every URL the portal calls
(``labs.outbound``: https, no credentials, no local or private address unless the settings allow
it, the address pinned when the request is sent); answers are read up to ``MAX_ANSWER_BYTES``
and redirects are not followed.

The flow (LTI DR 1.0 §3): the LMS opens the link with ``openid_configuration`` (and perhaps
``registration_token``); the tool reads the platform's OpenID configuration, checks its issuer
is on the configuration URL's origin (§3.5.1), posts its client registration
(``lti.tool_configuration``) to the platform's ``registration_endpoint`` with the token, and
stores the answer as a PENDING registration: it refuses launches until ``registration_approve``.
"""

from __future__ import annotations

import hashlib
import json
import secrets
from datetime import datetime, timedelta
from urllib.parse import urlsplit

import requests
from django.core.exceptions import ValidationError
from django.db import IntegrityError, transaction
from django.db.models import F
from django.utils import timezone
from django.utils.translation import gettext as _

from labs.models import Institution
from labs.outbound import validate_outbound_url
from labs.services.audit import audit_record
from lti.models import Deployment, Registration, RegistrationLink, issuer_of_another_institution
from lti.tool import http_session
from lti.tool_configuration import TOOL_CONFIGURATION_CLAIM, ToolUrls, client_registration

LINK_LIFETIME = timedelta(days=7)
LINK_MAX_ATTEMPTS = 5
MAX_ANSWER_BYTES = 64 * 1024
PLATFORM_CONFIGURATION_CLAIM = "https://purl.imsglobal.org/spec/lti-platform-configuration"


class RegistrationRefused(Exception):
    """Dynamic registration refused; the message is for the LMS administrator who started it."""


def _sha256(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def link_create(*, by, institution: Institution) -> str:
    """Make a one-time registration link for ``institution``; returns its token (shown once,
    only its SHA-256 is kept)."""
    token = secrets.token_urlsafe(32)
    with transaction.atomic():
        RegistrationLink.objects.create(
            institution=institution, token_sha256=_sha256(token), created_by=by, expires_at=timezone.now() + LINK_LIFETIME
        )
        audit_record(by=by, action="lti.registration_link.create", target="LTI registration link", institution=institution)
    return token


def links_prune(*, now: datetime | None = None) -> int:
    """Delete the registration links past their expiry (used or not: a used link's registration and
    the audit log keep what happened); returns how many went."""
    deleted, _ = RegistrationLink.objects.filter(expires_at__lte=now or timezone.now()).delete()
    return deleted


def _link_claim(token: str) -> RegistrationLink:
    """Count an opening of the link of ``token``: refused when there is none, or it expired, was
    used, or was opened ``LINK_MAX_ATTEMPTS`` times. A conditional UPDATE, committed at once, so
    two openings at the same moment cannot both take the last attempt."""
    links = RegistrationLink.objects.filter(
        token_sha256=_sha256(token), used_at__isnull=True, expires_at__gt=timezone.now(), attempts__lt=LINK_MAX_ATTEMPTS
    )
    if "\x00" in token or links.update(attempts=F("attempts") + 1) != 1:
        raise RegistrationRefused(
            _("This registration link is unknown, used or expired. Ask the portal's operator for a new one.")
        )
    return RegistrationLink.objects.select_related("institution").get(token_sha256=_sha256(token))


def _origin(url: str) -> str:
    parts = urlsplit(url)
    return f"{parts.scheme}://{parts.netloc}".lower()


def _checked_url(url: object, what: str) -> str:
    if not isinstance(url, str) or not url:
        raise RegistrationRefused(_("The LMS's configuration has no %(what)s.") % {"what": what})
    try:
        validate_outbound_url(url)
    except ValidationError as exc:
        raise RegistrationRefused(
            _("The LMS's %(what)s is refused: %(reason)s") % {"what": what, "reason": " ".join(exc.messages)}
        ) from None
    return url


def _read_json(response: requests.Response) -> object:
    body = b""
    for chunk in response.iter_content(8192):
        body += chunk
        if len(body) > MAX_ANSWER_BYTES:
            raise RegistrationRefused(_("The LMS's answer is too large."))
    try:
        return json.loads(body)
    except ValueError:
        raise RegistrationRefused(_("The LMS did not answer with JSON.")) from None


def _platform_error(response: requests.Response) -> str:
    """The reason an LMS gave for refusing, from the OpenID error shape (``error_description``,
    ``error``) or Canvas's (``errors``), shortened; else the HTTP status."""
    try:
        body = _read_json(response)
    except RegistrationRefused:
        body = None
    reason = ""
    if isinstance(body, dict):
        errors = body.get("errors")
        reason = body.get("error_description") or body.get("error") or (json.dumps(errors) if errors else "")
    return (str(reason) or f"HTTP {response.status_code}")[:200]


def _call(method: str, url: str, **kwargs) -> object:
    try:
        response = http_session().request(method, url, allow_redirects=False, stream=True, **kwargs)
    except requests.RequestException as exc:
        raise RegistrationRefused(
            _("The LMS could not be reached at %(url)s (%(error)s).") % {"url": url[:200], "error": type(exc).__name__}
        ) from None
    with response:
        if not 200 <= response.status_code < 300:
            raise RegistrationRefused(_("The LMS refused: %(reason)s") % {"reason": _platform_error(response)})
        return _read_json(response)


def _platform_configuration(openid_configuration: str) -> dict:
    _checked_url(openid_configuration, _("OpenID configuration URL"))
    config = _call("GET", openid_configuration, headers={"Accept": "application/json"})
    if not isinstance(config, dict):
        raise RegistrationRefused(_("The LMS's OpenID configuration is not a JSON object."))
    issuer = _checked_url(config.get("issuer"), _("issuer"))
    if _origin(issuer) != _origin(openid_configuration):
        raise RegistrationRefused(
            _("The LMS's issuer %(issuer)s is not on the address of its OpenID configuration (%(origin)s).")
            % {"issuer": issuer[:200], "origin": _origin(openid_configuration)[:200]}
        )
    for name in ("authorization_endpoint", "token_endpoint", "jwks_uri", "registration_endpoint"):
        _checked_url(config.get(name), name)
    return config


def _name(config: dict) -> str:
    platform = config.get(PLATFORM_CONFIGURATION_CLAIM) or {}
    family = platform.get("product_family_code") if isinstance(platform, dict) else None
    host = urlsplit(config["issuer"]).netloc
    return f"{family} ({host})"[:200] if isinstance(family, str) and family else host[:200]


def register(*, token: str, openid_configuration: str, registration_token: str | None, urls: ToolUrls) -> Registration:
    """Register the tool with the LMS that opened the link of ``token`` and store the platform's
    registration, PENDING, in the link's institution, with the deployment id the LMS gave.

    Raises ``RegistrationRefused`` (nothing stored, the link's attempt counted) when the link is
    not good, the configuration is not one the portal accepts, the issuer is another
    institution's or this client is registered already, or the LMS refuses."""
    link = _link_claim(token)
    config = _platform_configuration(openid_configuration)
    issuer = config["issuer"]
    if issuer_of_another_institution(issuer, link.institution_id):
        raise RegistrationRefused(_("This LMS is registered for another institution of this portal."))
    scopes = config.get("scopes_supported")
    body = client_registration(urls, scopes_supported=scopes if isinstance(scopes, list) else None)
    headers = {"Accept": "application/json"}
    if registration_token:
        headers["Authorization"] = f"Bearer {registration_token}"
    answer = _call("POST", config["registration_endpoint"], json=body, headers=headers)
    client_id = answer.get("client_id") if isinstance(answer, dict) else None
    if not isinstance(client_id, str) or not client_id or "\x00" in client_id:
        raise RegistrationRefused(_("The LMS's answer has no client ID."))
    tool_config = answer.get(TOOL_CONFIGURATION_CLAIM) or {}
    deployment_id = tool_config.get("deployment_id") if isinstance(tool_config, dict) else None
    fields = {
        "name": _name(config),
        "issuer": issuer,
        "client_id": client_id[:200],
        "auth_login_url": config["authorization_endpoint"],
        "auth_token_url": config["token_endpoint"],
        "auth_audience": str(config.get("authorization_server") or "")[:500],
        "keyset_url": config["jwks_uri"],
    }
    return _store(link_id=link.pk, fields=fields, deployment_id=deployment_id)


def _store(*, link_id: int, fields: dict, deployment_id: object) -> Registration:
    already = RegistrationRefused(_("This LMS client is registered with the portal already."))
    try:
        with transaction.atomic():
            link = RegistrationLink.objects.select_for_update().select_related("institution").get(pk=link_id)
            if link.used_at is not None:
                raise RegistrationRefused(
                    _("This registration link is unknown, used or expired. Ask the portal's operator for a new one.")
                )
            if Registration.objects.filter(issuer=fields["issuer"], client_id=fields["client_id"]).exists():
                raise already
            registration = Registration.objects.create(institution=link.institution, state=Registration.State.PENDING, **fields)
            if isinstance(deployment_id, str | int) and str(deployment_id) and "\x00" not in str(deployment_id):
                Deployment.objects.create(registration=registration, deployment_id=str(deployment_id)[:200])
            link.used_at = timezone.now()
            link.registration = registration
            link.save(update_fields=["used_at", "registration"])
            audit_record(
                by=None,
                action="lti.registration.dynamic",
                target=f"LTI {registration.issuer} {registration.client_id}",
                institution=link.institution,
                after={**fields, "deployments": list(registration.deployments.values_list("deployment_id", flat=True))},
            )
    except IntegrityError:  # the same client registered by another request at the same moment
        raise already from None
    return registration


def registration_approve(*, by, registration: Registration) -> bool:
    """Let a pending registration's LMS launch; ``False`` when it was not pending (approved or
    removed meanwhile)."""
    with transaction.atomic():
        updated = Registration.objects.filter(pk=registration.pk, state=Registration.State.PENDING).update(
            state=Registration.State.ACTIVE
        )
        if updated:
            audit_record(
                by=by,
                action="lti.registration.approve",
                target=f"LTI {registration.issuer} {registration.client_id}",
                institution=registration.institution,
            )
    return updated == 1


def registration_reject(*, by, registration: Registration) -> bool:
    """Delete a pending registration; ``False`` when it was not pending."""
    with transaction.atomic():
        deleted, _by_model = Registration.objects.filter(pk=registration.pk, state=Registration.State.PENDING).delete()
        if deleted:
            audit_record(
                by=by,
                action="lti.registration.reject",
                target=f"LTI {registration.issuer} {registration.client_id}",
                institution=registration.institution,
            )
    return deleted > 0
