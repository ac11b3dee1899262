"""PyLTI1p3 wired to the portal: the tool configuration read from the database, launch data
(OIDC state, nonces, validated launches) kept in the database so every web process sees it,
and a nonce that can be used once only.
"""

from __future__ import annotations

import typing as t
from datetime import timedelta

import requests
from django.conf import settings
from django.db.models import Q
from django.utils import timezone
from pylti1p3.contrib.django import DjangoMessageLaunch, DjangoOIDCLogin
from pylti1p3.contrib.django.request import DjangoRequest
from pylti1p3.deployment import Deployment as LibDeployment
from pylti1p3.launch_data_storage.base import LaunchDataStorage
from pylti1p3.registration import Registration as LibRegistration
from pylti1p3.service_connector import ServiceConnector
from pylti1p3.session import SessionService
from pylti1p3.tool_config.abstract import ToolConfAbstract

from labs import outbound
from lti.keys import active_key
from lti.models import Deployment, LaunchData, Registration, ToolKey

# How long OIDC state and nonces live: a login the user does not finish in this time is refused.
STATE_LIFETIME_SECONDS = 600
# A validated launch is kept this long for the pages it leads to (the deep-linking picker).
LAUNCH_LIFETIME_SECONDS = 3600


def http_session() -> requests.Session:
    """The session every call to a platform goes through, PyLTI1p3's own (keyset, access token,
    NRPS, AGS) included: ``LTI_HTTP_TIMEOUT_SECONDS`` unless the call says otherwise (PyLTI1p3 sets
    none), and each request's address resolved once, checked and connected to (``labs.outbound``)."""
    return outbound.http_session(timeout=settings.LTI_HTTP_TIMEOUT_SECONDS, user_agent="npu-lab-portal-lti")


def lib_registration(row: Registration) -> LibRegistration:
    key = active_key()
    return (
        LibRegistration()
        .set_issuer(row.issuer)
        .set_client_id(row.client_id)
        .set_auth_login_url(row.auth_login_url)
        .set_auth_token_url(row.auth_token_url)
        .set_auth_audience(row.auth_audience or None)
        .set_key_set_url(row.keyset_url)
        .set_tool_private_key(key.private_key_pem)
        .set_tool_public_key(key.public_key_pem)
    )


def service_connector(row: Registration) -> ServiceConnector:
    """Calls the platform's services (NRPS, AGS) with an access token got with the tool's key."""
    return ServiceConnector(lib_registration(row), requests_session=http_session())


def _storable(*values: str | None) -> bool:
    """Whether ``values`` could name a stored row: none holds a NUL byte, which PostgreSQL's text
    cannot store (a query with one fails) and the registration form refuses. An LMS's login or
    launch may carry anything: one with a NUL names no registration."""
    return not any(value and "\x00" in value for value in values)


class ToolConf(ToolConfAbstract[DjangoRequest]):
    """Registrations from the database; an issuer may have many client ids (one per registration)."""

    def __init__(self) -> None:
        self.registration: Registration | None = None

    def check_iss_has_one_client(self, iss: str) -> bool:
        return False

    def check_iss_has_many_clients(self, iss: str) -> bool:
        return True

    def find_registration_by_issuer(self, iss: str, *args, **kwargs) -> LibRegistration:
        raise NotImplementedError

    def find_deployment(self, iss: str, deployment_id: str) -> LibDeployment | None:
        raise NotImplementedError

    def registration_of(self, iss: str, client_id: str | None) -> Registration | None:
        if not _storable(iss, client_id):
            return None
        rows = Registration.objects.filter(issuer=iss).select_related("institution")
        if client_id:
            rows = rows.filter(client_id=client_id)
        found = list(rows[:2])
        # Without a client_id (an older platform's login request), only an unambiguous issuer.
        return found[0] if len(found) == 1 else None

    def find_registration_by_params(self, iss: str, client_id: str, *args, **kwargs) -> LibRegistration | None:
        row = self.registration_of(iss, client_id)
        self.registration = row
        return lib_registration(row) if row is not None else None

    def find_deployment_by_params(self, iss: str, deployment_id: str, client_id: str, *args, **kwargs) -> LibDeployment | None:
        if (
            not _storable(iss, deployment_id, client_id)
            or not Deployment.objects.filter(
                registration__issuer=iss, registration__client_id=client_id, deployment_id=deployment_id
            ).exists()
        ):
            return None
        return LibDeployment().set_deployment_id(deployment_id)

    def get_jwks(self, iss: str | None = None, client_id: str | None = None, **kwargs):
        return {"keys": published_jwks()}


