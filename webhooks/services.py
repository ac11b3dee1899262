"""Write paths of the webhooks: subscriptions (each change audited, in its transaction), the
deliveries owed to them, one attempt at a delivery, redelivery and pruning."""

from __future__ import annotations

import json
import logging
import time
from dataclasses import dataclass
from datetime import timedelta

import requests
from django.conf import settings
from django.db import transaction
from django.db.models import Exists, F, OuterRef, Q
from django.utils import timezone

from labs import dispatch
from labs.models import Course, Institution
from labs.outbound import AddressRefused, http_session
from labs.services.audit import audit_record
from webhooks.models import Attempt, Delivery, Subscription
from webhooks.signing import retry_delay_seconds, secret_new, signed_headers

logger = logging.getLogger(__name__)

DELIVER_TASK = "webhooks.tasks.deliver"
USER_AGENT = "NPU-Lab-Portal-Webhooks/1"


def _target(subscription: Subscription) -> str:
    return f"webhook {subscription.pk} → {subscription.url}"


def _shown(subscription: Subscription) -> dict:
    """A subscription as the audit log records it: never the secret."""
    return {
        "url": subscription.url,
        "description": subscription.description,
        "event_types": list(subscription.event_types),
        "courses": sorted(subscription.courses.values_list("code", flat=True)),
        "active": subscription.active,
    }


# --- subscriptions -------------------------------------------------------------------------------


def subscription_create(
    *,
    institution: Institution,
    url: str,
    event_types: list[str],
    courses: list[Course] = (),
    description: str = "",
    active: bool = True,
    by=None,
) -> tuple[Subscription, str]:
    """A new subscription (validated by ``webhooks.forms.SubscriptionForm``); returns it and its
    signing secret, to show once."""
    secret = secret_new()
    with transaction.atomic():
        subscription = Subscription.objects.create(
            institution=institution,
            url=url,
            description=description,
            event_types=sorted(set(event_types)),
            active=active,
            secret=secret,
            created_by=by if getattr(by, "pk", None) else None,
        )
        subscription.courses.set(courses)
        audit_record(
            by=by, action="webhook.create", target=_target(subscription), institution=institution, after=_shown(subscription)
        )
    return subscription, secret


def subscription_update(*, subscription: Subscription, by=None, **changes) -> Subscription:
    """Change ``url``, ``description``, ``event_types``, ``courses`` or ``active`` (validated already)."""
    with transaction.atomic():
        Subscription.objects.select_for_update().filter(pk=subscription.pk).first()
        before = _shown(subscription)
        courses = changes.pop("courses", None)
        if "event_types" in changes:
            changes["event_types"] = sorted(set(changes["event_types"]))
        for name, value in changes.items():
            setattr(subscription, name, value)
        if changes:
            subscription.save(update_fields=list(changes))
        if courses is not None:
            subscription.courses.set(courses)
        after = _shown(subscription)
        if after != before:
            changed = [k for k in after if after[k] != before[k]]
            action = "webhook.update"
            if changed == ["active"]:
                action = "webhook.resume" if subscription.active else "webhook.pause"
            audit_record(
                by=by,
                action=action,
                target=_target(subscription),
                institution=subscription.institution,
                before={k: before[k] for k in changed},
                after={k: after[k] for k in changed},
            )
    return subscription


def subscription_rotate_secret(*, subscription: Subscription, by=None) -> str:
    """A new signing secret, used from the next attempt on; returns it, to show once."""
    secret = secret_new()
    with transaction.atomic():
        Subscription.objects.filter(pk=subscription.pk).update(secret=secret, secret_rotated_at=timezone.now())
        audit_record(by=by, action="webhook.rotate_secret", target=_target(subscription), institution=subscription.institution)
    subscription.refresh_from_db(fields=["secret", "secret_rotated_at"])
    return secret


def subscription_delete(*, subscription: Subscription, by=None) -> None:
    """Delete the subscription with its deliveries and their log."""
    with transaction.atomic():
        audit_record(
            by=by,
            action="webhook.delete",
            target=_target(subscription),
            institution=subscription.institution,
            before=_shown(subscription),
        )
        subscription.delete()


# --- deliveries ----------------------------------------------------------------------------------


def deliveries_send(delivery_ids: list[int]) -> None:
    """Ask the workers to deliver these once the transaction commits (beat's sweep is the backstop)."""

    def send() -> None:
        for delivery_id in delivery_ids:
            dispatch.send(DELIVER_TASK, delivery_id)

    if delivery_ids:
        transaction.on_commit(send, robust=True)


