"""Platform storage in Chromium: an LMS page (on 127.0.0.1) frames the tool (on localhost, another
site, so the browser keeps none of the tool's cookies in the frame) and answers its lti.put_data
and lti.get_data messages. The launch succeeds with the state and nonce kept by the LMS's page,
and is refused when the LMS gives back another state. In English and Chinese. The portal runs
under Daphne, the platform beside it."""

from __future__ import annotations

import time
from urllib.parse import urlencode

import pytest

from lti.models import Identity
from lti.services import registration_save
from tests.browser.conftest import chromium_page
from tests.factories import InstitutionFactory
from tests.lti.platform import Platform

pytestmark = [pytest.mark.browser, pytest.mark.slow]


@pytest.fixture
def lms(portal_server):
    platform = Platform(tool_jwks_url=portal_server + "/lti/jwks/", storage_target="_parent").start()
    fields = {
        "name": "Test LMS",
        "issuer": platform.issuer,
        "client_id": platform.client_id,
        "auth_login_url": platform.url + "/auth",
        "auth_token_url": platform.url + "/token",
        "auth_audience": "",
        "keyset_url": platform.url + "/jwks",
    }
    institution = InstitutionFactory(slug="lti-storage")
    registration_save(by=None, institution=institution, fields=fields, deployment_ids=[platform.deployment_id])
    yield platform
    platform.stop()


@pytest.fixture
def browser_page(monkeypatch):
    """The suite's browser with the tool's frame kept in the LMS page's process: across sites
    (``localhost`` in ``127.0.0.1``) Chromium moves a frame to a process of its own at each
    navigation, and Playwright sometimes lost it there (in CI its frame stopped answering after the
    LMS's form post while the tool's pages arrived). Cookies are kept apart by site all the same."""
    same_process = ("--disable-site-isolation-trials", "--disable-features=IsolateOrigins,site-per-process")
    yield from chromium_page(monkeypatch, same_process)


def _open_course(browser_page, lms: Platform, portal_server: str, language: str):
    """The LMS's course page, framing the tool's login; returns the page, the tool's frame and its origin."""
    tool = portal_server.replace("127.0.0.1", "localhost")
    login = tool + "/lti/login/?" + urlencode(lms.login_params(target_link_uri=tool + "/lti/launch/"))
    context = browser_page.context.browser.new_context(locale="zh-CN" if language == "zh-hans" else "en-US")
    page = context.new_page()
    page.events = []
    page.on("console", lambda m: page.events.append("console: " + m.text))
    page.on("requestfailed", lambda r: page.events.append(f"failed: {r.url} {r.failure}"))
    page.on("framenavigated", lambda f: page.events.append("nav: " + f.url[:120]))
    page.on("request", lambda r: page.events.append(f"request: {r.method} {r.url[:80]}"))
    page.on("response", lambda r: page.events.append(f"response: {r.status} {r.url[:80]}"))
    page.goto(lms.url + "/course?" + urlencode({"launch": login}))
    return page, page.frame_locator("iframe[name=tool]"), tool


def _tool_frame_says(page, marker: str) -> bool:
    """Whether the frame named "tool" holds an element with the attribute ``marker``, waited for at
    most a second: ``Frame.content()`` once waited 300 s for a document while the frame was between
    the LMS's form post and the tool's answer; a wait for a selector keeps its timeout."""
    tool = page.frame(name="tool")
    if tool is None:
        return False
    try:
        tool.wait_for_selector(f"[{marker}]", state="attached", timeout=1000)
    except Exception:  # noqa: BLE001 - not there yet, or the frame is between two documents
        return False
    return True


def _wait_for_tool_frame(page, marker: str, tmp_path, timeout: float = 60) -> None:
    """Until the frame the LMS page names "tool" holds ``marker``, read as the frame is now (it is
    another site's, navigated by form posts: a locator made before may keep a document that went);
    else fail with the page's requests and navigations and Daphne's log."""
    deadline = time.monotonic() + timeout
    while not _tool_frame_says(page, marker):
        if time.monotonic() > deadline:
            log = tmp_path / "web.log"
            web = log.read_text(errors="replace")[-4000:] if log.exists() else ""
            raise AssertionError(f"{page.events}\nDaphne's log:\n{web}")
        time.sleep(0.2)


@pytest.mark.parametrize("language", ["en", "zh-hans"])
def test_a_framed_launch_keeps_its_state_in_the_lms_page_and_signs_the_student_in(
    portal_server, browser_page, lms, language, tmp_path
):
    lms.next_launch = {"sub": f"framed-{language}"}

    page, frame, tool = _open_course(browser_page, lms, portal_server, language)

    _wait_for_tool_frame(page, "data-lti-open", tmp_path)  # "You are signed in", in the frame
    frame = page.frame(name="tool")
    assert frame.locator("html").get_attribute("lang") == language
    assert Identity.objects.filter(subject=f"framed-{language}").exists()
    messages = page.evaluate("window.__storage")
    assert sorted(m.split(" ")[0] for m in messages) == ["lti.get_data", "lti.get_data", "lti.put_data", "lti.put_data"]
    assert not page.context.cookies(tool)  # the tool kept no cookie: the state and nonce came from the LMS
    with page.context.expect_page() as opened:
        frame.locator("[data-lti-open] button").click()
    window = opened.value
    window.wait_for_url(tool + "/", timeout=60000)  # signed in, first-party, by the one-time token
    assert window.locator("header .who").inner_text() == "Ada Lovelace"
    page.context.close()


@pytest.mark.parametrize("language", ["en", "zh-hans"])
def test_a_framed_launch_is_refused_when_the_lms_gives_back_another_state(
    portal_server, browser_page, lms, language, tmp_path
):
    lms.next_launch = {"sub": f"forged-{language}"}
    lms.storage_forged = True

    page, frame, _tool = _open_course(browser_page, lms, portal_server, language)

    _wait_for_tool_frame(page, "data-lti-error", tmp_path)
    frame = page.frame(name="tool")
    assert frame.locator("html").get_attribute("lang") == language
    if language == "en":
        assert "could not confirm that this launch was started in this browser" in frame.locator("[role=alert]").inner_text()
    assert not Identity.objects.filter(subject=f"forged-{language}").exists()
    page.context.close()
