"""In Chromium, under the strict CSP: the login's cookie check continues the login (or offers a
new window when the frame may not keep cookies), the platform posts the launch, the student lands
on their page. The portal runs under Daphne, the platform beside it."""

from __future__ import annotations

import pytest

from lti.models import Identity
from lti.services import registration_save
from tests.browser.test_content_security_policy import Watch
from tests.factories import InstitutionFactory, TemplateFactory
from tests.lti.platform import INSTRUCTOR, Platform

pytestmark = [pytest.mark.browser, pytest.mark.slow]

NO_COOKIES = """
Object.defineProperty(document, "cookie", {get() { return ""; }, set(value) {}});
"""


@pytest.fixture
def lms(portal_server):
    platform = Platform(tool_jwks_url=portal_server + "/lti/jwks/").start()
    fields = {
        "name": "Test LMS",
        "issuer": platform.issuer,
        "client_id": platform.client_id,
        "auth_login_url": platform.url + "/auth",
        "auth_token_url": platform.url + "/token",
        "auth_audience": "",
        "keyset_url": platform.url + "/jwks",
    }
    institution = InstitutionFactory(slug="lti-b")
    registration_save(by=None, institution=institution, fields=fields, deployment_ids=[platform.deployment_id])
    TemplateFactory(institution=institution, name="Jupyter small", slug="jupyter-small")
    yield platform
    platform.stop()


def _login_query(platform: Platform, portal: str) -> str:
    from urllib.parse import urlencode

    return "/lti/login/?" + urlencode(platform.login_params(target_link_uri=portal + "/lti/launch/"))


def test_a_launch_in_chromium_checks_cookies_and_lands_the_student_on_their_page(portal_server, browser_page, lms):
    watch = Watch(browser_page.context.browser, portal_server)
    lms.next_launch = {"sub": "browser-student"}

    watch.page.goto(portal_server + _login_query(lms, portal_server), wait_until="commit")
    try:
        watch.page.wait_for_url(portal_server + "/", timeout=20000)
    except Exception:
        raise AssertionError(f"stuck at {watch.page.url}: {watch.page.evaluate('window.__csp')} {watch.console}") from None

    assert Identity.objects.filter(subject="browser-student").exists()
    assert watch.page.locator("header .who").inner_text() == "Ada Lovelace"
    watch.assert_clean("after the LTI launch")


def test_a_frame_that_may_not_keep_cookies_is_offered_a_new_window(portal_server, browser_page, lms):
    watch = Watch(browser_page.context.browser, portal_server)
    watch.context.add_init_script(NO_COOKIES)

    watch.visit(_login_query(lms, portal_server))

    button = watch.page.get_by_role("button", name="Open NPU Lab Portal in a new window")
    button.wait_for()
    assert watch.page.locator("#lti-loading").is_hidden()
    watch.assert_clean("the cookie check")


def test_deep_linking_in_chromium_posts_the_signed_response_back_to_the_lms(portal_server, browser_page, lms):
    watch = Watch(browser_page.context.browser, portal_server)
    lms.next_launch = {"sub": "browser-teacher", "roles": INSTRUCTOR, **lms.deep_link_claims()}

    watch.page.goto(portal_server + _login_query(lms, portal_server), wait_until="commit")
    watch.page.get_by_label("Jupyter small").wait_for()
    watch.assert_clean("the deep-linking picker")
    watch.page.get_by_role("button", name="Add to the LMS").click()
    watch.page.wait_for_url(lms.url + "/deep-link-return")

    (claims,) = lms.deep_link_responses  # verified against the tool's JWKS by the platform
    (item,) = claims["https://purl.imsglobal.org/spec/lti-dl/claim/content_items"]
    assert item["title"] == "Jupyter small"
    assert not watch.console  # the auto-submit to the LMS broke no CSP rule on the way out
