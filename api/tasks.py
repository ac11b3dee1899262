"""Celery tasks of the LMS API: take ids (or nothing), call a service; running one twice changes nothing."""

from __future__ import annotations

from celery import shared_task

from api import services


@shared_task(name="api.tasks.idempotency_keys_prune")
def idempotency_keys_prune_task() -> int:
    return services.idempotency_keys_prune()
