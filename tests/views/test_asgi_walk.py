"""Every URL in the URLconf through the ASGI application (``portal.asgi.application``, as Daphne
serves it), as every kind of visitor, in English and in Chinese: a GET of each; each GET form the
pages showed (the filters) as shown and with a NUL byte in every field; then each POST form,
once with a valid body and once with a NUL in every field. No answer is a 5xx, and every page is
in the visitor's language.

The URL patterns come from the URLconf itself (``get_resolver()``, includes followed), so a new
URL is walked as soon as it exists, or the walk fails until it can fill in the URL's parameters
or ``EXCLUDED`` says why it is left out. A POST form whose URL has no entry in ``POSTS`` (what a
valid body needs) or ``POST_EXCLUDED`` fails the walk too; the admin's forms are posted as they
are (a change page's current values, a deletion's confirmation). The REST API is walked with
GETs (with the institution's token as the operator); its JSON writes are Schemathesis's
(``tests/api/test_schemathesis.py``).

Each visitor walks a world of its own (a running session, a reservation, API tokens, a webhook,
an LMS registration, one of every object the admin lists), so one visitor's valid POSTs (an
archived course, a revoked token) do not change what the next one sees.

Every portal page an answer shows has an element for each id its ``aria-describedby`` names.
"""

from __future__ import annotations

import asyncio
import re
from dataclasses import dataclass, field
from datetime import timedelta
from urllib.parse import urljoin, urlsplit

import httpx
import pytest
from bs4 import BeautifulSoup
from django.apps import apps
from django.contrib import admin
from django.contrib.auth.models import Group, Permission
from django.contrib.contenttypes.models import ContentType
from django.urls import URLPattern, URLResolver, get_resolver, resolve
from django.urls.exceptions import Resolver404
from django.utils import timezone

from accounts.services import preference_set_language
from api.oauth import oauth_client_create
from api.scopes import SCOPES
from api.services import token_create
from labs.models import AllowedImage, CourseQuota, Enrollment, InstitutionRole, RepairEvent
from labs.services.allocation import allocation_pass
from labs.services.reservations import reservation_book
from labs.services.sessions import session_launch
from lti.keys import key_rotate
from lti.services import registration_save
from tests.asgi_client import AsgiClient
from tests.factories import PASSWORD, TemplateFactory, UserFactory
from webhooks.models import Delivery
from webhooks.services import subscription_create

pytestmark = pytest.mark.slow

ROLES = ("anonymous", "student", "assistant", "instructor", "operator", "platform", "superuser")
LANGUAGES = ("en", "zh-hans")

# URL patterns (by name, or by route when unnamed) the walk does not request, and why.
EXCLUDED: dict[str, str] = {}

# The admin is the superuser's: every other visitor is sent to its login page by the same
# admin_view wrapper, so they walk only its index and its login page.
ADMIN_FOR_EVERYONE = {"admin:index", "admin:login"}

LMS = "https://lms.example.edu"
LTI_LOGIN = {"iss": LMS, "login_hint": "walker", "target_link_uri": "http://testserver/lti/launch/", "client_id": "walk"}

# Query strings a GET needs to get past its first check.
QUERIES: dict[str, str] = {
    "lti:login": "&".join(f"{name}={value}" for name, value in LTI_LOGIN.items()),
    "labs:template-preview": "core_percent=5&memory_mib=4&scenario=development",
}

REGISTRATION = {
    "institution": "{institution}",
    "name": "Second LMS",
    "issuer": "https://lms2.example.edu",
    "client_id": "second",
    "auth_login_url": "https://lms2.example.edu/auth",
    "auth_token_url": "https://lms2.example.edu/token",
    "keyset_url": "https://lms2.example.edu/jwks",
    "deployment_ids": "7",
}
REASON = {"reason": "the walk", "confirm": "on"}

