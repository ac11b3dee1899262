"""Celery tasks of the webhooks: deliver one, sweep for due ones (beat), prune old ones (beat).
Each takes ids, not objects, and calls a service; running one twice changes nothing."""

from __future__ import annotations

from celery import shared_task

from labs import dispatch
from webhooks import services


@shared_task(name="webhooks.tasks.deliver")
def deliver_task(delivery_id: int) -> str:
    attempt = services.delivery_attempt(delivery_id=delivery_id)
    if attempt is None:
        return "nothing to do"
    return str(attempt.status_code or attempt.error)


@shared_task(name="webhooks.tasks.sweep")
def sweep_task() -> int:
    """Send the deliveries that are due and held by no worker: retries whose task was lost, a
    killed worker's delivery once its lease ran out, a paused subscription's once resumed."""
    due = services.deliveries_due()
    for delivery_id in due:
        dispatch.send(services.DELIVER_TASK, delivery_id)
    return len(due)


@shared_task(name="webhooks.tasks.prune")
def prune_task() -> int:
    return services.deliveries_prune()
