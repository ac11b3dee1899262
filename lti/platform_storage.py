"""Platform storage (IMS "LTI Client Side postMessages", Platform Storage) for launches in a frame
whose browser keeps no cookies for the tool (third-party cookies blocked), as Canvas and Moodle
4.x offer it by sending ``lti_storage_target`` in the login initiation. PyLTI1p3 2.0 has no
support for it (its ``enable_check_cookies`` only offers a new window), so it is here:

1. Login: the state and nonce are made and kept as for any login, unbound to a cookie; a page
   (``lti/static/lti/platform_storage.js``) puts, through ``lti.put_data`` to the platform's frame,
   a secret under the state's key and the nonce under the nonce's key, then goes on to the
   platform's authentication URL. The secret never leaves the browser except to the platform's
   frame (``postMessage`` to the origin of its authentication URL only).
2. Launch: the platform posts the id_token and state. The tool answers with a page that asks the
   platform's frame for both keys (``lti.get_data``, answers accepted from that origin only) and
   posts them back, with the id_token, from the tool's own origin (the ``Origin`` header says so:
   a page elsewhere cannot post what it took from its own login). The secret must hash to the
   one kept for the state, the nonce must be the login's and the id_token's: then the launch is
   validated by PyLTI1p3 as any other, the checked state standing in for the state cookie.

The record of a login (``LaunchData`` ``lti1p3-storage-<state>``) is used once and lives as long
as the state (``tool.STATE_LIFETIME_SECONDS``).
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
import typing as t
from urllib.parse import parse_qs, urlsplit

import jwt
from django.http import HttpRequest
from pylti1p3.contrib.django import DjangoMessageLaunch, DjangoOIDCLogin
from pylti1p3.contrib.django.cookie import DjangoCookieService
from pylti1p3.contrib.django.request import DjangoRequest

from lti import tool
from lti.models import Registration

# The parameter an LMS sends (login initiation and authentication response) to name the frame.
TARGET_PARAM = "lti_storage_target"
# What the tool's launch page posts back, read from the platform's frame.
SECRET_PARAM = "lti_storage_secret"
NONCE_PARAM = "lti_storage_nonce"
_MAX_TARGET = 100


class StorageRefused(Exception):
    """The platform's frame did not give back what the login stored, or not through the tool's page."""


class UnboundLaunchStorage(tool.DatabaseLaunchStorage):
    """Launch data not bound to a session cookie: the browser keeps none for the tool here."""

    def get_session_cookie_name(self) -> str | None:
        return None


class CheckedStateCookies(DjangoCookieService):
    """The state cookie PyLTI1p3 looks for, answered by the state platform storage has confirmed."""

    def __init__(self, request: DjangoRequest, state: str) -> None:
        super().__init__(request)
        self._state = state

    def get_cookie(self, name: str) -> str | None:
        return self._state if name == self._state else None


def _record_key(state: str) -> str:
    return f"lti1p3-storage-{state}"


def wanted(params) -> str | None:
    """The frame a login asks the tool to use for platform storage, or ``None``."""
    target = str(params.get(TARGET_PARAM) or "")
    return target if target and len(target) <= _MAX_TARGET and "\x00" not in target else None


def platform_origin(registration: Registration) -> str:
    """The origin the tool posts messages to and accepts answers from: the platform's
    authentication URL's (the IMS specification's choice)."""
    parts = urlsplit(registration.auth_login_url)
    return f"{parts.scheme}://{parts.netloc}"


def login_start(request: HttpRequest, conf: tool.ToolConf, *, registration: Registration, launch_url: str, target: str) -> dict:
    """Make the OIDC state and nonce of a login that keeps them in platform storage, and the
    record its launch is checked against. Returns what the login page needs: the authentication
    URL to go on to, the frame, the platform's origin, and the keys and values to store."""
    django_request = DjangoRequest(request)
    login = DjangoOIDCLogin(django_request, conf, session_service=tool.OnceNonceSessionService(django_request))
    login.set_launch_data_storage(UnboundLaunchStorage()).set_launch_data_lifetime(tool.STATE_LIFETIME_SECONDS)
    url = login.get_redirect_object(launch_url).get_redirect_url()
    query = parse_qs(urlsplit(url).query)
    state, nonce = query["state"][0], query["nonce"][0]
    secret = secrets.token_urlsafe(32)
    origin = platform_origin(registration)
    record = {
        "secret_sha256": hashlib.sha256(secret.encode()).hexdigest(),
        "nonce": nonce,
        "target": target,
        "origin": origin,
        "registration": registration.pk,
    }
    storage = UnboundLaunchStorage()
    storage.set_value(_record_key(state), record, exp=tool.STATE_LIFETIME_SECONDS)
    return {
        "redirect": url,
        "target": target,
        "origin": origin,
        "state_key": f"lti1p3-state-{state}",
        "secret": secret,
        "nonce_key": f"lti1p3-nonce-{nonce}",
        "nonce": nonce,
    }


