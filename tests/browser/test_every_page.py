"""Every page not walked through by the flow tests, in both languages: axe-core finds nothing
serious or critical, nothing scrolls sideways at 390 px, and the page is in the chosen language."""

from __future__ import annotations

import pytest
from playwright.sync_api import expect

from labs.services.sessions import session_launch
from tests.browser.test_instructor_console import DESKTOP, Checker, t
from tests.factories import PASSWORD

pytestmark = [pytest.mark.browser, pytest.mark.slow]


def signed_in(browser, base_url: str, username: str | None, language: str):
    context = browser.new_context(viewport=DESKTOP)
    context.add_cookies([{"name": "django_language", "value": language, "url": base_url}])
    page = context.new_page()
    page.goto(base_url + "/accounts/login/")
    if username:
        page.fill("#id_username", username)
        page.fill("#id_password", PASSWORD)
        page.click("button[type=submit]")
        page.wait_for_load_state("networkidle")
    return page


@pytest.mark.parametrize("language", ["en", "zh-hans"])
def test_the_login_student_and_course_admin_pages_are_accessible_in_both_languages(world, portal_server, browser_page, language):
    browser = browser_page.context.browser
    course = world["course"]
    student = world["students"][0]
    session_launch(student=student, course=course, template=world["small"])  # a queued card

    anonymous = signed_in(browser, portal_server, None, language)
    expect(anonymous.locator("html")).to_have_attribute("lang", language)
    Checker(anonymous, language)("login")

    page = signed_in(browser, portal_server, student.username, language)
    expect(page.get_by_role("heading", name=t(language, "Launch a lab"))).to_be_visible()
    expect(page.locator("article.session")).to_have_count(1)
    Checker(page, language)("student-home")

    teacher = signed_in(browser, portal_server, world["instructor"].username, language)
    check = Checker(teacher, language)
    for part, name, heading in (
        ("edit/", "course-edit", "End of term"),
        ("archive/", "course-archive", "Archive this course"),
        ("quota/", "quota", "Quota"),
    ):
        teacher.goto(f"{portal_server}/courses/{course.pk}/{part}")
        expect(teacher.get_by_role("heading", name=t(language, heading), exact=True)).to_be_visible()
        check(name)
