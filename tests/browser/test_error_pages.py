"""The error pages in Chromium, in English and Chinese: the portal's header and style, the
language menu that switches a 404 page's language, a heading axe-core accepts, and no sideways
scrolling at 390 px; the CSRF failure of a form sent after its token changed, in the same dress."""

from __future__ import annotations

import pytest
from playwright.sync_api import expect

from tests.browser.test_instructor_console import Checker, log_in
from tests.factories import UserFactory

pytestmark = [pytest.mark.browser, pytest.mark.slow]

HEADINGS = {
    "en": {"404": "Page not found", "403": "Not allowed", "csrf": "The form has expired"},
    "zh-hans": {"404": "找不到页面", "403": "无权访问", "csrf": "表单已过期"},
}


@pytest.mark.parametrize("language", ["en", "zh-hans"])
def test_a_missing_a_refused_and_an_expired_page_wear_the_portals_dress(world, portal_server, browser_page, language):
    page, check, words = browser_page, Checker(browser_page, language), HEADINGS[language]
    log_in(page, portal_server, UserFactory().username, language)

    response = page.goto(portal_server + "/no-such-page/")
    assert response is not None and response.status == 404
    expect(page.locator("h1")).to_have_text(words["404"])
    expect(page.locator("header.top a.brand")).to_be_visible()
    assert page.evaluate("getComputedStyle(document.querySelector('section.panel')).borderRadius") == "8px"
    check("404")

    response = page.goto(portal_server + "/teach/courses/new/")
    assert response is not None and response.status == 403
    expect(page.locator("h1")).to_have_text(words["403"])
    check("403")

    page.goto(portal_server + "/")
    page.context.clear_cookies(name="csrftoken")  # the token the page holds no longer matches
    with page.expect_navigation():
        page.locator("header.top form button.link").click()  # Log out: a POST form
    expect(page.locator("h1")).to_have_text(words["csrf"])
    check("csrf")