def launch_record(state: str) -> dict | None:
    """The platform-storage record of the login that made ``state``; ``None`` for a login that did
    not use platform storage (or a state that is unknown or expired)."""
    value = UnboundLaunchStorage().get_value(_record_key(state)) if state and "\x00" not in state else None
    return value if isinstance(value, dict) else None


def record_registration(record: dict) -> Registration | None:
    return Registration.objects.filter(pk=record.get("registration")).first()


def launch_page_context(*, state: str, record: dict, id_token: str) -> dict[str, t.Any]:
    """What the launch's check page needs to read the login's keys back from the platform's frame."""
    return {
        "id_token": id_token,
        "state": state,
        "target": record["target"],
        "origin": record["origin"],
        "state_key": f"lti1p3-state-{state}",
        "nonce_key": f"lti1p3-nonce-{record['nonce']}",
    }


def _same_origin(request: HttpRequest) -> bool:
    return request.headers.get("Origin") == f"{request.scheme}://{request.get_host()}"


def launch_check(request: HttpRequest, *, state: str) -> None:
    """Check, once, what the tool's launch page read back from the platform's frame; raises
    ``StorageRefused`` when it is not what the login of ``state`` stored there."""
    storage = UnboundLaunchStorage()
    record = launch_record(state)
    if record is None or not storage.take_value(_record_key(state)):
        raise StorageRefused("no platform-storage login for this state (used or expired)")
    if not _same_origin(request):
        raise StorageRefused("the platform storage answer was not posted by the tool's own page")
    secret = str(request.POST.get(SECRET_PARAM) or "")
    given = hashlib.sha256(secret.encode()).hexdigest()
    if not hmac.compare_digest(given, record["secret_sha256"]):
        raise StorageRefused("the platform's frame did not give back the state's secret")
    if not hmac.compare_digest(str(request.POST.get(NONCE_PARAM) or ""), record["nonce"]):
        raise StorageRefused("the platform's frame did not give back the login's nonce")
    try:
        # Only to match the nonce: PyLTI1p3 verifies the id_token's signature next.
        claims = jwt.decode(str(request.POST.get("id_token") or ""), options={"verify_signature": False})
    except jwt.PyJWTError as exc:
        raise StorageRefused("the id_token cannot be read") from exc
    if claims.get("nonce") != record["nonce"]:
        raise StorageRefused("the id_token's nonce is not the login's")


def message_launch(request: HttpRequest, conf: tool.ToolConf, *, state: str) -> DjangoMessageLaunch:
    """The launch of a login checked by ``launch_check``: validated by PyLTI1p3 as any other, the
    checked state standing in for the state cookie and the launch data bound to no cookie."""
    django_request = DjangoRequest(request, post_only=True)
    launch = DjangoMessageLaunch(
        django_request,
        conf,
        session_service=tool.OnceNonceSessionService(django_request),
        cookie_service=CheckedStateCookies(django_request, state),
        launch_data_storage=UnboundLaunchStorage(),
        requests_session=tool.http_session(),
    )
    return launch.set_launch_data_lifetime(tool.LAUNCH_LIFETIME_SECONDS)


# --- the portal in a new window -----------------------------------------------------------------
# A frame that keeps no cookie keeps no session either: the launch's page offers the portal in a
# new window (first-party, where cookies work) with a one-time sign-in token, posted from the
# tool's own page (the Origin header again), good for HANDOFF_SECONDS.
HANDOFF_SECONDS = 120
HANDOFF_PARAM = "handoff"


def _handoff_key(token: str) -> str:
    return "lti1p3-handoff-" + hashlib.sha256(token.encode()).hexdigest()


def handoff_create(*, user, url: str) -> str:
    """A token that signs ``user`` in, once, in the new window, and leads to ``url``."""
    token = secrets.token_urlsafe(32)
    UnboundLaunchStorage().set_value(_handoff_key(token), {"user": user.pk, "url": url}, exp=HANDOFF_SECONDS)
    return token


def handoff_take(request: HttpRequest) -> tuple[int, str] | None:
    """The user id and URL of the request's token, used up; ``None`` when the token is unknown,
    used or expired, or not posted from the tool's own page."""
    token = str(request.POST.get(HANDOFF_PARAM) or "")
    if not token or not _same_origin(request):
        return None
    storage = UnboundLaunchStorage()
    value = storage.get_value(_handoff_key(token))
    if not isinstance(value, dict) or not storage.take_value(_handoff_key(token)):
        return None
    return value["user"], value["url"]