def deliveries_create(deliveries: list[Delivery]) -> list[Delivery]:
    """Store events owed to subscriptions (the outbox) in the caller's transaction, the one of
    the change they tell of, and have them sent once it commits. The send after the commit only
    saves time: should it be lost (the process dies first), beat's sweep finds them due."""
    now = timezone.now()
    for delivery in deliveries:
        delivery.next_attempt_at = now
    with transaction.atomic(savepoint=False):
        created = Delivery.objects.bulk_create(deliveries)
        deliveries_send([d.pk for d in created])
    return created


class RedeliverRefused(Exception):
    """The delivery is still being tried: it cannot be sent again yet."""


def delivery_redeliver(*, delivery: Delivery, by=None) -> Delivery:
    """Send a delivered or failed delivery again, as a new delivery with the same ``webhook-id``
    (a receiver that saw it already can tell). Raises ``RedeliverRefused`` while it is pending."""
    if delivery.state == Delivery.State.PENDING:
        raise RedeliverRefused()
    with transaction.atomic():
        again = Delivery.objects.create(
            subscription=delivery.subscription,
            message_id=delivery.message_id,
            event_type=delivery.event_type,
            ordering_key=delivery.ordering_key,
            payload=delivery.payload,
            next_attempt_at=timezone.now(),
        )
        audit_record(
            by=by,
            action="webhook.redeliver",
            target=_target(delivery.subscription),
            institution=delivery.subscription.institution,
            after={"delivery": delivery.pk, "event": delivery.event_type, "message_id": delivery.message_id},
        )
        deliveries_send([again.pk])
    return again


def _due(now) -> Q:
    """Pending, due, of an active subscription, held by no worker, and first in its queue."""
    earlier = Delivery.objects.filter(
        subscription_id=OuterRef("subscription_id"),
        ordering_key=OuterRef("ordering_key"),
        state=Delivery.State.PENDING,
        pk__lt=OuterRef("pk"),
    ).exclude(ordering_key="")
    # Every condition on the delivery's own row, no join: then an UPDATE that waited for another
    # worker's claim re-checks the lease on the row that worker wrote, and finds it taken.
    return (
        Q(state=Delivery.State.PENDING, next_attempt_at__lte=now)
        & (Q(lease_until__isnull=True) | Q(lease_until__lte=now))
        & Q(subscription_id__in=Subscription.objects.filter(active=True).values("pk"))
        & ~Exists(earlier)
    )


def _next_in_queue(delivery: Delivery) -> None:
    """The delivery is finished: send the next of its queue (the same session's next event) now."""
    if not delivery.ordering_key:
        return
    following = (
        Delivery.objects.filter(
            subscription_id=delivery.subscription_id,
            ordering_key=delivery.ordering_key,
            state=Delivery.State.PENDING,
            pk__gt=delivery.pk,
        )
        .order_by("pk")
        .values_list("pk", flat=True)
        .first()
    )
    if following is not None:
        deliveries_send([following])


def deliveries_due(*, limit: int = 1000) -> list[int]:
    """Pending deliveries of active subscriptions whose attempt is due and that no worker holds."""
    now = timezone.now()
    return list(Delivery.objects.filter(_due(now)).order_by("next_attempt_at", "pk").values_list("pk", flat=True)[:limit])


@dataclass(frozen=True)
class Outcome:
    status_code: int | None
    error: str
    duration_ms: int

    @property
    def succeeded(self) -> bool:
        return self.status_code is not None and 200 <= self.status_code < 300


