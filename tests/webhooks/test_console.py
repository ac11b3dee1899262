"""/ops/webhooks/: operators subscribe their institution's LMS, see the secret once, pause,
rotate, delete and redeliver, each audited; another institution's subscriptions stay out of reach."""

from __future__ import annotations

import pytest

from labs.models import AuditEvent
from tests.api.test_tokens import csrf_post, logged_in, operators  # noqa: F401 - fixture
from webhooks.models import Delivery, Subscription
from webhooks.services import subscription_create

FORM = {"url": "https://lms.example.edu/hooks", "description": "Moodle", "event_types": ["session.ended", "usage.recorded"]}


def test_an_operator_subscribes_and_sees_the_secret_once(operators, world):  # noqa: F811
    client = logged_in(operators["operator"])
    response = csrf_post(
        client, "/ops/webhooks/", {**FORM, "institution": world["course"].institution.pk, "courses": [world["course"].pk]}
    )
    assert response.status_code == 200
    subscription = Subscription.objects.get()
    secret = response.content.decode().split('<code class="webhook-secret">')[1].split("<")[0]
    assert secret == subscription.secret and response["Cache-Control"] == "no-store"
    assert list(subscription.courses.all()) == [world["course"]] and subscription.created_by == operators["operator"]
    page = client.get("/ops/webhooks/").content.decode()
    assert secret not in page and "https://lms.example.edu/hooks" in page
    assert AuditEvent.objects.filter(action="webhook.create", actor=operators["operator"]).exists()


@pytest.mark.parametrize(
    ("change", "words"),
    [
        ({"url": "https://user:pw@lms.example.edu/h"}, "no user name or password"),
        ({"url": "ftp://lms.example.edu/h"}, ""),
        ({"event_types": []}, ""),
        ({"institution": "{elsewhere}"}, ""),
        ({"courses": ["{theirs}"]}, "Not a course of"),
    ],
)
def test_bad_input_is_shown_with_the_reason_and_nothing_is_made(operators, world, change, words):  # noqa: F811
    from labs.models import Course

    theirs = Course.objects.create(institution=operators["elsewhere"], code="THEIRS", title="t", term="T")
    data = {**FORM, "institution": world["course"].institution.pk, **change}
    if data["institution"] == "{elsewhere}":
        data["institution"] = operators["elsewhere"].pk
    if data.get("courses") == ["{theirs}"]:
        data["courses"] = [theirs.pk]
    response = csrf_post(
        logged_in(operators["platform"] if "courses" in change else operators["operator"]), "/ops/webhooks/", data
    )
    assert response.status_code == 200
    assert 'class="error' in response.content.decode() and words in response.content.decode()
    assert not Subscription.objects.exists()


def test_pause_rotate_redeliver_and_delete(operators, world):  # noqa: F811
    subscription, secret = subscription_create(
        institution=world["course"].institution, url="https://lms.example.edu/h", event_types=["session.ended"]
    )
    done = Delivery.objects.create(subscription=subscription, event_type="session.ended", payload={}, state="failed", attempts=8)
    done.attempt_log.create(at=done.created_at, status_code=503, duration_ms=40)
    client = logged_in(operators["operator"])
    url = f"/ops/webhooks/{subscription.pk}/"
    page = client.get(url).content.decode()
    assert "503 (40 ms)" in page and secret not in page
    assert csrf_post(client, url, {"action": "pause"}).status_code == 302
    subscription.refresh_from_db()
    assert not subscription.active
    rotated = csrf_post(client, url, {"action": "rotate"})
    subscription.refresh_from_db()
    assert subscription.secret != secret and subscription.secret in rotated.content.decode()
    assert csrf_post(client, url, {"action": "redeliver", "delivery": done.pk}).status_code == 302
    assert Delivery.objects.filter(message_id=done.message_id, state="pending").count() == 1
    assert csrf_post(client, url, {"action": "delete"}).status_code == 302 and Subscription.objects.exists()  # not confirmed
    assert csrf_post(client, url, {"action": "delete", "confirm": "on"}).status_code == 302
    assert not Subscription.objects.exists()
    actions = list(AuditEvent.objects.filter(action__startswith="webhook.").order_by("pk").values_list("action", flat=True))
    assert actions == ["webhook.create", "webhook.pause", "webhook.rotate_secret", "webhook.redeliver", "webhook.delete"]


def test_another_institution_s_operator_neither_sees_nor_acts(operators, world):  # noqa: F811
    theirs, _secret = subscription_create(
        institution=operators["elsewhere"], url="https://their.example/h", event_types=["session.ended"]
    )
    client = logged_in(operators["operator"])
    assert "their.example" not in client.get("/ops/webhooks/").content.decode()
    assert client.get(f"/ops/webhooks/{theirs.pk}/").status_code == 404
    assert csrf_post(client, "/ops/webhooks/", {}).status_code == 200
    client.get("/ops/webhooks/")
    response = client.post(
        f"/ops/webhooks/{theirs.pk}/", {"action": "pause", "csrfmiddlewaretoken": client.cookies["csrftoken"].value}
    )
    assert response.status_code == 404
    theirs.refresh_from_db()
    assert theirs.active
    assert "their.example" in logged_in(operators["platform"]).get("/ops/webhooks/").content.decode()


def test_the_pages_speak_chinese(operators, world):  # noqa: F811
    subscription, _secret = subscription_create(
        institution=world["course"].institution, url="https://lms.example.edu/h", event_types=["session.ended"]
    )
    client = logged_in(operators["operator"])
    assert "订阅" in client.get("/ops/webhooks/", HTTP_ACCEPT_LANGUAGE="zh-hans").content.decode()
    assert "投递记录" in client.get(f"/ops/webhooks/{subscription.pk}/", HTTP_ACCEPT_LANGUAGE="zh-hans").content.decode()