# URL patterns that accept a form's POST, with the values a valid body needs where the form leaves
# a field empty (a reason, a confirmation, a name) or unchecked; fields the form fills are sent as
# it fills them. "{name}" is filled in from the world. Where no page shows this visitor the form
# (a student and the operator console), these fields alone are POSTed, as a forged request would be.
POSTS: dict[str, dict[str, str | list[str]]] = {
    "login": {"username": "{username}", "password": PASSWORD},
    "logout": {},
    "set_language": {"language": "{language}", "next": "/"},
    "lti:login": LTI_LOGIN,
    "lti:roster-sync": {},  # the course has no LMS context here: tests/lti/test_flow.py syncs one
    "lti:ops-registrations": REGISTRATION,
    "lti:ops-registration-edit": REGISTRATION,
    "lti:ops-registration-delete": {},
    "lti:ops-registration-link": {"institution": "{institution}"},
    "lti:ops-registration-approve": {},  # the walk's registration is approved already: tests/lti/test_dynamic_registration.py
    "lti:ops-registration-reject": {},
    "ops-tokens": {
        "institution": "{institution}",
        "name": "second",
        "scopes": list(SCOPES),
        "oauth-institution": "{institution}",
        "oauth-name": "second",
        "oauth-scopes": list(SCOPES),
    },
    "ops-token-revoke": REASON,
    "ops-oauth-client-revoke": REASON,
    "ops-webhooks": {"institution": "{institution}", "url": "http://127.0.0.1:9/hook", "event_types": ["session.ended"]},
    "ops-webhook": {"action": "pause", **REASON},
    "labs:session-launch": {"course": "{course}", "template": "{small}"},
    "labs:session-stop": {},
    "labs:session-extend": {},
    "labs:session-keep": {},
    "labs:session-smaller": {},
    "labs:course-new": {"institution": "{institution}", "code": "NEW101", "title": "New course", "term": "2027 Spring"},
    "labs:course-edit": {"code": "C000", "title": "AI Practice", "term": "2026 Autumn"},
    "labs:course-archive": {"confirm": "yes"},
    "labs:course-quota": {
        "instance_count": "8",
        "core_percent": "80",
        "memory_mib": "32",
        "sessions_per_student": "1",
        "max_session_minutes": "60",
        "extensions_allowed": "1",
        "extension_minutes": "30",
    },
    "labs:course-templates": {
        "action": "attach",
        "template": "{catalogue}",
        "name": "walk template",
        "image": "{image}",
        "core_percent": "10",
        "memory_mib": "8",
        "scenario": "development",
    },
    "labs:course-roster": {"action": "add", "identifier": "{outsider}", "role": "student"},
    "labs:roster-import": {"step": "confirm", "csv": "username,role\n{outsider},student\n"},
    "labs:sessions-stop-all": {"confirm": "yes"},
    "labs:course-usage": {"username": "{student}", "core_percent_hours": "10", "gib_hours": "10"},
    "labs:course-reservations": {
        "template": "{small}",
        "count": "2",
        "start_time": "10:00",
        "minutes": "60",
        "dates": "{tomorrow}",
    },
    "labs:reservation-cancel": {"confirm": "yes"},
    # The walk's course has no vLLM template: the form refuses the Jupyter one (tests/gateway/test_pages.py saves one).
    "labs:course-endpoint": {
        "template": "{small}",
        "served_model_name": "walk",
        "upstream_url": "http://127.0.0.1:9/v1",
        "requests_per_minute": "10",
    },
    "labs:student-endpoint": {"action": "new"},  # the walk's course has no endpoint: 404 (tests/gateway/test_pages.py)
    "labs:ops-card-health": REASON,
    "labs:ops-card-isolation-clear": {},
    "labs:ops-node-drain": REASON,
    "labs:ops-node-evacuate": {"minutes": "15", **REASON},
    "labs:ops-session-stop": REASON,
    "labs:ops-tenancy": {
        "action": "image-add",
        "institution": "{institution}",
        "kind": "jupyter",
        "reference": "walk/jupyter:2",
        "label": "Walk",
        "username": "{outsider}",
        "allot_instances": "64",
        "allot_core_percent": "800",
        "allot_memory_mib": "512",
        "t{institution}-name": "catalogue template",
        "t{institution}-core_percent": "10",
        "t{institution}-memory_mib": "8",
    },
}

# URL patterns that take a POST no page's form makes, with the fields of their body. The walk
# sends them only an invalid body (each field a NUL); the comment says where a valid one is sent.
INVALID_ONLY: dict[str, list[str]] = {
    "lti:launch": ["id_token", "state"],  # signed by the LMS's key: tests/lti/test_flow.py against a platform
    "lti:deep-link": ["launch_id", "template", "score"],  # names a launch the LMS signed: tests/lti/test_flow.py
    "lti:handoff": ["handoff"],  # a one-time token a framed launch made: tests/lti/test_platform_storage.py
    "labs:session-selftest": ["visible_mib"],  # a lab's JSON report with its secret: tests/views/test_selftest_pages.py
}

