"""In Chromium, in English and Chinese: the instructor adding a lab through deep linking chooses
how the LMS grades it (time on the NPU against a target of their own, here), and the signed
response carries that choice to the link and its line item. Under the strict CSP, axe-clean,
nothing scrolling sideways at 390 px."""

from __future__ import annotations

import pytest
from django.utils import translation

from tests.browser.test_instructor_console import DESKTOP, Checker
from tests.browser.test_lti_launch import _login_query, lms  # noqa: F401 (the fixture)
from tests.lti.platform import INSTRUCTOR

pytestmark = [pytest.mark.browser, pytest.mark.slow]


@pytest.mark.parametrize("language", ["en", "zh-hans"])
def test_the_instructor_chooses_time_on_the_npu_and_the_lms_gets_it(portal_server, browser_page, lms, language):  # noqa: F811
    context = browser_page.context.browser.new_context(viewport=DESKTOP)
    context.add_cookies([{"name": "django_language", "value": language, "url": portal_server}])
    page = context.new_page()
    check = Checker(page, language)
    lms.next_launch = {"sub": "browser-teacher", "roles": INSTRUCTOR, **lms.deep_link_claims()}

    page.goto(portal_server + _login_query(lms, portal_server), wait_until="commit")
    page.locator("input[name=score][value=npu_time]").wait_for()
    assert page.locator("html").get_attribute("lang") == language
    with translation.override(language):
        button = translation.gettext("Add to the LMS")
    check("deep-link-grading")
    page.locator("input[name=score][value=npu_time]").check()
    page.locator("input[name=target_minutes]").fill("90")
    page.get_by_role("button", name=button).click()
    page.wait_for_url(lms.url + "/deep-link-return")

    (claims,) = lms.deep_link_responses  # verified against the tool's JWKS by the platform
    (item,) = claims["https://purl.imsglobal.org/spec/lti-dl/claim/content_items"]
    assert {k: item["custom"].get(k) for k in ("npu_score_source", "npu_target_minutes")} == {
        "npu_score_source": "npu_time",
        "npu_target_minutes": "90",
    }
    assert item["lineItem"] == {
        "scoreMaximum": 100,
        "label": "Jupyter small",
        "resourceId": item["lineItem"]["resourceId"],
        "tag": "npu-lab",
    }
    context.close()
