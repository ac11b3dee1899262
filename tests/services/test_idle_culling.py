"""Idle culling over real HTTP: the portal looks at each running lab (a stand-in JupyterLab or vLLM
server on a free port; a real JupyterLab is looked at in tests/drivers/test_local.py), warns an
idle one, stops it at the warned time, and leaves a busy one alone."""

from __future__ import annotations

import json
import threading
from datetime import UTC, datetime, timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from django.test import Client
from django.utils import timezone

from labs.domain.states import SessionState
from labs.models import LabSession
from labs.selectors.sessions import session_event_payload
from labs.services.activity import activity_check, lab_base_url, session_keep_running
from labs.services.allocation import allocation_pass
from labs.services.sessions import session_launch, session_transition

pytestmark = pytest.mark.django_db
TOKEN = "lab-token-123"


class FakeLab:
    """What the portal's look at a lab reads: JupyterLab's /api/status and /api/kernels, vLLM's
    /metrics (a real JupyterLab is looked at in tests/services/test_idle_real_jupyterlab.py)."""

    def __init__(self) -> None:
        self.last_activity = datetime.now(UTC) - timedelta(hours=2)
        self.kernels = [{"id": "k1", "execution_state": "idle"}]
        self.metrics = 'vllm:num_requests_running 0\nvllm:request_success_total{finished_reason="stop"} 5\n'
        self.seen_auth: list[str] = []
        lab = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self):  # noqa: N802
                lab.seen_auth.append(self.headers.get("Authorization", ""))
                if self.headers.get("Authorization") not in (f"token {TOKEN}", f"Bearer {TOKEN}"):
                    self.send_response(403)
                    self.end_headers()
                    return
                path, _, query = self.path.partition("?")
                # Jupyter Server's rule: an API request is activity unless it carries
                # no_track_activity; /api/status never is.
                if path.startswith("/api/") and path != "/api/status" and "no_track_activity" not in query:
                    lab.last_activity = datetime.now(UTC)
                if path == "/api/status":
                    body = json.dumps({"last_activity": lab.last_activity.isoformat(), "kernels": len(lab.kernels)})
                elif path == "/api/kernels":
                    body = json.dumps(lab.kernels)
                elif path == "/metrics":
                    body = lab.metrics
                else:
                    self.send_response(404)
                    self.end_headers()
                    return
                self.send_response(200)
                self.end_headers()
                self.wfile.write(body.encode())

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.server.server_address[1]
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def fake_lab():
    lab = FakeLab()
    yield lab
    lab.close()


@pytest.fixture(autouse=True)
def idle_rules(settings):
    settings.LAB_IDLE_WARNING_SECONDS = 600
    settings.LAB_IDLE_PROBE_TIMEOUT_SECONDS = 2


def running(world, port: int, *, idle_minutes: float = 55, template="small", index=0) -> LabSession:
    session = session_launch(student=world["students"][index], course=world["course"], template=world[template])
    allocation_pass()
    LabSession.objects.filter(pk=session.pk).update(secret=TOKEN)
    assert session_transition(session.pk, to=SessionState.STARTING)
    assert session_transition(session.pk, to=SessionState.RUNNING, access_url=f"http://127.0.0.1:{port}/lab?token={TOKEN}")
    LabSession.objects.filter(pk=session.pk).update(last_active_at=timezone.now() - timedelta(minutes=idle_minutes))
    return LabSession.objects.select_related("course__quota", "template", "student").get(pk=session.pk)


def test_the_lab_s_root_is_found_from_the_url_a_student_opens():
    assert lab_base_url("http://host:8888/lab?token=x") == "http://host:8888/"
    assert lab_base_url("https://labs.example.edu/labs/abc/lab?token=x") == "https://labs.example.edu/labs/abc/"
    assert lab_base_url("https://labs.example.edu/labs/abc/") == "https://labs.example.edu/labs/abc/"


def test_an_idle_lab_is_warned_then_stopped_at_the_warned_time(world, fake_lab):
    session = running(world, fake_lab.port)

    report = activity_check()

    assert report.warned == [str(session.pk)] and not report.culled
    warned = LabSession.objects.select_related("course__quota", "template", "student").get(pk=session.pk)
    assert warned.state == "running" and warned.reason_code == "session.idle_warning"
    assert "no activity for 60 minutes" in warned.reason
    payload = session_event_payload(warned, for_owner=True)
    assert payload["can_keep"] is True and payload["stops_at"] == warned.cull_at.isoformat()
    assert session_event_payload(warned, for_owner=False)["can_keep"] is False
    assert all(auth == f"token {TOKEN}" for auth in fake_lab.seen_auth)  # the session's own token

    assert activity_check().culled == []  # not before the warned time
    LabSession.objects.filter(pk=session.pk).update(cull_at=timezone.now() - timedelta(seconds=1))
    assert activity_check().culled == [str(session.pk)]
    stopped = LabSession.objects.get(pk=session.pk)
    assert stopped.state == "stopping" and stopped.reason_code == "session.idle_culled"


