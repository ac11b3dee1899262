"""What a cluster driver reports of a starting lab reaches the student as a reason code, put into
the student's language like every other reason."""

import time

import pytest
from django.test import Client
from django.utils import translation

from labs.drivers import get_driver
from labs.models import LabSession
from labs.selectors.sessions import sessions_of_student
from labs.services.controller import reconcile_once
from labs.services.sessions import session_launch


@pytest.fixture
def slow_driver():
    """The simulator, its labs starting for a minute: long enough to be read while starting."""
    driver = get_driver()
    before, driver.start_delay_seconds = driver.start_delay_seconds, 60
    yield driver
    driver.start_delay_seconds = before
    for session_id in driver.list():
        driver.delete(session_id)


def starting(world):
    session = session_launch(student=world["students"][0], course=world["course"], template=world["small"])
    deadline = time.monotonic() + 10
    while LabSession.objects.get(pk=session.pk).reason_code != "driver.simulated_starting":
        assert time.monotonic() < deadline, LabSession.objects.get(pk=session.pk).reason
        reconcile_once()
    return session


def test_a_starting_labs_progress_is_a_code_in_the_payload_and_chinese_for_a_chinese_reader(world, slow_driver):
    session = starting(world)
    with translation.override("zh-hans"):
        (card,) = [s.card for s in sessions_of_student(user=world["students"][0]) if s.pk == session.pk]
    assert card["state"] == "starting"
    assert (card["reason_code"], card["reason_params"]) == ("driver.simulated_starting", {})
    assert card["reason"] == "正在启动（模拟）"
    with translation.override("en"):
        assert LabSession.objects.get(pk=session.pk).reason == "starting (simulated)"

    client = Client()
    client.force_login(world["students"][0])
    client.cookies["django_language"] = "zh-hans"
    assert "正在启动（模拟）" in client.get("/").content.decode()
