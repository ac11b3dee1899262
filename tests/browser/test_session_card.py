"""A student's card shows its queue place and wait, or its time left and stop time, in English and Chinese."""

from __future__ import annotations

import re
from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta
from zoneinfo import ZoneInfo

import pytest
from django.db import connection
from django.utils import timezone
from playwright.sync_api import expect

from labs.domain.reasons import Reason
from labs.domain.states import SessionState
from labs.models import LabSession
from labs.services.allocation import allocation_pass
from labs.services.sessions import session_launch, session_stop, session_transition
from tests.factories import PASSWORD

pytestmark = [pytest.mark.browser, pytest.mark.slow]

ZONE = "Asia/Shanghai"


def open_page(browser, base_url: str, username: str, language: str):
    """A logged-in page in its own browser context, in ``ZONE`` and with a clock the test can move."""
    context = browser.new_context(timezone_id=ZONE)
    context.add_cookies([{"name": "django_language", "value": language, "url": base_url}])
    page = context.new_page()
    page.clock.install()
    page.goto(base_url + "/")
    page.fill("#id_username", username)
    page.fill("#id_password", PASSWORD)
    page.click("button[type=submit]")
    expect(page.locator("body[data-live=yes]")).to_have_count(1)
    return page


def off_the_browser_loop(function, **kwargs):
    """Run a service in another thread: its page updates go out through async_to_sync, which
    cannot run in this thread while Playwright's event loop does."""

    def call():
        try:
            return function(**kwargs)
        finally:
            connection.close()

    with ThreadPoolExecutor(1) as pool:
        return pool.submit(call).result()


def card(page, session):
    return page.locator(f"article[data-session-id='{session.pk}']")


def test_cards_show_place_wait_and_time_left_in_both_languages_and_places_move_live(world, portal_server, browser_page):
    course = world["course"]
    code = course.code
    course.quota.instance_count = 1
    course.quota.save(update_fields=["instance_count"])
    ada, bob, carol, dan = world["students"]
    running = session_launch(student=ada, course=course, template=world["small"])
    allocation_pass()
    assert session_transition(running.pk, to=SessionState.STARTING)
    assert session_transition(running.pk, to=SessionState.RUNNING, access_url="http://lab/")
    # Up for an hour: 120 of the course's 180 minutes are left.
    running_at = timezone.now() - timedelta(minutes=60, seconds=1)
    LabSession.objects.filter(pk=running.pk).update(running_at=running_at)
    stops = (running_at + timedelta(minutes=180)).astimezone(ZoneInfo(ZONE)).strftime("%H:%M")
    queued = [session_launch(student=s, course=course, template=world["small"]) for s in (bob, carol, dan)]
    allocation_pass()  # all three wait on the course quota, bob first
    browser = browser_page.context.browser

    # English: bob is first and gets the room of ada's session when it stops.
    page = open_page(browser, portal_server, bob.username, "en")
    expect(card(page, queued[0]).locator("[data-piece=queue]")).to_have_text(
        re.compile(rf"^#1 in {code}'s queue, about 1 h 5[89] min$")
    )
    expect(card(page, queued[0]).locator("[data-field=state_label]")).to_have_text("queued")
    expect(page.get_by_test_id("shares-not-enforced")).to_be_visible()

    # English: ada's running card counts down on the page's own clock.
    page = open_page(browser, portal_server, ada.username, "en")
    mine = card(page, running)
    expect(mine.locator("[data-piece=left]")).to_have_text(re.compile(r"^1 h 5[89] min left$"))
    expect(mine.locator("[data-piece=stops]")).to_have_text(f"stops at {stops}")
    expect(mine.locator("[data-field=share_text]")).to_have_text("5 % of one NPU's AI Core guaranteed, 4 GiB memory")
    expect(mine.get_by_text(re.compile(r"Runs on: n1 / NPU \d"))).to_be_visible()
    page.clock.fast_forward("30:00")
    expect(mine.locator("[data-piece=left]")).to_have_text(re.compile(r"^1 h 2[89] min left$"))

    # Chinese: the same running card.
    page = open_page(browser, portal_server, ada.username, "zh-hans")
    mine = card(page, running)
    expect(mine.locator("[data-piece=left]")).to_have_text(re.compile(r"^剩余 1 小时 5[89] 分钟$"))
    expect(mine.locator("[data-piece=stops]")).to_have_text(f"将于 {stops} 停止")
    expect(mine.locator("[data-field=state_label]")).to_have_text("运行中")
    expect(page.get_by_test_id("shares-not-enforced")).to_contain_text("本机不会实际强制执行")

    # Chinese: carol is second; nothing ends for her place in time, so no number is promised.
    page = open_page(browser, portal_server, carol.username, "zh-hans")
    hers = card(page, queued[1]).locator("[data-piece=queue]")
    expect(hers).to_have_text(f"{code} 队列第 2 位，等待中")
    expect(card(page, queued[1]).locator("[data-field=share_text]")).to_have_text("保证单张 NPU 5 % 的 AI Core 算力，显存 4 GiB")
    # Bob gives up his place: carol's page moves her up without a reload, and now has a wait.
    expect(page.locator("body[data-live=yes]")).to_have_count(1)  # its websocket is open to hear it
    page.evaluate("window.__notReloaded = true")
    assert off_the_browser_loop(session_stop, session_id=queued[0].pk, reason=Reason.of("session.stopped_by", who="bob"))
    expect(hers).to_have_text(re.compile(rf"^{code} 队列第 1 位，约需等待 1 小时 5[89] 分钟$"), timeout=15_000)
    assert page.evaluate("window.__notReloaded") is True