# Forms whose POST the walk leaves to other tests, and why.
POST_EXCLUDED: dict[str, str] = {}

# POSTed after all others (in this order): they change who the visitor is.
POST_LAST = ("login", "admin:login", "logout", "admin:logout")

NUL = "\x00"  # an invalid body holds it in every field: Django's fields refuse it, PostgreSQL cannot store it
METRICS_TOKEN = "walk-metrics-token"


# --- the URLconf ----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Route:
    route: str  # as ResolverMatch.route gives it: "courses/<int:course_id>/"
    name: str | None  # namespaced: "labs:course-detail"

    @property
    def key(self) -> str:
        return self.name or self.route


def routes(patterns=None, prefix: str = "", namespace: str | None = None) -> list[Route]:
    """Every URL pattern of the URLconf, includes followed."""
    found = []
    for pattern in get_resolver().url_patterns if patterns is None else patterns:
        text = str(pattern.pattern).removeprefix("^") if prefix else str(pattern.pattern)
        if isinstance(pattern, URLResolver):
            inner = namespace
            if pattern.namespace:
                inner = f"{namespace}:{pattern.namespace}" if namespace else pattern.namespace
            found += routes(pattern.url_patterns, prefix + text, inner)
        else:
            assert isinstance(pattern, URLPattern)
            name = pattern.name and (f"{namespace}:{pattern.name}" if namespace else pattern.name)
            found.append(Route(prefix + text, name))
    return found


def key_of(path: str) -> str | None:
    """The key of the URL pattern ``path`` resolves to (``None``: none)."""
    try:
        match = resolve(urlsplit(path).path)
    except Resolver404:
        return None
    return match.view_name if match.url_name else match.route


PARAMETER = re.compile(r"<(?:\w+:)?(\w+)>|\(\?P<(\w+)>[^)]*\)")


def paths_of(route: Route, world: World) -> list[str]:
    """The paths the walk requests for ``route``: its parameters filled in with the world's objects."""
    if route.key == "admin:app_list":
        return [f"/admin/{label}/" for label in world.admin_apps]
    values = dict(world.ids)
    admin_model = re.match(r"admin/(\w+)/(\w+)/", route.route)
    if admin_model and "object_id" in route.route:
        values["object_id"] = world.admin_objects[admin_model.groups()]
    elif "object_id" in route.route:  # the admin's "view on site": the course's content type
        values["object_id"] = world.ids["course_id"]

    def fill(match: re.Match) -> str:
        name = match.group(1) or match.group(2)
        return str(values[name])

    path = "/" + PARAMETER.sub(fill, route.route).rstrip("$")
    query = QUERIES.get(route.key, "")
    return [path + (f"?{query.format(**world.values)}" if query else "")]


# --- the world ------------------------------------------------------------------------------------------


@dataclass
class World:
    people: dict
    ids: dict[str, object]  # path parameters by name
    values: dict[str, str]  # what "{name}" in QUERIES and POSTS stands for
    admin_objects: dict[tuple[str, str], object]  # (app label, model name) -> a pk, for the admin's pages
    admin_apps: list[str]
    api_token: str


