"""A student opens their course's model endpoint, makes a key, and calls the model with it through
the gateway (streamed, under Daphne); the instructor then sees the student's tokens and changes the
endpoint's limits. In English and in Chinese; the pages pass axe-core and fit a phone."""

from __future__ import annotations

import httpx
import pytest
from playwright.sync_api import expect

from labs.models import CourseEndpoint
from tests.browser.test_instructor_console import DESKTOP, Checker, log_in, t
from tests.conftest import wait_for
from tests.gateway.conftest import class_endpoint, upstream  # noqa: F401  (the fixtures)

pytestmark = [pytest.mark.browser, pytest.mark.slow]


@pytest.mark.parametrize("language", ["en", "zh-hans"])
def test_a_student_makes_a_key_and_the_instructor_sees_the_tokens(
    class_endpoint,  # noqa: F811
    upstream,  # noqa: F811
    portal_server,
    browser_page,
    language,
):
    course, student = class_endpoint["course"], class_endpoint["students"][1]
    page = browser_page
    page.set_viewport_size(DESKTOP)
    check = Checker(page, language)
    log_in(page, portal_server, student.username, language)

    page.goto(portal_server + "/")
    page.locator("[data-testid=endpoint-link]").click()
    expect(page.locator("[data-testid=endpoint-url]")).to_have_text(f"{portal_server}/gateway/{class_endpoint['endpoint'].pk}/v1")
    expect(page.locator("[data-testid=key-state]")).to_have_text(t(language, "You have no key yet."))
    check("endpoint-student")
    page.locator("[data-testid=new-key]").click()
    key = page.locator("[data-testid=endpoint-key]").inner_text()
    assert key.startswith("npk_")
    expect(page.locator("[data-testid=endpoint-curl]")).to_contain_text(f"Bearer {key}")
    check("endpoint-student-new-key")

    with httpx.Client(base_url=portal_server, timeout=30) as http:
        body = {"model": "fake-model", "stream": True, "messages": [{"role": "user", "content": "hello there"}]}
        response = http.post(
            f"/gateway/{class_endpoint['endpoint'].pk}/v1/chat/completions",
            json=body,
            headers={"Authorization": f"Bearer {key}"},
        )
        assert response.status_code == 200 and "data: [DONE]" in response.text

    page.goto(f"{portal_server}/courses/{course.pk}/model/")
    expect(page.locator("[data-testid=endpoint-key]")).to_have_count(0)  # shown once
    expect(page.locator("[data-testid=key-state]")).to_contain_text(key.split("_")[1])

    page.context.clear_cookies()
    log_in(page, portal_server, class_endpoint["instructor"].username, language)
    page.goto(f"{portal_server}/courses/{course.pk}/")
    page.get_by_role("link", name=t(language, "Model endpoint")).click()
    row = page.locator(f"[data-testid=endpoint-tokens] tr[data-student='{student.username}']")
    expect(row.locator("[data-field=week]")).not_to_have_text("0")
    check("endpoint-instructor")
    page.fill("#id_requests_per_minute", "0")
    page.get_by_role("button", name=t(language, "Save"), exact=True).click()
    expect(page.get_by_text(t(language, "Between 1 and %(most)s requests a minute.") % {"most": 6000})).to_be_visible()
    page.fill("#id_requests_per_minute", "12")
    page.fill("#id_weekly_tokens_per_student", "20000")
    page.get_by_role("button", name=t(language, "Save"), exact=True).click()
    expect(page.get_by_text(t(language, "Model endpoint saved."))).to_be_visible()
    endpoint = wait_for(lambda: CourseEndpoint.objects.filter(pk=class_endpoint["endpoint"].pk, requests_per_minute=12).first())
    assert endpoint.weekly_tokens_per_student == 20000
