"""Celery tasks: the controller, the node reconciler, the idle and budget checks. Each is idempotent and takes no arguments.

Acknowledged late (settings ``CELERY_TASK_ACKS_LATE``): a task whose worker dies is delivered
again, and running it twice changes nothing. Services never import this module; they send
work by name through ``labs.dispatch``.
"""

from __future__ import annotations

from dataclasses import asdict

from celery import shared_task

from labs.services import activity, budgets, controller, evacuation, reconcile, reservations


@shared_task(name="labs.tasks.controller")
def controller_task() -> dict:
    report = controller.controller_run()
    return asdict(report)


@shared_task(name="labs.tasks.reconcile")
def reconcile_task() -> dict[str, int]:
    report = reconcile.reconcile()
    return {
        "rebound": report.rebound,
        "residuals_unregistered": report.residuals_unregistered,
        "foreign_seen": report.foreign_seen,
        "sessions_failed": report.sessions_failed,
        "nodes_unreachable": len(report.nodes_unreachable),
        "breaches": report.breaches,
    }


@shared_task(name="labs.tasks.nodes_recheck")
def nodes_recheck_task() -> list[str]:
    return reconcile.nodes_recheck()


@shared_task(name="labs.tasks.budgets")
def budgets_task() -> dict[str, int]:
    return {k: len(v) for k, v in asdict(budgets.budgets_enforce()).items()}


@shared_task(name="labs.tasks.activity")
def activity_task() -> dict[str, int]:
    report = activity.activity_check()
    return {"looked": report.looked, "unanswered": report.unanswered, "warned": len(report.warned), "culled": len(report.culled)}


@shared_task(name="labs.tasks.reservations")
def reservations_task() -> dict[str, int]:
    return {k: len(v) for k, v in asdict(reservations.reservations_enforce()).items()}


@shared_task(name="labs.tasks.evacuations")
def evacuations_task() -> dict[str, int]:
    return {"stopped": len(evacuation.evacuations_enforce())}
