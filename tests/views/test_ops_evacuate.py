"""Emptying a node for maintenance from the operator console, through the ASGI application as
Daphne serves it: a platform operator only, with CSRF, a deadline in range, and the cluster page
saying how many labs are left and when the node is empty."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import Permission
from django.utils import timezone

from labs.models import AuditEvent, InstitutionRole, LabSession, Node
from labs.services.allocation import allocation_pass
from labs.services.sessions import session_launch
from tests.asgi_client import AsgiClient
from tests.factories import UserFactory

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def scene(world):
    session = session_launch(student=world["students"][0], course=world["course"], template=world["small"])
    allocation_pass()
    operator = UserFactory(username="inst-op")
    InstitutionRole.objects.create(user=operator, institution=world["course"].institution, role="operator")
    platform = UserFactory(username="platform")
    platform.user_permissions.add(Permission.objects.get(codename="operate_platform"))
    url = f"/ops/nodes/{world['node'].pk}/evacuate/"
    return {**world, "session": session, "operator": operator, "platform": platform, "url": url}


def form(minutes="15", reason="vNPU plugin upgrade, ticket 7"):
    return {"minutes": minutes, "reason": reason, "confirm": "on"}


def test_a_platform_operator_empties_a_node_and_the_cluster_page_counts_the_labs_left(scene):
    client = AsgiClient(user=scene["platform"])
    page = client.get(scene["url"])
    assert page.status_code == 200
    assert "Empty n1 for maintenance" in page.text and 'value="15"' in page.text

    response = client.post(scene["url"], form())

    assert response.status_code == 302 and response.headers["location"] == "/ops/"
    node = Node.objects.get(pk=scene["node"].pk)
    assert node.drained and node.evacuate_at is not None
    session = LabSession.objects.get(pk=scene["session"].pk)
    assert session.reason_code == "session.evacuation_warned" and session.reclaim_at == node.evacuate_at
    event = AuditEvent.objects.get(action="node.evacuate")
    assert event.actor_name == "platform" and event.after["reason"] == "vNPU plugin upgrade, ticket 7"
    hhmm = timezone.localtime(node.evacuate_at).strftime("%H:%M")
    cluster = client.get("/ops/")
    assert f"1 lab left, empty at {hhmm}" in cluster.text
    assert "Undrain (cancels the emptying)" in cluster.text
    assert client.get("/ops/cluster.json").json()["nodes"][0]["evacuation"] == f"1 lab left, empty at {hhmm}"

    chinese = AsgiClient(user=scene["platform"], language="zh-hans").get("/ops/")
    assert chinese.status_code == 200 and "data-testid=\"evacuation\"" in chinese.text


@pytest.mark.parametrize(
    ("minutes", "message"),
    [
        ("0", "Give a deadline between 1 and 240 minutes."),
        ("241", "Give a deadline between 1 and 240 minutes."),
        ("soon", "Give the deadline as a whole number of minutes."),
        ("", "Give a deadline in minutes."),
    ],
)
def test_a_bad_deadline_gets_a_clear_error_and_changes_nothing(scene, minutes, message):
    response = AsgiClient(user=scene["platform"]).post(scene["url"], form(minutes=minutes))
    assert response.status_code == 200 and message in response.text
    node = Node.objects.get(pk=scene["node"].pk)
    assert not node.drained and node.evacuate_at is None and not AuditEvent.objects.exists()


def test_a_node_already_being_emptied_says_so(scene):
    client = AsgiClient(user=scene["platform"])
    client.post(scene["url"], form())
    response = client.post(scene["url"], form(minutes="60"))
    assert response.status_code == 200 and "n1 is already being emptied, by" in response.text
    assert AuditEvent.objects.filter(action="node.evacuate").count() == 1


@pytest.mark.parametrize(("who", "status"), [("operator", 403), ("student", 404), ("instructor", 404)])
def test_nobody_but_a_platform_operator_may_empty_a_node(scene, who, status):
    user = scene["students"][1] if who == "student" else scene[who]
    response = AsgiClient(user=user).post(scene["url"], form())
    assert response.status_code == status
    assert Node.objects.get(pk=scene["node"].pk).evacuate_at is None


def test_a_post_without_the_csrf_token_is_refused(scene):
    client = AsgiClient(user=scene["platform"])
    client.get(scene["url"])
    response = client.request("POST", scene["url"], data=form())
    assert response.status_code == 403
    assert Node.objects.get(pk=scene["node"].pk).evacuate_at is None


def test_undraining_from_the_console_cancels_the_emptying(scene):
    client = AsgiClient(user=scene["platform"])
    client.post(scene["url"], form())

    response = client.post(f"/ops/nodes/{scene['node'].pk}/drain/", {"reason": "postponed", "confirm": "on"})

    assert response.status_code == 302
    node = Node.objects.get(pk=scene["node"].pk)
    assert not node.drained and node.evacuate_at is None
    session = LabSession.objects.get(pk=scene["session"].pk)
    assert session.reclaim_at is None and session.reason_code == ""
    assert AuditEvent.objects.get(action="node.undrain").after["evacuation_cancelled"] is True
