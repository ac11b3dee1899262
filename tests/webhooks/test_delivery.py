"""Delivering over real HTTP to a receiver that checks the signature as docs/lms.md "Webhooks" says:
success, retry with backoff after a 500, giving up after the last attempt, timeouts and refused
connections in the log, tampering detected, rotation, redelivery, sweeping and pruning."""

from __future__ import annotations

import json
import random
import time
from datetime import timedelta

import pytest
from django.utils import timezone

from tests.conftest import wait_for
from tests.webhooks.receiver import verify
from webhooks.models import Delivery, Subscription
from webhooks.services import (
    deliveries_due,
    deliveries_prune,
    delivery_attempt,
    delivery_redeliver,
    subscription_create,
    subscription_rotate_secret,
)
from webhooks.signing import retry_delay_seconds, signed_headers

BODY = {"type": "session.ended", "timestamp": "2026-11-30T10:00:00Z", "data": {"session": "s1", "end_state": "stopped"}}


@pytest.fixture
def subscription(world, receiver) -> Subscription:
    subscription, secret = subscription_create(
        institution=world["course"].institution, url=receiver.url, event_types=["session.ended"]
    )
    receiver.secret = secret
    return subscription


def owed(subscription, **fields) -> Delivery:
    fields = {"next_attempt_at": timezone.now(), **fields}
    return Delivery.objects.create(subscription=subscription, event_type="session.ended", payload=BODY, **fields)


def test_a_delivery_is_signed_posted_and_logged(subscription, receiver):
    delivery = owed(subscription)
    attempt = delivery_attempt(delivery_id=delivery.pk)
    assert attempt.status_code == 204 and attempt.error == "" and attempt.duration_ms >= 0
    delivery.refresh_from_db()
    assert (delivery.state, delivery.attempts, delivery.completed_at is not None) == ("succeeded", 1, True)
    [got] = receiver.got
    assert got.verified and got.event == BODY
    assert got.headers["webhook-id"] == delivery.message_id and got.headers["content-type"] == "application/json"
    assert delivery_attempt(delivery_id=delivery.pk) is None  # done: never posted twice
    assert len(receiver.got) == 1


def test_a_failed_attempt_is_retried_after_a_backoff_then_succeeds(subscription, receiver, settings):
    settings.WEBHOOK_RETRY_BASE_SECONDS = 0.2
    receiver.statuses = [500]
    delivery = owed(subscription)
    first = delivery_attempt(delivery_id=delivery.pk)
    delivery.refresh_from_db()
    assert first.status_code == 500 and delivery.state == "pending" and delivery.attempts == 1
    wait = (delivery.next_attempt_at - first.at).total_seconds()
    assert 0.1 <= wait <= 0.3
    assert delivery_attempt(delivery_id=delivery.pk) is None  # not due yet
    wait_for(lambda: timezone.now() >= delivery.next_attempt_at, timeout=5, message="the retry due")
    assert delivery_attempt(delivery_id=delivery.pk).status_code == 204
    delivery.refresh_from_db()
    assert delivery.state == "succeeded" and [a.status_code for a in delivery.attempt_log.all()] == [500, 204]
    assert [r.headers["webhook-id"] for r in receiver.got] == [delivery.message_id] * 2


def test_it_gives_up_after_the_last_attempt(subscription, receiver, settings):
    settings.WEBHOOK_RETRY_BASE_SECONDS = 0.05
    settings.WEBHOOK_MAX_ATTEMPTS = 3
    receiver.statuses = [500, 502, 503, 200]
    delivery = owed(subscription)
    for _ in range(3):
        Delivery.objects.filter(pk=delivery.pk).update(next_attempt_at=timezone.now())
        assert delivery_attempt(delivery_id=delivery.pk) is not None
    delivery.refresh_from_db()
    assert (delivery.state, delivery.attempts, delivery.next_attempt_at) == ("failed", 3, None)
    assert [a.status_code for a in delivery.attempt_log.all()] == [500, 502, 503]
    assert delivery_attempt(delivery_id=delivery.pk) is None and len(receiver.got) == 3
    subscription.refresh_from_db()
    assert subscription.consecutive_failures == 1


