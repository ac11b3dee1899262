"""On real Celery workers: a lab launched from the LMS, running, used and stopped posts
Initialized, Started, InProgress and Completed to its line item, in order, each once; and a link
whose launch offers the line item container but no line item gets one line item, made by the
tool, however many launches and workers race for it."""

from __future__ import annotations

import json
import threading
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from django.db import connection

from labs.domain.reasons import Reason
from labs.drivers import get_driver
from labs.models import LabSession
from labs.services.sessions import session_stop
from lti.models import ResourceLink, Score
from tests.conftest import wait_for
from tests.lti.grading import AGS, course_from_lms, progress, student_launch
from tests.lti.platform import AGS_SCOPES, CLAIM, LEARNER

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]


class StandInLab:
    """What the idle check asks a JupyterLab (``/api/status``, ``/api/kernels``), answering that
    the student is at work: its last activity is now."""

    def start(self) -> StandInLab:
        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args) -> None:
                pass

            def do_GET(self) -> None:
                path = self.path.split("?")[0]
                if path.endswith("/api/status"):
                    body = {"last_activity": datetime.now(UTC).isoformat().replace("+00:00", "Z")}
                elif path.endswith("/api/kernels"):
                    body = []
                else:
                    self.send_response(404)
                    self.end_headers()
                    return
                data = json.dumps(body).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}"
        threading.Thread(target=self._server.serve_forever, daemon=True).start()
        return self

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()


@pytest.fixture
def stand_in_lab():
    lab = StandInLab().start()
    yield lab
    lab.stop()
    driver = get_driver()
    for session_id in driver.list():
        driver.delete(session_id)


def test_a_lab_launched_run_used_and_stopped_posts_its_progress_in_order(
    browser, platform, catalogue, start_worker, stand_in_lab
):
    course_from_lms(browser)
    worker = start_worker(
        concurrency=2,
        beat=True,
        LAB_IDLE_CHECK_SECONDS="1",
        LTI_SCORE_SWEEP_SECONDS="0.5",
        LAB_DRIVER_OPTIONS=json.dumps({"access_url": stand_in_lab.url + "/{session_id}/lab"}),
    )
    log = lambda: f"{progress(platform)}; worker log:\n{worker.output()[-4000:]}"  # noqa: E731

    session = student_launch(browser, platform, catalogue[0])
    wait_for(lambda: len(platform.scores) >= 3, timeout=90, message=log)
    assert LabSession.objects.get(pk=session.pk).state == "running"
    session_stop(session_id=session.pk, reason=Reason.of("session.stopped_by", who="student-1"))
    wait_for(lambda: len(platform.scores) >= 4, timeout=60, message=log)

    assert progress(platform) == [
        ("Initialized", "NotReady"),
        ("Started", "NotReady"),
        ("InProgress", "NotReady"),
        ("Completed", "FullyGraded"),
    ]
    stamps = [datetime.fromisoformat(s["timestamp"]) for s in platform.scores]
    assert stamps == sorted(stamps) and len(set(stamps)) == 4
    assert {(s["userId"], s["_lineitem"]) for s in platform.scores} == {("student-1", "/lineitems/3")}
    assert (platform.scores[-1]["scoreGiven"], platform.scores[-1]["scoreMaximum"]) == (1, 1)
    sent = lambda: list(Score.objects.order_by("occurred_at").values_list("state", "attempts"))  # noqa: E731
    wait_for(lambda: sent() == [("sent", 1)] * 4, timeout=10, message=lambda: f"{sent()}; {log()}")
    assert len(platform.scores) == 4  # many idle checks saw it used: InProgress went once


def test_two_launches_racing_on_a_link_without_a_line_item_make_one(browser, platform, catalogue, start_worker):
    course_from_lms(browser, node=False)
    platform.lineitems_delay = 1.0  # the first worker's creation takes a while: the other asks meanwhile
    container = {"scope": AGS_SCOPES, "lineitems": platform.url + "/lineitems"}

    # Each student's id_token first (the platform answers one launch at a time), then both posted at once.
    students = {sub: type(browser)(browser.tool_url, platform) for sub in ("student-1", "student-2")}
    tokens = {}
    for sub, student in students.items():
        platform.next_launch = {
            "sub": sub,
            "roles": LEARNER,
            CLAIM + "resource_link": {"id": "link-7"},
            CLAIM + "custom": {"npu_template": str(catalogue[1].pk), "npu_score_on_end": "1"},
            AGS: container,
        }
        tokens[sub] = student.authenticate()

    def launch(sub: str) -> int:
        try:
            return students[sub].post_launch(tokens[sub]).status_code
        finally:
            connection.close()

    with ThreadPoolExecutor(2) as pool:
        assert list(pool.map(launch, students)) == [302, 302]
    assert Score.objects.filter(activity_progress="Initialized").count() == 2
    worker = start_worker(concurrency=2)
    wait_for(lambda: len(platform.scores) == 2, timeout=60, message=lambda: f"{platform.scores}; {worker.output()[-4000:]}")

    (item,) = platform.lineitems
    assert {k: item[k] for k in ("label", "scoreMaximum", "resourceLinkId", "tag")} == {
        "label": "Jupyter large",
        "scoreMaximum": 1,
        "resourceLinkId": "link-7",
        "tag": "npu-lab",
    }
    assert {(s["userId"], s["_lineitem"], s["activityProgress"]) for s in platform.scores} == {
        ("student-1", "/lineitems/100", "Initialized"),
        ("student-2", "/lineitems/100", "Initialized"),
    }
    assert ResourceLink.objects.get(resource_link_id="link-7").lineitem_url == item["id"]

    student_launch(browser, platform, catalogue[1], sub="student-3", link="link-7", ags=container)
    wait_for(lambda: len(platform.scores) == 3, timeout=30, message=lambda: worker.output()[-4000:])
    assert len(platform.lineitems) == 1 and platform.scores[-1]["_lineitem"] == "/lineitems/100"