@pytest.mark.parametrize(
    ("language", "button", "left_before", "left_after"),
    [
        ("en", "Add 30 minutes", r"^50 min left$", r"^1 h 20 min left$"),
        ("zh-hans", "延长 30 分钟", r"^剩余 50 分钟$", r"^剩余 1 小时 20 分钟$"),
    ],
)
def test_a_student_extends_a_running_lab_from_its_card(
    world, portal_server, browser_page, language, button, left_before, left_after
):
    quota = world["course"].quota
    quota.extensions_allowed, quota.extension_minutes, quota.max_session_minutes = 1, 30, 60
    quota.save()
    ada = world["students"][0]
    running = session_launch(student=ada, course=world["course"], template=world["small"])
    allocation_pass()
    assert session_transition(running.pk, to=SessionState.STARTING)
    assert session_transition(running.pk, to=SessionState.RUNNING, access_url="http://lab/")
    LabSession.objects.filter(pk=running.pk).update(running_at=timezone.now() - timedelta(minutes=9, seconds=30))

    page = open_page(browser_page.context.browser, portal_server, ada.username, language)
    mine = card(page, running)
    expect(mine.locator("[data-piece=left]")).to_have_text(re.compile(left_before))
    page.evaluate("window.__notReloaded = true")
    mine.get_by_role("button", name=button).click()
    expect(mine.locator("[data-piece=left]")).to_have_text(re.compile(left_after), timeout=15_000)
    expect(mine.locator("[data-role=extend]")).to_be_hidden()  # the only extension is taken
    assert page.evaluate("window.__notReloaded") is True
    assert LabSession.objects.get(pk=running.pk).extensions_used == 1