def test_a_subscription_is_paused_after_deliveries_failed_in_a_row_and_a_success_resets_the_count(
    subscription, receiver, settings
):
    from labs.models import AuditEvent

    settings.WEBHOOK_MAX_ATTEMPTS = 1
    settings.WEBHOOK_AUTO_PAUSE_FAILURES = 2
    receiver.statuses = [500, 204, 500, 500]
    for _ in range(3):
        delivery_attempt(delivery_id=owed(subscription).pk)
    subscription.refresh_from_db()
    assert (subscription.active, subscription.consecutive_failures) == (True, 1)  # fail, success, fail
    delivery_attempt(delivery_id=owed(subscription).pk)
    subscription.refresh_from_db()
    assert (subscription.active, subscription.consecutive_failures) == (False, 2)
    assert AuditEvent.objects.get(action="webhook.auto_pause").actor_name == "system"
    assert delivery_attempt(delivery_id=owed(subscription).pk) is None and len(receiver.got) == 4  # paused: nothing sent


def test_timeouts_and_refused_connections_are_logged_as_errors(subscription, receiver, settings):
    settings.WEBHOOK_TIMEOUT_SECONDS = 0.5
    receiver.hold_next = 2
    delivery = owed(subscription)
    attempt = delivery_attempt(delivery_id=delivery.pk)
    assert attempt.status_code is None and attempt.error == "no answer within 0.5 s"
    Subscription.objects.filter(pk=subscription.pk).update(url="http://127.0.0.1:9/nobody-listens")
    other = owed(subscription)
    refused = delivery_attempt(delivery_id=other.pk)
    assert refused.status_code is None and refused.error.startswith("could not connect")
    assert subscription.secret not in refused.error


def test_a_private_address_is_refused_at_delivery_unless_allowed(subscription, receiver, settings):
    settings.OUTBOUND_ALLOW_PRIVATE_ADDRESSES = False
    attempt = delivery_attempt(delivery_id=owed(subscription).pk)
    assert attempt.error.startswith("refused: 127.0.0.1 is 127.0.0.1") and receiver.got == []


def named(world, receiver, host: str) -> Subscription:
    """A subscription to the receiver by a name the test's DNS resolves."""
    subscription, receiver.secret = subscription_create(
        institution=world["course"].institution, url=receiver.url.replace("127.0.0.1", host), event_types=["session.ended"]
    )
    return subscription


def test_a_delivery_goes_to_the_address_its_name_resolved_to_once(world, receiver, dns):
    dns.rebind("hooks.lms.test", "127.0.0.1", "127.0.0.2")  # a second resolution would miss the receiver

    attempt = delivery_attempt(delivery_id=owed(named(world, receiver, "hooks.lms.test")).pk)

    assert attempt.status_code == 204, attempt.error
    [got] = receiver.got
    assert got.verified and got.headers["host"] == f"hooks.lms.test:{receiver.url.split(':')[2].split('/')[0]}"
    assert dns.asked == ["hooks.lms.test"]


def test_a_receiver_name_that_rebinds_to_a_local_address_after_the_check_gets_nothing(world, receiver, dns, settings):
    settings.OUTBOUND_ALLOW_PRIVATE_ADDRESSES = False
    settings.WEBHOOK_TIMEOUT_SECONDS = 0.5
    dns.rebind("hooks.lms.test", "93.184.215.14", "127.0.0.1")  # public when checked, then the portal's own host

    attempt = delivery_attempt(delivery_id=owed(named(world, receiver, "hooks.lms.test")).pk)

    assert attempt.status_code is None
    assert attempt.error.startswith(("could not connect", "no answer")), attempt.error
    assert receiver.got == [] and dns.asked == ["hooks.lms.test"]