@pytest.fixture
def walk_world(world) -> World:
    course, institution = world["course"], world["course"].institution
    assistant = UserFactory(username="ta")
    Enrollment.objects.create(user=assistant, course=course, role="assistant")
    operator = UserFactory(username="op")
    InstitutionRole.objects.create(user=operator, institution=institution, role="operator")
    platform = UserFactory(username="platform")
    platform.user_permissions.add(Permission.objects.get(codename="operate_platform"))
    superuser = UserFactory(username="root", is_staff=True, is_superuser=True)

    session = session_launch(student=world["students"][0], course=course, template=world["medium"])
    allocation_pass()
    session.refresh_from_db()
    start = timezone.now() + timedelta(days=1)
    reservation = reservation_book(course=course, template=world["small"], count=2, slots=[(start, start + timedelta(hours=1))])
    token, secret = token_create(institution=institution, name="walk", scopes=list(SCOPES))
    client, _ = oauth_client_create(institution=institution, name="walk", scopes=list(SCOPES))
    subscription, _ = subscription_create(institution=institution, url="https://lms.example.edu/h", event_types=["session.ended"])
    delivery = Delivery.objects.create(subscription=subscription, event_type="session.ended", payload={}, state="failed")
    registration = registration_save(
        by=None,
        institution=institution,
        fields={
            "name": "Walk LMS",
            "issuer": "https://lms.example.edu",
            "client_id": "walk",
            "auth_login_url": "https://lms.example.edu/auth",
            "auth_token_url": "https://lms.example.edu/token",
            "auth_audience": "",
            "keyset_url": "https://lms.example.edu/jwks",
        },
        deployment_ids=["1"],
    )
    key_rotate()
    RepairEvent.objects.create(kind=RepairEvent.Kind.choices[0][0], node=world["node"], session=session)
    preference_set_language(user=world["students"][1], language="zh-hans")
    Group.objects.create(name="walkers")
    image = AllowedImage.objects.create(institution=institution, kind="jupyter", reference="walk/jupyter:1", label="Walk")
    catalogue = TemplateFactory(institution=institution, name="catalogue", slug="catalogue")  # not yet offered by the course
    CourseQuota.objects.filter(course=course).update(budget_core_percent_hours=1000, budget_gib_hours=1000)
    UserFactory(username="outsider")

    people = {
        "anonymous": None,
        "student": world["students"][0],
        "assistant": assistant,
        "instructor": world["instructor"],
        "operator": operator,
        "platform": platform,
        "superuser": superuser,
    }
    admin_objects = {}
    for model in apps.get_models():
        first = model._default_manager.order_by("pk").values_list("pk", flat=True).first()
        admin_objects[(model._meta.app_label, model._meta.model_name)] = first if first is not None else 0
    admin_objects[("auth", "user")] = world["students"][3].pk  # not a walker: the admin may delete it
    return World(
        people=people,
        ids={
            "course_id": course.pk,
            "session_id": session.pk,
            "reservation_id": reservation.pk,
            "card_id": session.allocation.card_id,
            "node_id": world["node"].pk,
            "token_id": token.pk,
            "client_id": client.pk,
            "subscription_id": subscription.pk,
            "webhook_id": subscription.pk,
            "delivery_id": delivery.pk,
            "registration_id": registration.pk,
            "content_type_id": ContentType.objects.get_for_model(course).pk,
            "id": world["students"][3].pk,
            "url": "no-such-page/",
            # An invitation link that is no one's: the walk sees its refusal (tests/accounts/test_invitation.py the rest).
            "uidb64": "MQ",
            "token": "walk-token",
            "template": world["small"].slug,
        },
        values={
            "course": str(course.pk),
            "small": str(world["small"].pk),
            "medium": str(world["medium"].pk),
            "institution": str(institution.pk),
            "tomorrow": (timezone.localdate() + timedelta(days=1)).isoformat(),
            "student": world["students"][0].username,
            "outsider": "outsider",
            "image": str(image.pk),
            "catalogue": str(catalogue.pk),
        },
        admin_objects=admin_objects,
        admin_apps=sorted({model._meta.app_label for model in admin.site._registry}),
        api_token=secret,
    )


# --- forms ----------------------------------------------------------------------------------------------


@dataclass
class Form:
    action: str  # a path
    fields: list[tuple[str, str]] = field(default_factory=list)
    method: str = "post"

    def signature(self) -> tuple:
        return (
            urlsplit(self.action).path,
            tuple(sorted({name for name, _ in self.fields if name != "csrfmiddlewaretoken"})),
            tuple(v for n, v in self.fields if n == "action"),
            self.method,
        )


def page_forms(page_path: str, html: str) -> list[Form]:
    """The forms of a page, each with the values a browser would send as it is (one per named
    submit button: the button is part of the body)."""
    found = []
    for form in BeautifulSoup(html, "html.parser").find_all("form"):
        if form.find_parent("template"):
            continue  # one a script copies and fills in
        action = urljoin(page_path, form.get("action") or page_path)
        if urlsplit(action).netloc and urlsplit(action).netloc != "testserver":
            continue  # posted to another site (the LMS)
        action = urlsplit(action)._replace(scheme="", netloc="").geturl()
        fields: list[tuple[str, str]] = []
        radios: dict[str, str] = {}
        buttons: list[tuple[str, str]] = []
        for element in form.find_all(["input", "select", "textarea", "button"]):
            name = element.get("name")
            if not name or element.has_attr("disabled"):
                continue
            kind = element.get("type", "submit" if element.name == "button" else "text").lower()
            if element.name in ("input", "button") and kind in ("submit", "image"):
                buttons.append((name, element.get("value", "")))
            elif element.name == "input" and kind in ("button", "reset", "file"):
                continue
            elif kind == "radio":
                if element.has_attr("checked") or name not in radios:
                    radios[name] = element.get("value", "on")
            elif kind == "checkbox":
                if element.has_attr("checked"):
                    fields.append((name, element.get("value", "on")))
            elif element.name == "select":
                options = element.find_all("option")
                chosen = [o for o in options if o.has_attr("selected")] or options[:1]
                fields += [(name, o.get("value", o.get_text())) for o in chosen]
            elif element.name == "textarea":
                fields.append((name, element.get_text().removeprefix("\n")))  # as HTML parsers read it
            else:
                fields.append((name, element.get("value", "")))
        fields += radios.items()
        method = form.get("method", "get").lower()
        for button in buttons or [None]:
            found.append(Form(action, fields + ([button] if button else []), method))
    return found


