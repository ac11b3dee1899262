"""/api/v1/webhooks/: subscriptions made, changed, paused, rotated and deleted by an LMS, each
audited; bad input refused with the reason and nothing made; another institution's are 404."""

from __future__ import annotations

import pytest

from labs.models import AuditEvent, Course
from tests.api.conftest import TokenClient
from webhooks.models import Delivery, Subscription

GOOD = {"url": "https://lms.example.edu/hooks", "event_types": ["session.ended", "usage.recorded"]}


def test_a_subscription_is_made_with_a_secret_shown_once(api, world):
    response = api.call("POST", "/api/v1/webhooks/", {**GOOD, "courses": [world["course"].pk], "description": "Moodle"})
    assert response.status_code == 201, response.content
    body = response.json()
    assert body["secret"].startswith("whsec_") and response["Cache-Control"] == "no-store"
    assert body["courses"] == [world["course"].pk] and body["active"] is True
    again = api.call("GET", f"/api/v1/webhooks/{body['id']}/")
    assert again.status_code == 200 and "secret" not in again.json()
    assert body["secret"] not in api.call("GET", "/api/v1/webhooks/").content.decode()
    event = AuditEvent.objects.get(action="webhook.create")
    assert event.actor_name.startswith("api-token:") and body["secret"] not in str(event.after)


@pytest.mark.parametrize(
    ("body", "field", "words"),
    [
        ({**GOOD, "url": "http://lms.example.edu/hooks"}, "url", "must use https"),
        ({**GOOD, "url": "https://moodle:pw@lms.example.edu/hooks"}, "url", "no user name or password"),
        ({**GOOD, "url": "ftp://lms.example.edu/hooks"}, "url", ""),
        ({**GOOD, "url": "https://lms.example.edu/hooks#x"}, "url", "fragment"),
        ({**GOOD, "url": "https://10.0.0.5/hooks"}, "url", "private address"),
        ({**GOOD, "url": "not a url"}, "url", ""),
        ({**GOOD, "url": "https://[::1/hooks"}, "url", "valid URL"),
        ({**GOOD, "url": "https://lms.example.edu:x/hooks"}, "url", "valid URL"),
        ({**GOOD, "url": "https://lms.example.edu:70000/hooks"}, "url", "valid URL"),
        ({**GOOD, "event_types": []}, "event_types", ""),
        ({**GOOD, "event_types": ["session.exploded"]}, "event_types.0", ""),
        ({"url": GOOD["url"]}, "event_types", "required"),
        ({**GOOD, "courses": ["{theirs}"]}, "courses", ""),
    ],
)
def test_bad_input_is_refused_with_the_reason_and_nothing_is_made(api, world, elsewhere, settings, body, field, words):
    settings.OUTBOUND_ALLOW_HTTP = False
    settings.OUTBOUND_ALLOW_PRIVATE_ADDRESSES = False
    theirs = Course.objects.create(institution=elsewhere, code="THEIRS", title="t", term="T")
    body = {**body, "courses": [theirs.pk]} if body.get("courses") == ["{theirs}"] else body
    response = api.call("POST", "/api/v1/webhooks/", body)
    assert response.status_code == 400, response.content
    error = response.json()["error"]
    assert error["code"] == "invalid" and field in error["fields"], error
    assert words in " ".join(error["fields"][field])
    assert not Subscription.objects.exists() and not AuditEvent.objects.filter(action__startswith="webhook.").exists()


def test_http_is_allowed_when_the_setting_says_so(api, settings):
    settings.OUTBOUND_ALLOW_HTTP = True
    assert api.call("POST", "/api/v1/webhooks/", {**GOOD, "url": "http://lms.example.edu/h"}).status_code == 201