def published_jwks() -> list[dict[str, t.Any]]:
    """The active key and the keys retired less than the grace period ago, newest first."""
    grace = timedelta(days=settings.LTI_KEY_GRACE_DAYS)
    active_key()  # the first request makes the first key
    keys = ToolKey.objects.filter(Q(retired_at__isnull=True) | Q(retired_at__gt=timezone.now() - grace))
    return [LibRegistration.get_jwk(key.public_key_pem) for key in keys]


class DatabaseLaunchStorage(LaunchDataStorage[t.Any]):
    """Launch data in ``LaunchData`` rows. Over HTTPS it is bound to the browser by the library's
    session-id cookie (SameSite=None; Secure); over plain HTTP (the demo) it is not, as with
    PyLTI1p3's own cache storage, because browsers drop SameSite=None cookies without Secure."""

    def get_session_cookie_name(self) -> str | None:
        assert self._request is not None
        return super().get_session_cookie_name() if self._request.is_secure() else None

    def can_set_keys_expiration(self) -> bool:
        return True

    def _live(self, key: str):
        """The live row of ``key``, a state, nonce or launch id the browser sent (so anything)."""
        key = self._prepare_key(key)
        return LaunchData.objects.filter(key=key, expires_at__gt=timezone.now()) if _storable(key) else LaunchData.objects.none()

    def get_value(self, key: str) -> t.Any:
        row = self._live(key).first()
        return row.value if row is not None else None

    def set_value(self, key: str, value: t.Any, exp: int | None = None) -> None:
        expires_at = timezone.now() + timedelta(seconds=exp or LAUNCH_LIFETIME_SECONDS)
        LaunchData.objects.update_or_create(key=self._prepare_key(key), defaults={"value": value, "expires_at": expires_at})

    def check_value(self, key: str) -> bool:
        return self._live(key).exists()

    def take_value(self, key: str) -> bool:
        """Delete the key; ``True`` only for the one caller that deleted a live row."""
        deleted, _ = self._live(key).delete()
        return deleted == 1


class OnceNonceSessionService(SessionService):
    """PyLTI1p3 only checks that a nonce was issued; here checking it also uses it up, so a
    replayed id_token (same nonce) is refused even with its state."""

    def check_nonce(self, nonce: str) -> bool:
        storage = self.data_storage
        assert isinstance(storage, DatabaseLaunchStorage)
        return storage.take_value(self._get_key("nonce", nonce))


def _storage() -> DatabaseLaunchStorage:
    return DatabaseLaunchStorage()


def oidc_login(request, tool_conf: ToolConf) -> DjangoOIDCLogin:
    django_request = DjangoRequest(request)
    login = DjangoOIDCLogin(django_request, tool_conf, session_service=OnceNonceSessionService(django_request))
    return login.set_launch_data_storage(_storage()).set_launch_data_lifetime(STATE_LIFETIME_SECONDS)


def message_launch(request, tool_conf: ToolConf) -> DjangoMessageLaunch:
    django_request = DjangoRequest(request, post_only=True)
    launch = DjangoMessageLaunch(
        django_request,
        tool_conf,
        session_service=OnceNonceSessionService(django_request),
        launch_data_storage=_storage(),
        requests_session=http_session(),
    )
    return launch.set_launch_data_lifetime(LAUNCH_LIFETIME_SECONDS)


def message_launch_from_cache(request, launch_id: str, tool_conf: ToolConf) -> DjangoMessageLaunch:
    django_request = DjangoRequest(request)
    return DjangoMessageLaunch.from_cache(
        launch_id,
        django_request,
        tool_conf,
        session_service=OnceNonceSessionService(django_request),
        launch_data_storage=_storage(),
        requests_session=http_session(),
    )
