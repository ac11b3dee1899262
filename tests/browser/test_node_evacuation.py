"""An operator empties a node for an NPU plugin upgrade: the node's card on the cluster page counts
the labs left and the deadline, then says, live, that it is empty and safe to upgrade."""

from __future__ import annotations

import time
from datetime import timedelta

import pytest
from django.contrib.auth.models import Permission
from django.utils import timezone
from playwright.sync_api import expect

from labs.models import LabSession, Node
from labs.services.allocation import allocation_pass
from labs.services.controller import controller_run
from labs.services.evacuation import evacuations_enforce
from labs.services.sessions import session_launch
from tests.browser.test_instructor_console import DESKTOP, Checker
from tests.browser.test_session_card import off_the_browser_loop
from tests.factories import PASSWORD, UserFactory

pytestmark = [pytest.mark.browser, pytest.mark.slow]


def place_one(world) -> None:
    session_launch(student=world["students"][0], course=world["course"], template=world["medium"])
    allocation_pass()


def stop_at_the_deadline(node_id: int) -> None:
    deadline = Node.objects.get(pk=node_id).evacuate_at
    assert evacuations_enforce(now=deadline + timedelta(seconds=1))
    for _ in range(200):
        controller_run()
        if not LabSession.objects.exclude(state="stopped").exists():
            return
        time.sleep(0.1)
    raise AssertionError("the labs did not stop")


def test_the_cluster_page_says_how_many_labs_are_left_then_that_the_node_is_safe_to_upgrade(world, portal_server, browser_page):
    off_the_browser_loop(place_one, world=world)
    operator = UserFactory(username="platform-op")
    operator.user_permissions.add(Permission.objects.get(codename="operate_platform"))
    page = browser_page.context.browser.new_context(viewport=DESKTOP).new_page()
    check = Checker(page, "en")
    page.goto(portal_server + "/accounts/login/")
    page.fill("#id_username", operator.username)
    page.fill("#id_password", PASSWORD)
    page.click("button[type=submit]")
    page.goto(portal_server + "/ops/")
    expect(page.locator("body[data-live=yes]")).to_have_count(1)

    page.get_by_role("link", name="Empty for maintenance…").click()
    expect(page.locator("#id_minutes")).to_have_value("15")
    page.fill("#id_minutes", "500")
    page.fill("#id_reason", "vNPU plugin upgrade")
    page.get_by_role("checkbox").check()
    page.get_by_role("button", name="Confirm").click()
    expect(page.get_by_text("Give a deadline between 1 and 240 minutes.")).to_be_visible()
    check("ops-evacuate")
    page.fill("#id_minutes", "10")
    page.get_by_role("checkbox").check()
    page.get_by_role("button", name="Confirm").click()

    node = Node.objects.get(pk=world["node"].pk)
    hhmm = timezone.localtime(node.evacuate_at).strftime("%H:%M")
    state = page.locator(f"[data-node='{node.name}'] [data-testid=evacuation]")
    expect(state).to_have_text(f"1 lab left, empty at {hhmm}")
    expect(page.locator("body[data-live=yes]")).to_have_count(1)
    page.evaluate("window.__notReloaded = true")

    off_the_browser_loop(stop_at_the_deadline, node_id=node.pk)

    expect(state).to_have_text("empty — safe to upgrade the NPU plugin", timeout=15_000)
    assert page.evaluate("window.__notReloaded") is True, "the page reloaded"
    check("ops-cluster-evacuated")