def test_pause_change_rotate_and_delete_are_audited(api, world):
    made = api.call("POST", "/api/v1/webhooks/", GOOD).json()
    url = f"/api/v1/webhooks/{made['id']}/"
    paused = api.call("PATCH", url, {"active": False})
    assert paused.status_code == 200 and paused.json()["active"] is False
    changed = api.call("PATCH", url, {"event_types": ["session.queued"], "courses": [world["course"].pk]})
    assert changed.json()["event_types"] == ["session.queued"] and changed.json()["courses"] == [world["course"].pk]
    refused = api.call("PATCH", url, {"url": "https://a:b@x.example/"})
    assert refused.status_code == 400 and Subscription.objects.get().url == GOOD["url"]
    rotated = api.call("POST", url + "secret/")
    assert rotated.status_code == 200 and rotated.json()["secret"] != made["secret"]
    assert Subscription.objects.get().secret == rotated.json()["secret"]
    assert api.call("DELETE", url).status_code == 204
    assert not Subscription.objects.exists()
    actions = list(AuditEvent.objects.filter(action__startswith="webhook.").order_by("pk").values_list("action", flat=True))
    assert actions == ["webhook.create", "webhook.pause", "webhook.update", "webhook.rotate_secret", "webhook.delete"]
    assert all(made["secret"] not in str(e.after) + str(e.before) for e in AuditEvent.objects.all())


def test_another_institution_neither_sees_nor_changes_a_subscription(api, world, elsewhere, make_token):
    made = api.call("POST", "/api/v1/webhooks/", GOOD).json()
    theirs = TokenClient(make_token(elsewhere))
    assert theirs.call("GET", "/api/v1/webhooks/").json()["results"] == []
    for method, path in [
        ("GET", ""),
        ("PATCH", ""),
        ("DELETE", ""),
        ("POST", "secret/"),
        ("GET", "deliveries/"),
    ]:
        response = theirs.call(method, f"/api/v1/webhooks/{made['id']}/{path}", {"active": False} if method == "PATCH" else None)
        assert response.status_code == 404, (method, path)
    assert Subscription.objects.get().active and Subscription.objects.get().secret == made["secret"]
    course_of_a = world["course"].pk
    made_by_b = theirs.call("POST", "/api/v1/webhooks/", {**GOOD, "courses": [course_of_a]})
    assert made_by_b.status_code == 400 and "courses" in made_by_b.json()["error"]["fields"]


def test_the_delivery_log_lists_attempts_and_a_finished_delivery_can_be_redelivered(api, world):
    made = api.call("POST", "/api/v1/webhooks/", GOOD).json()
    subscription = Subscription.objects.get()
    done = Delivery.objects.create(
        subscription=subscription, event_type="session.ended", payload={"type": "session.ended"}, state="failed", attempts=8
    )
    done.attempt_log.create(at=done.created_at, status_code=500, duration_ms=12)
    pending = Delivery.objects.create(
        subscription=subscription, event_type="session.ended", payload={}, next_attempt_at=done.created_at
    )
    log = api.call("GET", f"/api/v1/webhooks/{made['id']}/deliveries/").json()["results"]
    assert [d["id"] for d in log] == [pending.pk, done.pk]
    assert log[1]["log"] == [{"at": log[1]["log"][0]["at"], "status_code": 500, "error": "", "duration_ms": 12}]
    again = api.call("POST", f"/api/v1/webhooks/{made['id']}/deliveries/{done.pk}/redeliver/")
    assert again.status_code == 202 and again.json()["message_id"] == done.message_id and again.json()["state"] == "pending"
    refused = api.call("POST", f"/api/v1/webhooks/{made['id']}/deliveries/{pending.pk}/redeliver/")
    assert refused.status_code == 409 and refused.json()["error"]["code"] == "conflict"
    assert AuditEvent.objects.filter(action="webhook.redeliver").count() == 1


def test_the_lists_and_the_console_pages_do_not_grow_with_their_rows(api, world):
    from tests.api.test_query_counts import queries_for

    made = api.call("POST", "/api/v1/webhooks/", {**GOOD, "courses": [world["course"].pk]}).json()
    subscription = Subscription.objects.get()

    def add(n: int) -> None:
        for _ in range(n):
            api.call("POST", "/api/v1/webhooks/", {**GOOD, "courses": [world["course"].pk]})
            done = Delivery.objects.create(subscription=subscription, event_type="session.ended", payload={}, state="failed")
            done.attempt_log.create(at=done.created_at, status_code=500, duration_ms=3)

    add(2)
    few = queries_for(api, "/api/v1/webhooks/"), queries_for(api, f"/api/v1/webhooks/{made['id']}/deliveries/")
    add(10)
    assert (queries_for(api, "/api/v1/webhooks/"), queries_for(api, f"/api/v1/webhooks/{made['id']}/deliveries/")) == few
