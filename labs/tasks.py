"""Celery tasks: ids in, re-fetch, call one service. Every task is idempotent.

Acknowledged late (settings ``CELERY_TASK_ACKS_LATE``): a task whose worker dies is delivered
again, and running it twice changes nothing.
"""

from __future__ import annotations

from celery import shared_task
from django.conf import settings

from labs.drivers import DriverError
from labs.services import allocation, lifecycle, reconcile


@shared_task(name="labs.tasks.allocation_pass")
def allocation_pass() -> dict[str, int]:
    result = allocation.allocation_pass()
    return {"admitted": len(result.admitted), "waiting": result.waiting, "refused": len(result.refused)}


@shared_task(name="labs.tasks.session_start")
def session_start(session_id: str) -> None:
    if lifecycle.session_start_instance(session_id) == lifecycle.Next.POLL:
        session_poll.apply_async(args=[session_id], countdown=settings.LAB_POLL_INTERVAL_SECONDS)


@shared_task(name="labs.tasks.session_poll")
def session_poll(session_id: str) -> None:
    if lifecycle.session_poll_instance(session_id) == lifecycle.Next.POLL:
        session_poll.apply_async(args=[session_id], countdown=settings.LAB_POLL_INTERVAL_SECONDS)


@shared_task(name="labs.tasks.session_stop", bind=True, autoretry_for=(DriverError,), retry_backoff=2, max_retries=8)
def session_stop(self, session_id: str) -> None:
    lifecycle.session_stop_instance(session_id)


@shared_task(name="labs.tasks.sessions_sweep")
def sessions_sweep() -> dict[str, int]:
    return lifecycle.sessions_sweep()


@shared_task(name="labs.tasks.reconcile")
def reconcile_task() -> dict[str, int]:
    report = reconcile.reconcile()
    return {
        "bound": report.bound,
        "orphans_deleted": report.orphans_deleted,
        "sessions_failed": report.sessions_failed,
        "residuals_unregistered": report.residuals_unregistered,
        "nodes_unreachable": len(report.nodes_unreachable),
        "breaches": report.breaches,
    }