def valid_body(form_fields: list[tuple[str, str]], key: str, values: dict[str, str]) -> dict[str, list[str] | str]:
    body: dict[str, list[str] | str] = {}
    for name, value in form_fields:
        body.setdefault(name, [])
        body[name].append(value)  # type: ignore[union-attr]
    for name, value in POSTS.get(key, {}).items():
        name = name.format(**values)
        if not any(v.strip() for v in body.get(name, [])):  # the form left it empty or unchecked, or has no such field
            body[name] = [v.format(**values) for v in value] if isinstance(value, list) else value.format(**values)
    return body


def dangling_descriptions(html: str) -> list[str]:
    """The ids an ``aria-describedby`` names that no element of the page has (a screen reader
    then reads no help at all; axe does not check it)."""
    soup = BeautifulSoup(html, "html.parser")
    ids = {element["id"] for element in soup.find_all(id=True)}
    named = (name for element in soup.find_all(attrs={"aria-describedby": True}) for name in element["aria-describedby"].split())
    return sorted({name for name in named if name not in ids})


# --- the walk -------------------------------------------------------------------------------------------


def walked_by(role: str, route: Route) -> bool:
    if route.key in EXCLUDED:
        return False
    admin = route.key.startswith("admin:") or route.route.startswith("admin/")
    return not admin or role == "superuser" or route.key in ADMIN_FOR_EVERYONE


@dataclass
class Walk:
    role: str
    language: str
    world: World
    client: AsgiClient
    answers: list[tuple[str, str, str, int]] = field(default_factory=list)  # (what, pattern key, path, status)
    failures: list[str] = field(default_factory=list)

    def credentials(self, path: str) -> dict[str, str]:
        """The machine credentials this visitor holds: an institution's operator makes its LMS's
        API token, a platform operator runs the Prometheus that scrapes /metrics."""
        if path.startswith("/api/") and self.role == "operator":
            return {"Authorization": f"Bearer {self.world.api_token}"}
        if path == "/metrics" and self.role == "platform":
            return {"Authorization": f"Bearer {METRICS_TOKEN}"}
        return {}

    async def send(self, method: str, path: str, what: str = "", **kwargs) -> httpx.Response:
        response = await self.client.arequest(method, path, headers=self.credentials(path), **kwargs)
        key = key_of(path) or path
        self.answers.append((method + what, key, path, response.status_code))
        where = f"{method}{what} {path} [{key}] as {self.role} in {self.language}"
        if response.status_code >= 500:
            self.failures.append(f"{where}: {response.status_code}")
        elif response.status_code == 200 and response.headers.get("content-type", "").startswith("text/html"):
            lang = re.search(r"<html[^>]*\blang=\"([^\"]+)\"", response.text)
            if lang and lang.group(1).lower() != self.language:
                self.failures.append(f"{where}: the page is in {lang.group(1)}")
            # The admin's templates are Django's own (its tabular inlines and password field name
            # help they show elsewhere); the portal's pages are checked.
            if not path.startswith("/admin/") and (dangling := dangling_descriptions(response.text)):
                self.failures.append(f"{where}: aria-describedby names no element: {dangling}")
        return response

    async def follow(self, response: httpx.Response) -> None:
        """A valid POST's redirect, as the browser follows it: the page that shows its message."""
        location = response.headers.get("location", "")
        if 300 <= response.status_code < 400 and location.startswith("/") and not location.startswith("//"):
            await self.send("GET", location, " (after POST)")


