"""Under the portal's strict Content-Security-Policy, Chromium reports no violation on any page:
login, the student's home with its live card (websocket), the instructor's course page and the
usage chart (hovered, so ECharts draws its tooltip), and the Django admin's widgets."""

from __future__ import annotations

import pytest
from playwright.sync_api import expect

from labs.models import AllowedImage
from labs.services.allocation import allocation_pass
from labs.services.sessions import session_launch
from tests.browser.test_instructor_console import DESKTOP, Checker
from tests.factories import PASSWORD, UserFactory

pytestmark = [pytest.mark.browser, pytest.mark.slow]

# Every violation, whether or not Chromium also logs it: the event fires for blocked scripts,
# styles, style attributes, handlers and connections alike.
LISTEN = """
window.__csp = [];
document.addEventListener("securitypolicyviolation", (e) => {
  window.__csp.push(`${e.violatedDirective} blocked ${e.blockedURI || "inline"} at ${e.sourceFile}:${e.lineNumber}`);
});
"""


class Watch:
    """A browser context whose pages report CSP violations, from the event and from the console."""

    def __init__(self, browser, base_url: str) -> None:
        self.base_url = base_url
        self.context = browser.new_context(viewport=DESKTOP)
        self.context.add_init_script(LISTEN)
        self.page = self.context.new_page()
        self.console: list[str] = []
        self.page.on("console", lambda m: self.console.append(m.text) if "Content Security Policy" in m.text else None)

    def visit(self, path: str) -> None:
        response = self.page.goto(self.base_url + path)
        assert response is not None and "default-src 'self'" in response.headers["content-security-policy"]

    def log_in(self, username: str) -> None:
        self.visit("/accounts/login/")
        self.page.fill("#id_username", username)
        self.page.fill("#id_password", PASSWORD)
        self.page.click("button[type=submit]")
        self.page.wait_for_load_state("networkidle")

    def assert_clean(self, where: str) -> None:
        self.page.wait_for_load_state("networkidle")
        reported = self.page.evaluate("window.__csp")
        assert not reported and not self.console, f"{where}: {reported} {self.console}"


def test_no_page_reports_a_content_security_policy_violation(world, portal_server, browser_page):
    browser = browser_page.context.browser
    course, student = world["course"], world["students"][0]
    session_launch(student=student, course=course, template=world["small"])
    allocation_pass()  # an allocation: the usage chart has a bar and a line to draw
    AllowedImage.objects.create(institution=course.institution, kind="jupyter", reference="quay.io/jupyter/scipy-notebook")

    visitor = Watch(browser, portal_server)
    visitor.visit("/accounts/login/")
    visitor.assert_clean("login")
    with visitor.page.expect_navigation():
        visitor.page.select_option("select[name=language]", "zh-hans")  # the switch is a static script
    expect(visitor.page.locator("html")).to_have_attribute("lang", "zh-hans")
    visitor.assert_clean("language switch")
    for _ in range(5):
        visitor.page.fill("#id_username", "mallory")
        visitor.page.fill("#id_password", "wrong-password")
        visitor.page.click("button[type=submit]")
    expect(visitor.page.locator("#lockout")).to_be_visible()
    visitor.assert_clean("lockout page")
    Checker(visitor.page, "zh-hans")("lockout")  # and readable: axe-core, 390 px

    pupil = Watch(browser, portal_server)
    pupil.log_in(student.username)
    expect(pupil.page.locator("article.session")).to_have_count(1)
    expect(pupil.page.locator("body[data-live=yes]")).to_have_count(1)  # the websocket is open
    pupil.assert_clean("student home")

    teacher = Watch(browser, portal_server)
    teacher.log_in(world["instructor"].username)
    teacher.assert_clean("console home")
    teacher.visit(f"/courses/{course.pk}/")
    expect(teacher.page.locator("body[data-live=yes]")).to_have_count(1)
    teacher.assert_clean("course page")
    teacher.visit(f"/courses/{course.pk}/templates/")
    teacher.page.fill("#id_core_percent", "10")
    teacher.page.fill("#id_memory_mib", "8")
    expect(teacher.page.locator("[data-fit=cluster]")).not_to_be_empty()
    teacher.assert_clean("templates with the live preview")
    teacher.visit(f"/courses/{course.pk}/usage/")
    chart = teacher.page.locator("#usage-chart[data-ready=yes]")
    expect(chart).to_have_count(1)
    teacher.assert_clean("usage chart drawn")
    box = chart.bounding_box()
    assert box is not None
    teacher.page.mouse.move(box["x"] + box["width"] * 0.9, box["y"] + box["height"] * 0.5)
    # The tooltip is drawn inside the chart's canvas (no element to wait for): a fixed moment.
    teacher.page.wait_for_timeout(300)
    teacher.assert_clean("usage chart with its tooltip")


def test_the_django_admin_reports_no_violation_either(world, portal_server, browser_page):
    browser = browser_page.context.browser
    UserFactory(username="operator", is_staff=True, is_superuser=True)
    operator = Watch(browser, portal_server)
    operator.visit("/admin/login/")
    operator.page.fill("#id_username", "operator")
    operator.page.fill("#id_password", PASSWORD)
    operator.page.click("input[type=submit]")
    operator.page.wait_for_load_state("networkidle")
    operator.assert_clean("admin index")
    student = world["students"][0]
    for path in (
        "/admin/auth/user/",
        f"/admin/auth/user/{student.pk}/change/",  # the two-box group and permission pickers
        f"/admin/labs/course/{world['course'].pk}/change/",  # date widgets
        "/admin/axes/accessattempt/",
    ):
        operator.visit(path)
        operator.assert_clean(path)
    operator.visit(f"/admin/labs/course/{world['course'].pk}/change/")
    shortcut = operator.page.locator(".datetimeshortcuts a").first
    if shortcut.count():
        shortcut.click()  # "Today" or the calendar: widgets built by script
    operator.assert_clean("admin date widget")