def test_a_busy_kernel_keeps_a_lab_that_nobody_has_looked_at_for_hours(world, fake_lab):
    fake_lab.kernels = [{"id": "k1", "execution_state": "busy"}]
    session = running(world, fake_lab.port, idle_minutes=300)
    assert activity_check().warned == []
    kept = LabSession.objects.get(pk=session.pk)
    assert kept.cull_at is None and kept.last_active_at > timezone.now() - timedelta(seconds=30)


def test_use_after_the_warning_withdraws_it(world, fake_lab):
    session = running(world, fake_lab.port)
    activity_check()
    fake_lab.last_activity = datetime.now(UTC)  # the student typed in a terminal
    assert activity_check().cleared == [str(session.pk)]
    back = LabSession.objects.get(pk=session.pk)
    assert back.cull_at is None and back.reason_code == ""


def test_keep_running_cancels_the_cull_and_only_the_student_may_ask(world, fake_lab):
    session = running(world, fake_lab.port)
    activity_check()
    url = f"/sessions/{session.pk}/keep/"
    other, owner = Client(), Client()
    other.force_login(world["students"][1])
    owner.force_login(world["students"][0])
    assert other.post(url, HTTP_ACCEPT="application/json").status_code == 404
    strict = Client(enforce_csrf_checks=True)
    strict.force_login(world["students"][0])
    assert strict.post(url, HTTP_ACCEPT="application/json").status_code == 403
    assert LabSession.objects.get(pk=session.pk).cull_at is not None

    assert owner.post(url, HTTP_ACCEPT="application/json").json() == {"ok": True}
    kept = LabSession.objects.get(pk=session.pk)
    assert kept.cull_at is None and kept.reason_code == ""
    assert owner.post(url, HTTP_ACCEPT="application/json").status_code == 409  # nothing to answer now
    LabSession.objects.filter(pk=session.pk).update(last_active_at=timezone.now())
    assert activity_check().warned == []  # the idle clock started again


def test_a_lab_that_does_not_answer_is_warned_like_an_idle_one(world, fake_lab):
    session = running(world, fake_lab.port)
    fake_lab.close()
    report = activity_check()
    assert report.unanswered == 1 and report.warned == [str(session.pk)]


def test_vllm_requests_finished_since_the_last_look_are_activity(world, fake_lab):
    from labs.models import LabTemplate

    LabTemplate.objects.filter(pk=world["medium"].pk).update(kind="vllm", model="Qwen/Qwen2.5-0.5B")
    session = running(world, fake_lab.port, template="medium")
    assert activity_check().warned == [str(session.pk)]  # first look: a count, nothing to compare with
    assert LabSession.objects.get(pk=session.pk).activity == {"vllm_finished": 5.0}
    fake_lab.metrics = 'vllm:num_requests_running 0\nvllm:request_success_total{finished_reason="stop"} 7\n'
    assert activity_check().cleared == [str(session.pk)]
    assert all(auth == f"Bearer {TOKEN}" for auth in fake_lab.seen_auth)


def test_the_npu_at_work_is_activity(world, fake_lab):
    from labs.models import InstanceSample

    session = running(world, fake_lab.port)
    LabSession.objects.filter(pk=session.pk).update(driver_ref="instance-1")
    sample = {"node": world["node"], "entity_id": "instance-1", "taken_at": timezone.now(), "floor_percent": 5}
    InstanceSample.objects.create(**sample, delivered_percent=0)
    assert activity_check().warned == [str(session.pk)]  # the agent saw the card idle: no evidence of work
    InstanceSample.objects.create(**sample, delivered_percent=40)
    assert activity_check().cleared == [str(session.pk)]


def test_session_keep_running_refuses_a_session_with_no_warning(world, fake_lab):
    from labs.services.activity import KeepRefused

    session = running(world, fake_lab.port, idle_minutes=1)
    with pytest.raises(KeepRefused):
        session_keep_running(session_id=session.pk, student=world["students"][0])


def test_idle_culls_are_counted(world, fake_lab):
    from tests.metrics.helpers import scrape, values

    session = running(world, fake_lab.port)
    activity_check()
    LabSession.objects.filter(pk=session.pk).update(cull_at=timezone.now() - timedelta(seconds=1))
    activity_check()
    assert values(scrape(), "npu_lab_policy_stops_total", "policy")[("idle_culled",)] == 1
