"""Reads of the webhooks, each through the caller's institution (an API token's) or operator scope."""

from __future__ import annotations

from django.db.models import Prefetch, QuerySet

from labs.models import Institution
from webhooks.models import Attempt, Delivery, Subscription


def subscriptions_of(*, institution: Institution) -> QuerySet[Subscription]:
    return Subscription.objects.filter(institution=institution).prefetch_related("courses").order_by("-created_at", "-pk")


def subscription_of(*, institution: Institution, subscription_id) -> Subscription | None:
    try:
        subscription_id = int(subscription_id)
    except (TypeError, ValueError):
        return None
    if not 0 < subscription_id < 2**63:
        return None
    return subscriptions_of(institution=institution).filter(pk=subscription_id).first()


def subscriptions_for(*, scope) -> QuerySet[Subscription]:
    """An operator's view: their institutions' subscriptions (a platform operator's: all)."""
    qs = (
        Subscription.objects.select_related("institution")
        .prefetch_related("courses")
        .order_by("institution__name", "-created_at")
    )
    return qs if scope.platform else qs.filter(institution_id__in=scope.institutions)


def deliveries_of(*, subscription: Subscription) -> QuerySet[Delivery]:
    """Newest first, each with its attempts (oldest first)."""
    return (
        Delivery.objects.filter(subscription=subscription)
        .prefetch_related(Prefetch("attempt_log", queryset=Attempt.objects.order_by("at", "pk")))
        .order_by("-created_at", "-pk")
    )