def test_the_receiver_detects_tampering_and_a_wrong_or_old_signature(subscription, receiver):
    body = json.dumps(BODY).encode()
    now = int(time.time())
    headers = signed_headers(receiver.secret, "msg_1", now, body)
    assert verify(receiver.secret, headers, body) == BODY
    with pytest.raises(ValueError, match="bad signature"):
        verify(receiver.secret, headers, body.replace(b"stopped", b"running"))
    with pytest.raises(ValueError, match="bad signature"):
        verify(receiver.secret, {**headers, "webhook-id": "msg_2"}, body)
    with pytest.raises(ValueError, match="bad signature"):
        verify(subscription_rotate_secret(subscription=subscription), headers, body)
    old = signed_headers(receiver.secret, "msg_1", now - 3600, body)
    with pytest.raises(ValueError, match="too old"):
        verify(receiver.secret, old, body)


def test_after_a_rotation_deliveries_are_signed_with_the_new_secret(subscription, receiver):
    old = receiver.secret
    new = subscription_rotate_secret(subscription=subscription)
    assert delivery_attempt(delivery_id=owed(subscription).pk).status_code == 401  # the receiver still has the old one
    receiver.secret = new
    assert delivery_attempt(delivery_id=owed(subscription).pk).status_code == 204
    assert old != new


def test_a_redelivery_sends_the_same_message_again(subscription, receiver):
    delivery = owed(subscription)
    delivery_attempt(delivery_id=delivery.pk)
    delivery.refresh_from_db()
    again = delivery_redeliver(delivery=delivery)
    assert delivery_attempt(delivery_id=again.pk).status_code == 204
    assert [r.headers["webhook-id"] for r in receiver.got] == [delivery.message_id] * 2
    assert [r.event for r in receiver.got] == [BODY, BODY]


def test_the_sweep_finds_due_deliveries_no_worker_holds_of_active_subscriptions(subscription, world):
    now = timezone.now()
    due = owed(subscription)
    owed(subscription, lease_until=now + timedelta(minutes=1))  # a worker is posting it
    expired = owed(subscription, lease_until=now - timedelta(seconds=1))  # that worker died
    owed(subscription, next_attempt_at=now + timedelta(hours=1))  # a retry not due yet
    owed(subscription, state="succeeded", next_attempt_at=None)
    assert deliveries_due() == [due.pk, expired.pk]
    Subscription.objects.filter(pk=subscription.pk).update(active=False)
    assert deliveries_due() == []


def test_old_finished_deliveries_are_pruned_and_pending_ones_kept(subscription, settings):
    settings.WEBHOOK_RETENTION_DAYS = 30
    old = timezone.now() - timedelta(days=31)
    owed(subscription, state="succeeded", next_attempt_at=None, completed_at=old).attempt_log.create(at=old, duration_ms=1)
    owed(subscription, state="failed", next_attempt_at=None, completed_at=timezone.now())
    pending = owed(subscription)
    Delivery.objects.filter(pk=pending.pk).update(created_at=old)
    assert deliveries_prune() == 1
    assert Delivery.objects.count() == 2


def test_the_backoff_grows_fourfold_with_jitter_up_to_the_maximum():
    rng = random.Random(4)
    delays = [retry_delay_seconds(n, base=15, maximum=21600, rng=rng) for n in range(1, 9)]
    for n, delay in enumerate(delays, start=1):
        full = min(21600, 15 * 4 ** (n - 1))
        assert full / 2 <= delay <= full
    with pytest.raises(ValueError):
        retry_delay_seconds(0, base=1, maximum=2)


def test_workers_racing_for_one_delivery_post_it_once(transactional_db, world, receiver):
    from concurrent.futures import ThreadPoolExecutor

    from django.db import connection

    subscription, receiver.secret = subscription_create(
        institution=world["course"].institution, url=receiver.url, event_types=["session.ended"]
    )
    delivery = owed(subscription)
    receiver.hold_next = 0.5  # the winner's POST takes a while: the others try meanwhile

    def attempt(_):
        try:
            return delivery_attempt(delivery_id=delivery.pk)
        finally:
            connection.close()

    with ThreadPoolExecutor(4) as pool:
        results = list(pool.map(attempt, range(4)))
    assert sum(r is not None for r in results) == 1 and len(receiver.got) == 1
    delivery.refresh_from_db()
    assert delivery.state == "succeeded" and delivery.attempts == 1
