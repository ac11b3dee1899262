"""Webhook subscriptions of an institution's LMS, the deliveries owed to them (the outbox) and
every attempt made to deliver one (the delivery log)."""

from __future__ import annotations

import uuid

from django.conf import settings
from django.db import models
from django.db.models import Q
from django.utils.translation import gettext_lazy as _

from labs.encryption import EncryptedTextField
from webhooks.catalogue import EVENT_TYPES


def new_message_id() -> str:
    return f"msg_{uuid.uuid4().hex}"


class Subscription(models.Model):
    """An LMS endpoint that gets some of its institution's session and usage events.

    ``secret`` signs the deliveries (``webhooks.signing``). The portal signs with it, so it is
    kept, encrypted (``labs.encryption``: the database holds ciphertext); it is shown once (when
    made or rotated) and never logged, listed or audited. ``courses`` empty: every course of the
    institution.
    """

    institution = models.ForeignKey("labs.Institution", on_delete=models.CASCADE, related_name="webhook_subscriptions")
    url = models.URLField(_("URL"), max_length=500)
    description = models.CharField(_("description"), max_length=200, blank=True)
    event_types = models.JSONField(_("events"), default=list)
    courses = models.ManyToManyField("labs.Course", blank=True, related_name="+", verbose_name=_("courses"))
    active = models.BooleanField(_("active"), default=True)
    secret = EncryptedTextField(editable=False)
    secret_rotated_at = models.DateTimeField(null=True, blank=True)
    # Deliveries that failed for good since the last success.
    consecutive_failures = models.PositiveIntegerField(default=0)
    created_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+")
    created_at = models.DateTimeField(_("created"), auto_now_add=True)

    class Meta:
        ordering = ["institution", "-created_at"]
        indexes = [models.Index(fields=["institution", "active"], name="webhook_sub_institution_active")]
        constraints = [models.CheckConstraint(condition=~Q(secret=""), name="webhook_sub_has_secret")]

    def __str__(self) -> str:
        return self.url

    @property
    def event_labels(self) -> list:
        return [EVENT_TYPES.get(name, name) for name in self.event_types]


class Delivery(models.Model):
    """One event owed to one subscription. Written in the transaction of the change it tells of
    (an outbox: both commit or neither does); a worker claims it (``lease_until``), posts it and
    records an ``Attempt``; a failure is retried at ``next_attempt_at``, which beat also watches,
    so a lost task or a killed worker only delays it. ``message_id`` is the ``webhook-id``
    header: the same on every attempt and on a redelivery, so a receiver can drop duplicates.

    Deliveries with the same ``ordering_key`` (a session's id) to one subscription go out one at
    a time, oldest first: an LMS hears that a session ran before it hears that it ended, even
    when the first delivery needed retries. Other sessions' events do not wait for them."""

    class State(models.TextChoices):
        PENDING = "pending", _("pending")
        SUCCEEDED = "succeeded", _("delivered")
        FAILED = "failed", _("failed")

    subscription = models.ForeignKey(Subscription, on_delete=models.CASCADE, related_name="deliveries")
    message_id = models.CharField(max_length=64, default=new_message_id, db_index=True)
    event_type = models.CharField(_("event"), max_length=32)
    ordering_key = models.CharField(max_length=64, blank=True)
    payload = models.JSONField()
    state = models.CharField(_("state"), max_length=16, choices=State.choices, default=State.PENDING)
    attempts = models.PositiveSmallIntegerField(_("attempts"), default=0)
    next_attempt_at = models.DateTimeField(null=True, blank=True)
    lease_until = models.DateTimeField(null=True, blank=True)
    last_status_code = models.PositiveSmallIntegerField(null=True, blank=True)
    created_at = models.DateTimeField(_("created"), auto_now_add=True)
    completed_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at", "-pk"]
        indexes = [
            models.Index(fields=["next_attempt_at"], condition=Q(state="pending"), name="webhook_delivery_due"),
            models.Index(fields=["subscription", "-created_at"], name="webhook_delivery_sub_created"),
            models.Index(fields=["completed_at"], name="webhook_delivery_completed"),
            models.Index(
                fields=["subscription", "ordering_key", "id"], condition=Q(state="pending"), name="webhook_delivery_queue"
            ),
        ]
        constraints = [
            models.CheckConstraint(
                condition=Q(state="pending", next_attempt_at__isnull=False) | ~Q(state="pending"),
                name="webhook_delivery_pending_is_scheduled",
            )
        ]

    def __str__(self) -> str:
        return f"{self.event_type} → {self.subscription_id} ({self.state})"


class Attempt(models.Model):
    """One POST of a delivery: when, the answer's status code or the error, and how long it took."""

    delivery = models.ForeignKey(Delivery, on_delete=models.CASCADE, related_name="attempt_log")
    at = models.DateTimeField(_("time"))
    status_code = models.PositiveSmallIntegerField(_("status"), null=True, blank=True)
    error = models.CharField(_("error"), max_length=300, blank=True)
    duration_ms = models.PositiveIntegerField(_("duration (ms)"))

    class Meta:
        ordering = ["at", "pk"]

    def __str__(self) -> str:
        return f"{self.delivery_id} at {self.at}: {self.status_code or self.error}"

    @property
    def succeeded(self) -> bool:
        return self.status_code is not None and 200 <= self.status_code < 300
