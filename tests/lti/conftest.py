"""The tool over real HTTP (pytest-django's live server) and a real platform beside it (tests/lti/platform.py)."""

from __future__ import annotations

import re
from html import unescape

import pytest
import requests

from lti.services import registration_save
from tests.factories import InstitutionFactory, TemplateFactory
from tests.lti.platform import Platform


@pytest.fixture
def platform(live_server):
    lms = Platform(tool_jwks_url=live_server.url + "/lti/jwks/").start()
    yield lms
    lms.stop()


@pytest.fixture
def registration(platform):
    institution = InstitutionFactory(slug="lti-uni", name="LTI University")
    fields = {
        "name": "Test LMS",
        "issuer": platform.issuer,
        "client_id": platform.client_id,
        "auth_login_url": platform.url + "/auth",
        "auth_token_url": platform.url + "/token",
        "auth_audience": "",
        "keyset_url": platform.url + "/jwks",
    }
    return registration_save(by=None, institution=institution, fields=fields, deployment_ids=[platform.deployment_id])


@pytest.fixture
def catalogue(registration):
    return [
        TemplateFactory(institution=registration.institution, name="Jupyter small", slug="jupyter-small"),
        TemplateFactory(institution=registration.institution, name="Jupyter large", slug="jupyter-large", core_percent=20),
    ]


class Browser:
    """A browser's view of the flow, with requests: cookies kept, redirects followed by hand."""

    def __init__(self, tool_url: str, platform: Platform) -> None:
        self.tool_url = tool_url
        self.platform = platform
        self.http = requests.Session()

    def login(self, **params: str) -> requests.Response:
        """The LMS opens the tool's login URL; the cookie check passes (as its script would) and
        the tool redirects to the platform's authentication URL."""
        params = self.platform.login_params(target_link_uri=self.tool_url + "/lti/launch/", **params)
        check = self.http.get(self.tool_url + "/lti/login/", params=params, allow_redirects=False, timeout=10)
        assert check.status_code == 200, check.text
        assert 'name="lti1p3_new_window"' in check.text
        forwarded = dict(re.findall(r'<input type="hidden" name="([^"]+)" value="([^"]*)">', check.text))
        return self.http.get(
            self.tool_url + "/lti/login/",
            params={k: unescape(v) for k, v in forwarded.items()},
            allow_redirects=False,
            timeout=10,
        )

    def authenticate(self, **params: str) -> dict:
        redirect = self.login(**params)
        assert redirect.status_code == 302, redirect.text
        assert redirect.headers["Location"].startswith(self.platform.url + "/auth?")
        return self.http.get(redirect.headers["Location"], timeout=10).json()

    def post_launch(self, auth: dict) -> requests.Response:
        data = {"id_token": auth["id_token"], "state": auth["state"]}
        return self.http.post(auth["action"], data=data, allow_redirects=False, timeout=10)

    def launch(self, **spec) -> requests.Response:
        self.platform.next_launch = spec
        return self.post_launch(self.authenticate())

    def get(self, path: str) -> requests.Response:
        return self.http.get(self.tool_url + path, timeout=10)

    def post_form(self, path: str, page: str, data: dict) -> requests.Response:
        token = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', page).group(1)
        data = {"csrfmiddlewaretoken": token, **data}
        return self.http.post(self.tool_url + path, data=data, allow_redirects=False, timeout=10)


@pytest.fixture
def browser(live_server, platform, registration):
    return Browser(live_server.url, platform)


def hidden_inputs(html: str) -> dict[str, str]:
    return {k: unescape(v) for k, v in re.findall(r'<input type="hidden" name="([^"]+)" value="([^"]*)">', html)}


@pytest.fixture
def context(world):
    """The world's course linked to an LMS registered by hand (no platform behind it): for the
    roster sync's services, given the members the platform would list."""
    from lti.models import Context, Registration

    issuer = "https://lms.uni-test.example"
    registration = Registration.objects.create(
        institution=world["course"].institution,
        name="Moodle",
        issuer=issuer,
        client_id="tool",
        auth_login_url=issuer + "/auth",
        auth_token_url=issuer + "/token",
        keyset_url=issuer + "/jwks",
    )
    return Context.objects.create(registration=registration, context_id="ctx-1", course=world["course"])