def delivery_attempt(*, delivery_id: int) -> Attempt | None:
    """Post the delivery once, if it is due and no other worker holds it; record the attempt.

    The claim is a conditional UPDATE that sets a lease (twice the timeout): a worker that dies
    while posting leaves a lease that runs out, and beat's sweep tries again. On failure the next
    attempt is set ``retry_delay_seconds`` ahead, until ``WEBHOOK_MAX_ATTEMPTS``: then the
    delivery has failed. Returns ``None`` when there was nothing to do.
    """
    now = timezone.now()
    lease = now + timedelta(seconds=2 * settings.WEBHOOK_TIMEOUT_SECONDS + 1)
    if Delivery.objects.filter(_due(now), pk=delivery_id).update(lease_until=lease) != 1:
        return None  # not due, done, paused, behind an earlier one, or another worker has it
    delivery = Delivery.objects.select_related("subscription").get(pk=delivery_id)
    outcome = _post(delivery)
    attempts = delivery.attempts + 1
    delay = None
    update: dict[str, object] = {"attempts": F("attempts") + 1, "lease_until": None, "last_status_code": outcome.status_code}
    finished = timezone.now()
    if outcome.succeeded:
        update.update(state=Delivery.State.SUCCEEDED, completed_at=finished, next_attempt_at=None)
    elif attempts >= settings.WEBHOOK_MAX_ATTEMPTS:
        update.update(state=Delivery.State.FAILED, completed_at=finished, next_attempt_at=None)
    else:
        delay = retry_delay_seconds(
            attempts, base=settings.WEBHOOK_RETRY_BASE_SECONDS, maximum=settings.WEBHOOK_RETRY_MAX_SECONDS
        )
        update["next_attempt_at"] = finished + timedelta(seconds=delay)
    with transaction.atomic():
        attempt = Attempt.objects.create(
            delivery=delivery, at=now, status_code=outcome.status_code, error=outcome.error[:300], duration_ms=outcome.duration_ms
        )
        # Only while the lease is ours: past it, another worker may have posted and recorded since.
        if Delivery.objects.filter(pk=delivery_id, lease_until=lease).update(**update):
            if outcome.succeeded:
                Subscription.objects.filter(pk=delivery.subscription_id).update(consecutive_failures=0)
            elif update.get("state") == Delivery.State.FAILED:
                _failed_for_good(delivery.subscription)
            if delay is not None:
                transaction.on_commit(lambda: dispatch.send(DELIVER_TASK, delivery_id, countdown=delay), robust=True)
            else:
                _next_in_queue(delivery)
    return attempt


def _failed_for_good(subscription: Subscription) -> None:
    """Count a delivery given up; pause the subscription after ``WEBHOOK_AUTO_PAUSE_FAILURES`` in a row."""
    Subscription.objects.filter(pk=subscription.pk).update(consecutive_failures=F("consecutive_failures") + 1)
    limit = settings.WEBHOOK_AUTO_PAUSE_FAILURES
    if limit and Subscription.objects.filter(pk=subscription.pk, active=True, consecutive_failures__gte=limit).update(
        active=False
    ):
        audit_record(
            by=None,
            action="webhook.auto_pause",
            target=_target(subscription),
            institution=subscription.institution,
            after={"failed_deliveries_in_a_row": limit},
        )
        logger.warning("webhook subscription %s paused after %s failed deliveries in a row", subscription.pk, limit)


def _post(delivery: Delivery) -> Outcome:
    subscription = delivery.subscription
    body = json.dumps(delivery.payload, separators=(",", ":"), ensure_ascii=False).encode("utf-8")
    headers = signed_headers(subscription.secret, delivery.message_id, int(time.time()), body)
    started = time.monotonic()
    status_code, error = None, ""
    try:
        # The receiver's name is resolved once, checked and connected to (labs.outbound).
        with http_session(timeout=settings.WEBHOOK_TIMEOUT_SECONDS, user_agent=USER_AGENT) as session:
            with session.post(
                subscription.url,
                data=body,
                headers=headers,
                allow_redirects=False,
                stream=True,  # the answer's body is not read: only its status counts
            ) as response:
                status_code = response.status_code
    except AddressRefused as exc:
        error = str(exc)
    except requests.Timeout:
        error = f"no answer within {settings.WEBHOOK_TIMEOUT_SECONDS:g} s"
    except requests.ConnectionError as exc:
        error = f"could not connect: {_root_cause(exc)}"
    except requests.RequestException as exc:
        error = f"{type(exc).__name__}: {exc}"
    duration_ms = round((time.monotonic() - started) * 1000)
    if error:
        logger.info("webhook delivery %s to subscription %s failed: %s", delivery.pk, subscription.pk, error)
    return Outcome(status_code, error, duration_ms)


def _root_cause(exc: BaseException) -> str:
    while exc.__cause__ is not None or exc.__context__ is not None:
        exc = exc.__cause__ or exc.__context__
    return str(exc) or type(exc).__name__


def deliveries_prune(*, now=None) -> int:
    """Delete deliveries (and their log) finished more than ``WEBHOOK_RETENTION_DAYS`` ago; returns how many."""
    cutoff = (now or timezone.now()) - timedelta(days=settings.WEBHOOK_RETENTION_DAYS)
    _total, per_model = Delivery.objects.filter(completed_at__lt=cutoff).exclude(state=Delivery.State.PENDING).delete()
    return per_model.get(Delivery._meta.label, 0)
