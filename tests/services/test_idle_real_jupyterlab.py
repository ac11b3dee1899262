"""Idle culling on a real JupyterLab (the local driver's): the portal's looks are not activity.

Jupyter Server counts every authenticated API request as activity unless it carries
``no_track_activity``. The idle timeout is an hour and a test cannot wait one, so each check
runs with the portal's clock moved ``SHIFT`` ahead: a lab whose last activity (as JupyterLab
itself reports it) is more than ``WINDOW`` seconds old is past its warning point. A check that
moved JupyterLab's ``last_activity`` would make the lab look used a moment ago at every look.
"""

from __future__ import annotations

import json
import time
import urllib.request
import uuid
from collections.abc import Iterator
from datetime import timedelta

import pytest
from django.utils import timezone
from django.utils.dateparse import parse_datetime

from labs.domain.states import SessionState
from labs.drivers import PollStatus
from labs.drivers.local import LocalDriver
from labs.models import LabSession
from labs.services.activity import activity_check, lab_base_url
from labs.services.allocation import allocation_pass
from labs.services.sessions import session_launch, session_transition
from tests.drivers.helpers import make_spec, wait_for

pytestmark = [pytest.mark.django_db, pytest.mark.slow]

WINDOW = 5.0  # seconds of real quiet that count as the whole idle timeout
WARNING = 3  # LAB_IDLE_WARNING_SECONDS in these tests
OPENER = urllib.request.build_opener(urllib.request.ProxyHandler({}))


class RealLab:
    def __init__(self, driver: LocalDriver) -> None:
        self.spec = make_spec()
        driver.create(self.spec)
        result = wait_for(driver, self.spec.session_id, PollStatus.RUNNING, PollStatus.FAILED)
        assert result.status == PollStatus.RUNNING, result.message
        self.access_url = result.access_url
        self.base = lab_base_url(result.access_url)
        self.headers = {"Authorization": f"token {self.spec.secret}", "Content-Type": "application/json"}

    def request(self, path: str, body: dict | None = None, method: str | None = None) -> dict | list:
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(self.base + path, data=data, headers=self.headers, method=method)
        with OPENER.open(request, timeout=10) as response:
            return json.loads(response.read() or b"null")

    def last_activity(self) -> float:
        """JupyterLab's own idea of its latest activity (``/api/status`` is never activity)."""
        return parse_datetime(self.request("api/status")["last_activity"]).timestamp()


@pytest.fixture
def driver(tmp_path) -> Iterator[LocalDriver]:
    driver = LocalDriver(state_dir=str(tmp_path / "state"))
    yield driver
    driver.shutdown()


@pytest.fixture(autouse=True)
def idle_rules(settings):
    settings.LAB_IDLE_WARNING_SECONDS = WARNING
    settings.LAB_IDLE_PROBE_TIMEOUT_SECONDS = 5


def session_on(world, lab: RealLab, index: int = 0) -> LabSession:
    session = session_launch(student=world["students"][index], course=world["course"], template=world["small"])
    allocation_pass()
    LabSession.objects.filter(pk=session.pk).update(secret=lab.spec.secret)
    assert session_transition(session.pk, to=SessionState.STARTING)
    assert session_transition(session.pk, to=SessionState.RUNNING, access_url=lab.access_url)
    # Known to the portal as used long ago: only what JupyterLab reports keeps it.
    LabSession.objects.filter(pk=session.pk).update(last_active_at=timezone.now() - timedelta(hours=3))
    return session


def check(session: LabSession):
    """One activity check, with the portal's clock moved so that WINDOW seconds of quiet are the whole timeout."""
    shift = timedelta(seconds=session.template.idle_timeout_minutes * 60 - WINDOW)
    return activity_check(now=timezone.now() + shift)


def sleep_until(moment: float) -> None:
    time.sleep(max(0.0, moment - time.time()))


def state(session: LabSession) -> str:
    return LabSession.objects.values_list("state", flat=True).get(pk=session.pk)


def test_a_jupyterlab_left_alone_is_warned_and_then_stopped(world, driver):
    lab = RealLab(driver)
    session = session_on(world, lab)
    quiet_since = lab.last_activity()

    sleep_until(quiet_since + WINDOW - WARNING + 0.5)
    assert check(session).warned == [str(session.pk)]
    time.sleep(1)  # the subject: real quiet between two looks (JupyterLab's clock is the real one)
    second = check(session)
    assert second.cleared == [] and second.culled == [], "the first look counted as the student's activity"
    assert lab.last_activity() == quiet_since  # three looks later, JupyterLab saw no one

    sleep_until(quiet_since + WINDOW + WARNING + 0.5)
    assert check(session).culled == [str(session.pk)]
    assert state(session) == "stopping"


def test_a_jupyterlab_running_a_cell_is_not_warned(world, driver):
    import websocket

    lab = RealLab(driver)
    session = session_on(world, lab)
    kernel = lab.request("api/kernels", {})
    socket = websocket.create_connection(
        lab.base.replace("http://", "ws://") + f"api/kernels/{kernel['id']}/channels",
        header=[f"Authorization: token {lab.spec.secret}"],
        timeout=30,
    )
    try:
        header = {"msg_id": uuid.uuid4().hex, "username": "t", "session": uuid.uuid4().hex, "version": "5.3"}
        content = {"code": "import time\ntime.sleep(30)", "silent": False, "store_history": False, "allow_stdin": False}
        message = {"header": {**header, "msg_type": "execute_request"}, "parent_header": {}, "metadata": {}}
        socket.send(json.dumps({**message, "content": {**content, "user_expressions": {}}, "channel": "shell", "buffers": []}))
        socket.close()  # the browser goes; the cell goes on
        started = time.time()
        while time.time() < started + WINDOW + WARNING + 1:
            report = check(session)
            assert report.warned == [] and report.culled == [], "a lab computing a cell was taken for idle"
            time.sleep(1)
        assert state(session) == "running"
    finally:
        lab.request(f"api/kernels/{kernel['id']}", method="DELETE")


def test_a_jupyterlab_whose_student_edits_a_notebook_is_not_stopped(world, driver):
    """Editing with no kernel computing: the browser saves the notebook through the contents API
    (JupyterLab's autosave and Ctrl-S send this request), and that is activity."""
    lab = RealLab(driver)
    session = session_on(world, lab)
    quiet_since = lab.last_activity()
    sleep_until(quiet_since + WINDOW - WARNING + 0.5)
    assert check(session).warned == [str(session.pk)]

    notebook = {"cells": [{"cell_type": "markdown", "metadata": {}, "source": "typed"}], "metadata": {}}
    notebook |= {"nbformat": 4, "nbformat_minor": 5}
    lab.request("api/contents/work.ipynb", {"type": "notebook", "format": "json", "content": notebook}, method="PUT")
    assert check(session).cleared == [str(session.pk)]
    sleep_until(quiet_since + WINDOW + WARNING + 0.5)
    assert check(session).culled == []
    assert state(session) == "running"