async def walk(run: Walk) -> Walk:
    """GET every URL pattern, then POST every form the pages showed (and the forms of ``POSTS``
    no page showed this visitor) with a valid body, then an invalid one."""
    world, user = run.world, run.world.people[run.role]
    by_key = {route.key: route for route in routes()}
    forms: dict[tuple, Form] = {}
    for route in by_key.values():
        if walked_by(run.role, route):
            for path in paths_of(route, world):
                response = await run.send("GET", path)
                if response.status_code == 200 and response.headers.get("content-type", "").startswith("text/html"):
                    for form in page_forms(path, response.text):
                        forms.setdefault(form.signature(), form)
    for form in [form for form in forms.values() if form.method == "get"]:  # filters: as they are, and with NULs
        await run.send("GET", form.action, " (form)", params=form.fields)
        await run.send("GET", form.action, " (form, invalid)", params=[(name, NUL) for name, _ in form.fields])
        del forms[form.signature()]

    plan: list[tuple[str, str, list[tuple[str, str]]]] = []  # (pattern key, path, the form's fields)
    for form in forms.values():
        key = key_of(form.action) or form.action
        if key in POST_EXCLUDED:
            continue
        if key not in POSTS and not form.action.startswith("/admin/"):  # the admin's forms are posted as they are
            run.failures.append(f"a form posts to {form.action} [{key}]: no valid body in POSTS, nor a reason in POST_EXCLUDED")
            continue
        plan.append((key, form.action, form.fields))
    shown = {key for key, _, _ in plan}
    plan += [(key, path, []) for key in POSTS if key not in shown for path in paths_of(by_key[key], world)]
    last = {key: n for n, key in enumerate(POST_LAST)}
    plan.sort(key=lambda step: (last.get(step[0], -1), _destroys(*step)))

    username = user.username if user is not None else world.values["student"]
    values = {**world.values, "username": username, "language": run.language}
    for key, path, form_fields in plan:
        body = valid_body(form_fields, key, values)
        body["csrfmiddlewaretoken"] = await run.client.acsrf_token()  # a login changes it
        await run.follow(await run.send("POST", path, " (valid)", data=body))
        body = {name: NUL for name in body} | {"csrfmiddlewaretoken": await run.client.acsrf_token()}
        await run.send("POST", path, " (invalid)", data=body)
    for key, names in INVALID_ONLY.items():
        body = dict.fromkeys(names, NUL) | {"csrfmiddlewaretoken": await run.client.acsrf_token()}
        for path in paths_of(by_key[key], world):
            await run.send("POST", path, " (invalid)", data=body)
    return run


def _destroys(key: str, path: str, form_fields: list[tuple[str, str]]) -> bool:
    """Whether the step's valid POST ends something the others use (such steps go after the others)."""
    if key.endswith("_delete") or ("action", "delete") in form_fields:
        return True
    return any(part in path for part in ("/delete/", "/revoke/", "/archive/", "/cancel/", "/stop"))


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("language", LANGUAGES)
@pytest.mark.parametrize("role", ROLES)
def test_every_url_answers_every_visitor_in_both_languages_without_a_server_error(walk_world, role, language, settings):
    settings.API_PROGRESS_MAX_SECONDS = 1  # the API's progress stream of a session that is not running yet
    settings.METRICS_TOKEN = METRICS_TOKEN
    client = AsgiClient(user=walk_world.people[role], language=language)

    run = asyncio.run(walk(Walk(role, language, walk_world, client)))

    # What was walked, pattern by pattern (shown with -rP or -s, and with any failure).
    statuses: dict[str, list[str]] = {}
    for what, key, _path, status in run.answers:
        statuses.setdefault(key, []).append(f"{what} {status}")
    print(f"{role}, {language}: {len(run.answers)} requests to {len(statuses)} URL patterns")
    for key, answers in sorted(statuses.items()):
        print(f"  {key}: {', '.join(answers)}")
    missed = sorted(route.key for route in routes() if walked_by(role, route) and route.key not in statuses)
    assert not missed, f"URL patterns the walk did not reach: {missed}"
    assert not run.failures, "\n".join(run.failures)


def test_every_url_pattern_is_walked_or_excluded_with_a_reason():
    """The tables name only URL patterns that exist, and each POST target is a pattern."""
    keys = {route.key for route in routes()}
    assert len(keys) > 150  # the whole URLconf, the admin's included
    for table in (EXCLUDED, POSTS, INVALID_ONLY, POST_EXCLUDED, QUERIES):
        assert set(table) <= keys, sorted(set(table) - keys)
    assert all(reason.strip() for reason in (*EXCLUDED.values(), *POST_EXCLUDED.values()))
    assert not set(POSTS) & set(INVALID_ONLY)
