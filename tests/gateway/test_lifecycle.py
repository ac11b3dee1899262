"""An endpoint without an upstream URL of its own runs its model as a lab of the course: the first
request queues it (503 ``model_starting``, Retry-After), later ones wait on the same lab, a running
lab is called with its own key, and once it has stopped (idle, lifetime) the next request queues another."""

from __future__ import annotations

from django.utils import timezone

from labs.domain.states import SessionState
from labs.models import CourseEndpoint, LabSession
from labs.services.allocation import allocation_pass
from tests.asgi_client import AsgiClient
from tests.factories import node_with_cards
from tests.gateway.conftest import chat


def post(endpoint_id: int, key: str):
    path, headers, body = chat(endpoint_id, key)
    return AsgiClient().request("POST", path, json=body, headers=headers)


def test_the_first_request_queues_the_courses_model_lab_once(class_endpoint, upstream):
    endpoint = class_endpoint["endpoint"]
    CourseEndpoint.objects.filter(pk=endpoint.pk).update(upstream_url="")
    first = post(endpoint.pk, class_endpoint["key"])
    assert first.status_code == 503
    assert first.json()["error"]["code"] == "model_starting"
    assert first.headers["retry-after"] == "30"
    assert post(endpoint.pk, class_endpoint["key"]).status_code == 503
    lab = LabSession.objects.get()
    endpoint.refresh_from_db()
    assert (lab.state, lab.course_id, lab.template_id) == (SessionState.QUEUED, endpoint.course_id, endpoint.template_id)
    assert endpoint.session_id == lab.pk and lab.student_id == endpoint.holder_id
    assert not endpoint.holder.is_active and not endpoint.holder.has_usable_password()
    assert upstream.requests == []


def test_a_running_lab_is_called_with_its_own_key_and_a_stopped_one_is_replaced(class_endpoint, upstream):
    endpoint = class_endpoint["endpoint"]
    CourseEndpoint.objects.filter(pk=endpoint.pk).update(upstream_url="")
    assert post(endpoint.pk, class_endpoint["key"]).status_code == 503
    lab = LabSession.objects.get()
    # What the controller leaves once the driver reports the lab up: running, at its access URL (the server's root).
    LabSession.objects.filter(pk=lab.pk).update(
        state=SessionState.RUNNING, running_at=timezone.now(), access_url=upstream.url.removesuffix("v1")
    )
    response = post(endpoint.pk, class_endpoint["key"])
    assert response.status_code == 200, response.text
    _body, headers = upstream.requests[0]
    assert headers["authorization"] == f"Bearer {lab.secret}"
    LabSession.objects.filter(pk=lab.pk).update(state=SessionState.STOPPED, end_state="stopped", ended_at=timezone.now())
    assert post(endpoint.pk, class_endpoint["key"]).status_code == 503
    assert LabSession.objects.filter(state=SessionState.QUEUED).exclude(pk=lab.pk).count() == 1
    assert len(upstream.requests) == 1


def test_an_endpoint_with_its_own_upstream_queues_no_lab(class_endpoint, upstream):
    assert post(class_endpoint["endpoint"].pk, class_endpoint["key"]).status_code == 200
    assert not LabSession.objects.exists()
    assert "authorization" not in upstream.requests[0][1]


def test_the_allocation_pass_admits_the_model_lab_within_the_courses_quota(class_endpoint, upstream):
    node_with_cards(cards=1)
    endpoint = class_endpoint["endpoint"]
    CourseEndpoint.objects.filter(pk=endpoint.pk).update(upstream_url="")
    assert post(endpoint.pk, class_endpoint["key"]).status_code == 503
    allocation_pass()
    lab = LabSession.objects.get()
    assert lab.state == SessionState.ADMITTED, (lab.state, lab.reason_code, lab.reason_params)
    assert lab.allocation.core_percent == class_endpoint["template"].core_percent
