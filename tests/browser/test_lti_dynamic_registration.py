"""In Chromium, in English and in Chinese: an operator makes a registration link, the LMS opens
it in its frame (the registration page posts ``org.imsglobal.lti.close`` to the LMS when done),
and the operator approves what the LMS registered. The portal runs under Daphne, the LMS beside it."""

from __future__ import annotations

import json

import pytest
from playwright.sync_api import expect

from labs.models import InstitutionRole
from lti.models import Registration
from tests.browser.test_instructor_console import DESKTOP, Checker, t
from tests.conftest import wait_for
from tests.factories import PASSWORD, InstitutionFactory, UserFactory
from tests.lti.platform import Platform
from tests.lti.registrar import Registrar

pytestmark = [pytest.mark.browser, pytest.mark.slow]


@pytest.fixture
def lms(portal_server):
    platform = Platform(tool_jwks_url=portal_server + "/lti/jwks/").start()
    registrar = Registrar(platform).install()
    registrar.closed = []

    def frame(handler, parts) -> None:
        # The LMS's tool-registration page: the tool's registration URL in a frame, and a listener
        # for the message that closes it.
        url = json.dumps(registrar.frame_url)
        page = (
            f"<iframe id='tool' src={url} width='800' height='600'></iframe><script>"
            "addEventListener('message', e => fetch('/closed', {method: 'POST', body: JSON.stringify(e.data)}));"
            "</script>"
        )
        handler._send(200, page.encode(), "text/html")

    def closed(handler, parts) -> None:
        registrar.closed.append(json.loads(handler.rfile.read(int(handler.headers["Content-Length"]))))
        handler._send(200, {})

    platform.routes["GET", "/admin/register-tool"] = frame
    platform.routes["POST", "/closed"] = closed
    yield registrar
    platform.stop()


@pytest.mark.parametrize("language", ["en", "zh-hans"])
def test_an_lms_registers_in_its_frame_and_the_operator_approves_it(portal_server, browser_page, lms, language):
    institution = InstitutionFactory(slug="dyn", name="Dynamic University")
    operator = UserFactory(username="lti-op")
    InstitutionRole.objects.create(user=operator, institution=institution, role="operator")
    context = browser_page.context.browser.new_context(viewport=DESKTOP)
    context.add_cookies([{"name": "django_language", "value": language, "url": portal_server}])
    page = context.new_page()
    check = Checker(page, language)
    page.goto(portal_server + "/accounts/login/")
    page.fill("#id_username", operator.username)
    page.fill("#id_password", PASSWORD)
    page.click("button[type=submit]")

    page.goto(portal_server + "/ops/lti/")
    page.get_by_role("button", name=t(language, "Make a registration link")).click()
    link = page.locator("code.registration-link")
    expect(link).to_be_visible()
    check("ops-lti-registration-link")

    lms.frame_url = link.inner_text() + lms.query()
    administrator = context.new_page()
    administrator.goto(lms.platform.url + "/admin/register-tool")
    frame = administrator.frame_locator("#tool")
    expect(frame.locator("[data-registered]")).to_be_visible()
    wait_for(lambda: lms.closed, message="the registration page's close message")
    assert lms.closed == [{"subject": "org.imsglobal.lti.close"}]
    registration = Registration.objects.get(client_id=lms.client_id)
    assert registration.state == Registration.State.PENDING

    page.goto(portal_server + "/ops/lti/")
    row = page.locator(f"[data-pending-registration='{registration.pk}']")
    expect(row).to_contain_text(lms.client_id)
    check("ops-lti-pending")
    row.get_by_role("button", name=t(language, "Approve")).click()
    expect(page.get_by_text(t(language, "The registration is approved; launches from that LMS are accepted."))).to_be_visible()
    expect(page.locator("[data-pending-registration]")).to_have_count(0)
    expect(page.locator(f"tr[data-registration='{registration.pk}']")).to_be_visible()
    registration.refresh_from_db()
    assert registration.state == Registration.State.ACTIVE
    check("ops-lti-approved")