@pytest.mark.parametrize(
    ("language", "meter_text", "warning"),
    [
        ("en", "5.1 of 6 AI-Core-% × hours used (85 %)", "over 80 % of your weekly NPU budget in {code} is used"),
        ("zh-hans", "已用 5.1 / 6 AI Core 百分比 × 小时（85 %）", "您在 {code} 的每周 NPU 预算已用去 80 % 以上"),
    ],
)
def test_the_budget_meter_and_its_warning_in_both_languages(world, portal_server, browser_page, language, meter_text, warning):
    from labs.selectors.usage import week_start
    from labs.services.budgets import budgets_enforce

    if timezone.now() - week_start(timezone.now()) < timedelta(hours=1):
        pytest.skip("the week began less than an hour ago: no room for the span this test places in it")
    course = world["course"]
    course.quota.budget_core_percent_hours = 6
    course.quota.save()
    ada = world["students"][0]
    running = session_launch(student=ada, course=course, template=world["medium"])  # 10 %
    allocation_pass()
    assert session_transition(running.pk, to=SessionState.STARTING)
    assert session_transition(running.pk, to=SessionState.RUNNING, access_url="http://lab/")
    from labs.models import Allocation

    Allocation.objects.filter(session=running).update(created_at=timezone.now() - timedelta(minutes=30, seconds=40))
    assert budgets_enforce().warned == [str(running.pk)]

    page = open_page(browser_page.context.browser, portal_server, ada.username, language)
    budget = page.locator(f"[data-budget-course='{course.code}']")
    expect(budget.locator("meter")).to_have_attribute("value", "85")
    expect(budget.locator("[data-budget-text]")).to_have_text(meter_text)
    expect(card(page, running).locator("[data-field=reason]")).to_contain_text(warning.format(code=course.code))


@pytest.mark.parametrize(
    ("language", "warning", "keep"),
    [("en", "no activity for 60 minutes", "Keep running"), ("zh-hans", "已 60 分钟没有活动", "继续运行")],
)
def test_an_idle_warning_counts_down_and_keep_running_cancels_it(world, portal_server, browser_page, language, warning, keep):
    ada = world["students"][0]
    running = session_launch(student=ada, course=world["course"], template=world["small"])
    allocation_pass()
    assert session_transition(running.pk, to=SessionState.STARTING)
    assert session_transition(running.pk, to=SessionState.RUNNING, access_url="http://lab/")
    from labs.domain.reasons import Reason as R
    from labs.services.sessions import reason_fields

    cull_at = timezone.now() + timedelta(minutes=9, seconds=30)
    LabSession.objects.filter(pk=running.pk).update(cull_at=cull_at, **reason_fields(R.of("session.idle_warning", minutes=60)))

    page = open_page(browser_page.context.browser, portal_server, ada.username, language)
    mine = card(page, running)
    expect(mine.locator("[data-field=reason]")).to_contain_text(warning)
    expect(mine.locator("[data-piece=stops]")).to_contain_text(cull_at.astimezone(ZoneInfo(ZONE)).strftime("%H:%M"))
    page.evaluate("window.__notReloaded = true")
    mine.get_by_role("button", name=keep).click()
    expect(mine.locator("[data-role=keep]")).to_be_hidden(timeout=15_000)
    expect(mine.locator("[data-field=reason]")).to_have_text("")
    assert page.evaluate("window.__notReloaded") is True
    assert LabSession.objects.get(pk=running.pk).cull_at is None


@pytest.mark.parametrize(("language", "running"), [("en", "running"), ("zh-hans", "运行中")])
def test_a_card_that_comes_up_live_keeps_no_empty_reason_line(world, portal_server, browser_page, language, running):
    """The reason a lab waits is a line of its card; once it runs there is none, and no blank line either."""
    course = world["course"]
    course.quota.instance_count = 1
    course.quota.save(update_fields=["instance_count"])
    ada, bob = world["students"][:2]
    first = session_launch(student=ada, course=course, template=world["small"])
    allocation_pass()
    waiting = session_launch(student=bob, course=course, template=world["small"])
    allocation_pass()  # bob waits on the course quota

    page = open_page(browser_page.context.browser, portal_server, bob.username, language)
    reason = card(page, waiting).locator("[data-field=reason]")
    expect(reason).to_be_visible()
    expect(reason).not_to_have_text("")

    def comes_up() -> None:
        assert session_stop(session_id=first.pk, reason=Reason.of("session.stopped_by", who="ada"))  # admitted: ends at once
        allocation_pass()
        assert session_transition(waiting.pk, to=SessionState.STARTING)
        assert session_transition(waiting.pk, to=SessionState.RUNNING, access_url="http://lab/")

    off_the_browser_loop(comes_up)
    expect(card(page, waiting).locator("[data-field=state_label]")).to_have_text(running, timeout=15_000)
    expect(reason).to_be_hidden()
