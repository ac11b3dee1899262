"""The roster import in a browser, in English and Chinese: the preview shows its counts and every
problem of a row; after the import each new account's invitation link is shown with a copy
button, and the student who opens it sets a password and logs in. Each page passes axe-core
and fits 390 px."""

from __future__ import annotations

import pytest
from playwright.sync_api import expect

from labs.models import Enrollment
from tests.browser.test_instructor_console import DESKTOP, Checker, log_in, t
from tests.factories import UserFactory, affiliate

pytestmark = [pytest.mark.browser, pytest.mark.slow]

NEW_PASSWORD = "lantern-orbit-42"


@pytest.mark.parametrize("language", ["en", "zh-hans"])
def test_an_instructor_previews_an_import_sends_an_invitation_and_the_student_gets_in(
    world, portal_server, browser_page, tmp_path, language
):
    course = world["course"]
    students = world["students"]
    affiliate([UserFactory(username="known")], course.institution)
    page = browser_page
    page.set_viewport_size(DESKTOP)
    page.context.grant_permissions(["clipboard-read", "clipboard-write"], origin=portal_server)
    check = Checker(page, language)
    log_in(page, portal_server, world["instructor"].username, language)

    page.goto(f"{portal_server}/courses/{course.pk}/roster/")
    csv_path = tmp_path / "roster.csv"
    csv_path.write_text(
        "username,email,role\n"
        f"{students[0].username},,student\n"
        f"{students[1].username},,assistant\n"
        "known,,student\n"
        "new-li,li@example.edu,student\n"
        "bad user!,not-an-email,professor\n"
    )
    page.set_input_files("#id_file", str(csv_path))
    page.get_by_role("button", name=t(language, "Preview")).click()

    expect(page.get_by_role("heading", name=t(language, "Preview of the import"))).to_be_visible()
    summary = page.get_by_test_id("import-summary")
    for count, figure in {"add": "2", "update": "1", "unchanged": "1", "rejected": "1"}.items():
        expect(summary.locator(f"[data-count={count}] dd").first).to_have_text(figure)
    expect(page.locator("tr[data-action=error] ul.problems li")).to_have_count(3)
    expect(page.get_by_test_id("sign-in")).to_be_visible()
    assert not Enrollment.objects.filter(course=course, user__username="known").exists()
    check("roster-preview")

    page.get_by_role("button", name=t(language, "Import these changes")).click()
    result = page.get_by_test_id("import-result")
    expect(result.locator("[data-count=add] dd").first).to_have_text("2")
    row = page.locator("tr[data-invitation=new-li]")
    link = row.locator(".invitation-link").inner_text().strip()
    assert link.startswith(portal_server + "/accounts/invitation/")
    row.get_by_role("button").click()
    expect(row.get_by_role("button")).to_have_text(t(language, "Copied"))
    assert page.evaluate("navigator.clipboard.readText()") == link
    check("roster-import-done")

    student_context = page.context.browser.new_context(viewport=DESKTOP)
    student_context.add_cookies([{"name": "django_language", "value": language, "url": portal_server}])
    student = student_context.new_page()
    student.goto(link)
    expect(student.locator("html")).to_have_attribute("lang", language)
    Checker(student, language)("invitation")
    student.fill("#id_new_password1", NEW_PASSWORD)
    student.fill("#id_new_password2", NEW_PASSWORD)
    student.locator("form.form button[type=submit]").click()
    expect(student.locator("#id_username")).to_be_visible()
    student.fill("#id_username", "new-li")
    student.fill("#id_password", NEW_PASSWORD)
    student.click("button[type=submit]")
    expect(student.locator("form[action='/accounts/logout/']")).to_have_count(1)
    student.goto(link)  # used: refused with a page that says so
    expect(student.get_by_test_id("invitation-refused")).to_be_visible()


@pytest.mark.parametrize("language", ["en", "zh-hans"])
def test_the_csv_example_fits_a_390_px_phone(world, portal_server, browser_page, language):
    """The example is read, not scrolled: at 390 px neither the page nor the example scrolls sideways."""
    page = browser_page
    page.set_viewport_size({"width": 390, "height": 844})
    log_in(page, portal_server, world["instructor"].username, language)

    page.goto(f"{portal_server}/courses/{world['course'].pk}/roster/")
    example = page.locator("pre.example")
    expect(example).to_contain_text("s2026001,li.wei@example.edu,student,Wei,Li")

    assert page.evaluate("document.scrollingElement.scrollWidth") <= 390
    assert example.evaluate("e => e.scrollWidth <= e.clientWidth"), "the example scrolls sideways"
    box = example.bounding_box()
    assert box["x"] >= 0 and box["x"] + box["width"] <= 390
