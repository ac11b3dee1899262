"""An instructor sets up a course from nothing and runs a lab class in it, in English and in Chinese.

Course, quota (a wrong value first), templates (one from the catalogue, one made here with
the live "how many fit" preview), roster by CSV (preview, then confirm); a student launches;
the instructor sees it live and stops all; usage shows a chart. Every page is checked with
axe-core (no serious or critical violation) and at 390 px wide (no horizontal overflow).

``PORTAL_SCREENSHOTS=<dir>`` saves a screenshot of each page there (docs/consoles.md and the README's come from it).
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from axe_playwright_python.sync_playwright import Axe
from django.utils import translation
from playwright.sync_api import expect

from labs.models import AllowedImage, Course, CourseQuota, Enrollment, InstitutionRole, LabSession, LabTemplate
from tests.factories import PASSWORD, UserFactory, affiliate

pytestmark = [pytest.mark.browser, pytest.mark.slow]

PHONE = {"width": 390, "height": 844}
DESKTOP = {"width": 1280, "height": 900}
AXE = Axe()


def t(language: str, text: str) -> str:
    with translation.override(language):
        return translation.gettext(text)


class Checker:
    """After each page: axe-core finds nothing serious or critical, and nothing scrolls sideways at 390 px."""

    def __init__(self, page, language: str) -> None:
        self.page = page
        self.language = language
        self.shots = Path(os.environ["PORTAL_SCREENSHOTS"]) if os.environ.get("PORTAL_SCREENSHOTS") else None
        self.seen: list[str] = []

    def __call__(self, name: str) -> None:
        page = self.page
        page.wait_for_load_state("networkidle")
        results = AXE.run(page)
        assert "violations" in results.response and results.response["testEngine"]["name"] == "axe-core"
        bad = [v for v in results.response["violations"] if v["impact"] in ("serious", "critical")]
        assert not bad, f"{name}: " + "; ".join(f"{v['id']}: {v['help']} ({len(v['nodes'])})" for v in bad)
        if self.shots:
            self.shots.mkdir(parents=True, exist_ok=True)
            page.screenshot(path=str(self.shots / f"{self.language}-{name}.png"), full_page=True)
        page.set_viewport_size(PHONE)
        width = page.evaluate("document.documentElement.scrollWidth")
        assert width <= PHONE["width"], f"{name}: {width} px wide at 390 px"
        page.set_viewport_size(DESKTOP)
        self.seen.append(name)


def log_in(page, base_url: str, username: str, language: str) -> None:
    page.goto(base_url + "/accounts/login/")
    page.fill("#id_username", username)
    page.fill("#id_password", PASSWORD)
    page.click("button[type=submit]")
    with page.expect_navigation():
        page.select_option("select[name=language]", language)  # the switch submits itself
    expect(page.locator("html")).to_have_attribute("lang", language)


@pytest.mark.parametrize("language", ["en", "zh-hans"])
def test_an_instructor_sets_up_a_course_from_nothing_and_runs_a_class(
    world, portal_server, start_worker, browser_page, tmp_path, language
):
    institution = world["course"].institution
    # The world's course guarantees half the node, not all of it: AI301's guarantee must fit beside it.
    CourseQuota.objects.filter(course=world["course"]).update(instance_count=64, core_percent=400, memory_mib=256 * 1024)
    teacher = UserFactory(username="prof", first_name="Grace", last_name="Hopper")
    InstitutionRole.objects.create(user=teacher, institution=institution, role="instructor")
    AllowedImage.objects.create(
        institution=institution, kind="jupyter", reference="quay.io/jupyter/scipy-notebook", label="SciPy"
    )
    start_worker(LAB_SIMULATOR_DELAY_SECONDS="0.5")
    page = browser_page
    page.set_viewport_size(DESKTOP)
    check = Checker(page, language)

    log_in(page, portal_server, "prof", language)
    page.goto(portal_server + "/")
    expect(page.get_by_role("heading", name=t(language, "Courses you teach"))).to_be_visible()
    check("console-home-empty")

    # Course
    page.get_by_role("link", name=t(language, "New course")).click()
    page.fill("#id_code", "AI301")
    page.fill("#id_title", "Deep learning lab")
    page.fill("#id_term", "2027 Spring")
    page.fill("#id_starts_on", "2027-02-22")
    page.fill("#id_ends_on", "2027-06-30")
    check("course-new")
    page.get_by_role("button", name=t(language, "Create course")).click()
    course = Course.objects.get(code="AI301")

    # Quota: a value off the memory grid first, then a good one
    expect(page.get_by_role("heading", name=t(language, "Quota"), exact=True)).to_be_visible()
    page.fill("#id_instance_count", "40")
    page.fill("#id_core_percent", "400")
    page.fill("#id_memory_mib", "3.3")
    page.fill("#id_sessions_per_student", "1")
    page.fill("#id_max_session_minutes", "90")
    page.get_by_role("button", name=t(language, "Save quota")).click()
    expect(page.locator(".field.invalid .error")).to_contain_text("3.25 GiB")
    check("quota-error")
    page.fill("#id_memory_mib", "160")
    page.get_by_role("button", name=t(language, "Save quota")).click()
    quota = CourseQuota.objects.get(course=course)
    assert (quota.instance_count, quota.core_percent, quota.memory_mib) == (40, 400, 160 * 1024)

    # Templates: one from the catalogue, one of the course's own with the live preview
    page.get_by_role("link", name=t(language, "Templates"), exact=True).click()
    page.select_option("#attach-template", str(world["small"].pk))
    page.get_by_role("button", name=t(language, "Offer it")).click()
    page.fill("#id_name", "Notebook 10 %")
    page.fill("#id_core_percent", "10")
    page.fill("#id_memory_mib", "8")
    expect(page.locator("[data-fit=cluster]")).to_have_text("64")  # 8 cards x 8 (memory 64 GiB / 8 GiB)
    expect(page.locator("[data-fit=quota_total]")).to_have_text("20")  # 160 GiB / 8 GiB
    check("templates")
    page.get_by_role("button", name=t(language, "Create template")).click()
    mine = LabTemplate.objects.get(name="Notebook 10 %")
    assert set(course.templates.values_list("pk", flat=True)) == {world["small"].pk, mine.pk}

    # Roster by CSV: preview, nothing written, then confirm
    page.get_by_role("link", name=t(language, "Roster"), exact=True).click()
    csv_path = tmp_path / "roster.csv"
    rows = "\n".join(f"{s.username},student" for s in world["students"])
    csv_path.write_text(f"username,role\n{rows}\nnobody here,student\n")
    page.set_input_files("#id_file", str(csv_path))
    page.get_by_role("button", name=t(language, "Preview")).click()
    expect(page.locator("tr[data-action=add]")).to_have_count(len(world["students"]))
    expect(page.locator("tr[data-action=error]")).to_have_count(1)
    assert not Enrollment.objects.filter(course=course, role="student").exists()
    check("roster-preview")
    page.get_by_role("button", name=t(language, "Import these changes")).click()
    expect(page.locator("[data-testid=import-result] [data-count=add] dd").first).to_have_text(str(len(world["students"])))
    page.get_by_role("link", name=t(language, "Back to the roster")).click()
    expect(page.locator("tr[data-member]")).to_have_count(len(world["students"]) + 1)
    check("roster")
    # One more by e-mail, made an assistant, then the CSV's last student removed
    affiliate([UserFactory(username="ta-li", email="li@example.edu")], institution)  # an account of the university
    page.fill("#id_identifier", "li@example.edu")
    page.get_by_role("button", name=t(language, "Add"), exact=True).click()
    member = page.locator("tr[data-member=ta-li]")
    member.get_by_role("combobox").select_option("assistant")
    member.get_by_role("button", name=t(language, "Change")).click()
    assert Enrollment.objects.get(course=course, user__username="ta-li").role == "assistant"
    last = world["students"][-1].username
    page.locator(f"tr[data-member='{last}']").get_by_role("button").last.click()
    expect(page.locator(f"tr[data-member='{last}']")).to_have_count(0)

    # A student launches; the instructor sees it live and stops all
    page.get_by_role("link", name=t(language, "Live sessions")).click()
    expect(page.locator("body[data-live=yes]")).to_have_count(1)
    student_page = page.context.browser.new_context().new_page()
    log_in(student_page, portal_server, world["students"][0].username, language)
    student_page.goto(portal_server + "/")
    student_page.locator("form.js-launch", has_text="Notebook 10 %").get_by_role("button").click()
    row = page.locator("tr[data-session-id]")
    expect(row).to_have_attribute("data-state", "running", timeout=30_000)
    expect(page.locator("[data-testid=use-instances]")).to_have_text("1")
    check("course-live")
    page.get_by_role("link", name=t(language, "Stop all…")).click()
    check("stop-all")
    page.get_by_role("checkbox").check()
    page.get_by_role("button", name=t(language, "Stop all"), exact=True).click()
    expect(page.locator("tr[data-session-id]")).to_have_count(0, timeout=30_000)
    session = LabSession.objects.get(course=course)
    assert session.reason_code == "session.stopped_by"

    # Usage: the chart is drawn from the vendored ECharts, the CSV is one click away
    page.get_by_role("link", name=t(language, "Usage")).click()
    expect(page.locator("#usage-chart[data-ready=yes]")).to_have_count(1)
    check("usage")
    page.goto(portal_server + "/teach/")
    expect(page.locator(f"[data-course-use='{course.pk}']")).to_be_visible()
    check("console-home")

    # Term end: archive; the course leaves the list of current courses, its history stays
    page.goto(f"{portal_server}/courses/{course.pk}/archive/")
    page.get_by_role("checkbox").check()
    page.get_by_role("button", name=t(language, "Archive"), exact=True).click()
    expect(page.locator(".badge.archived")).to_be_visible()
    page.goto(portal_server + "/teach/")
    expect(page.locator(f"[data-course-use='{course.pk}']")).to_have_count(0)
    page.get_by_role("link", name=t(language, "Show archived")).click()
    expect(page.locator(f"[data-course-use='{course.pk}']")).to_be_visible()
    assert LabSession.objects.filter(course=course).count() == 1
