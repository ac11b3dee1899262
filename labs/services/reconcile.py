"""The reconciler: diff the ledger, the cluster driver and every node agent, and repair drift.

Run from Celery beat (``labs.tasks.reconcile``) and safe to run at any time, twice, or in two
processes at once: every repair is idempotent (driver delete, agent unregister, conditional
state changes). What it repairs, each recorded as a ``RepairEvent``:

- a session that is starting with an instance the driver made but never recorded (its worker
  died between the two) is bound to it — the idempotent start step records the reference;
- an instance the driver holds for no open session (a pod left by a crashed stop) is deleted;
- a running session whose instance is gone from the driver, or from a reachable agent, fails
  with the reason and its allocation is released;
- an instance an agent reports that no open session owns (a residual left by a force-deleted
  pod) is unregistered once it has been seen for ``LAB_RESIDUAL_GRACE_SECONDS`` — never sooner,
  and never because it has not used the NPU yet: a fresh Jupyter session is idle by nature;
- an agent that does not answer makes its node unavailable for placements; nothing on it is
  released on a guess.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from datetime import timedelta

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from labs.agent.client import AgentError
from labs.domain.states import ACTIVE, SessionState
from labs.drivers import DriverError, get_driver
from labs.models import InstanceSample, LabSession, Node, RepairEvent, ResidualCandidate
from labs.services.agents import agent_client, instance_unregister, node_inventory_sync, node_mark_unavailable
from labs.services.lifecycle import session_start_instance
from labs.services.sessions import session_begin_stop

logger = logging.getLogger(__name__)


@dataclass
class ReconcileReport:
    bound: int = 0
    orphans_deleted: int = 0
    sessions_failed: int = 0
    residuals_seen: int = 0
    residuals_unregistered: int = 0
    nodes_unreachable: list[str] = field(default_factory=list)
    breaches: int = 0


def reconcile() -> ReconcileReport:
    report = ReconcileReport()
    driver = get_driver()
    try:
        driver_ids = driver.list()
    except DriverError as exc:
        # Without the cluster's view, nothing about pods can be decided; agents still sync.
        logger.warning("reconcile: the cluster driver cannot list instances: %s", exc)
        driver_ids = None
    if driver_ids is not None:
        _bind_unrecorded(driver_ids, report)
        _delete_orphans(driver, driver_ids, report)
        _fail_vanished_from_driver(driver_ids, report)
    for node in Node.objects.exclude(agent_url="").order_by("name"):
        _reconcile_node(node, report)
    if any(
        (report.bound, report.orphans_deleted, report.sessions_failed, report.residuals_unregistered, report.nodes_unreachable)
    ):
        logger.info("reconcile: %s", report)
    return report


def _bind_unrecorded(driver_ids: set[str], report: ReconcileReport) -> None:
    unbound = LabSession.objects.filter(state=SessionState.STARTING, driver_ref="", pk__in=list(driver_ids))
    for session_id in unbound.values_list("pk", flat=True):
        session_start_instance(session_id)  # idempotent create: records the existing instance
        session = LabSession.objects.filter(pk=session_id).only("driver_ref").first()
        if session and session.driver_ref:
            report.bound += 1
            RepairEvent.objects.create(
                kind=RepairEvent.Kind.SESSION_BOUND,
                session_id=session_id,
                entity_id=session.driver_ref,
                message="the instance existed but was not recorded (a worker stopped mid-start); recorded it",
            )


def _delete_orphans(driver, driver_ids: set[str], report: ReconcileReport) -> None:
    open_ids = {
        str(pk) for pk in LabSession.objects.filter(pk__in=list(driver_ids), state__in=ACTIVE).values_list("pk", flat=True)
    }
    for session_id in sorted(driver_ids - open_ids):
        try:
            driver.delete(session_id)
        except DriverError as exc:
            RepairEvent.objects.create(
                kind=RepairEvent.Kind.REPAIR_FAILED, message=f"could not delete instance of {session_id}: {exc}"
            )
            continue
        report.orphans_deleted += 1
        session = LabSession.objects.filter(pk=session_id).first()
        RepairEvent.objects.create(
            kind=RepairEvent.Kind.ORPHAN_DELETED,
            session=session,
            message=f"deleted an instance of {'a ' + session.state + ' session' if session else 'no known session'}",
        )


def _fail_vanished_from_driver(driver_ids: set[str], report: ReconcileReport) -> None:
    running = LabSession.objects.filter(state=SessionState.RUNNING).exclude(pk__in=list(driver_ids))
    for session_id in running.values_list("pk", flat=True):
        _fail(session_id, "the lab's instance disappeared from the cluster", report)


def _fail(session_id, reason: str, report: ReconcileReport, entity_id: str = "") -> None:
    if session_begin_stop(session_id, reason=reason, failed=True):
        report.sessions_failed += 1
        RepairEvent.objects.create(
            kind=RepairEvent.Kind.SESSION_FAILED, session_id=session_id, entity_id=entity_id, message=reason
        )


def _reconcile_node(node: Node, report: ReconcileReport) -> None:
    if not node_inventory_sync(node):
        report.nodes_unreachable.append(node.name)
        return
    try:
        instances = agent_client(node).instances()
    except AgentError as exc:
        node_mark_unavailable(node, reason=f"agent unreachable: {exc}")
        report.nodes_unreachable.append(node.name)
        return
    now = timezone.now()
    reported = {i.entity_id: i for i in instances}
    # Sessions that own an instance on this node, by the entity id the driver returned.
    owned = dict(
        LabSession.objects.filter(state__in=ACTIVE, allocation__card__node=node, allocation__released_at__isnull=True)
        .exclude(driver_ref="")
        .values_list("driver_ref", "pk")
    )
    if settings.LAB_AGENT_REGISTERS_INSTANCES:
        # Only where instances are registered for the portal's sessions can a missing one be
        # read as vanished; on Kubernetes the pod check above covers it.
        running = LabSession.objects.filter(
            state=SessionState.RUNNING, allocation__card__node=node, allocation__released_at__isnull=True
        ).exclude(driver_ref="")
        for session_id, entity_id in running.values_list("pk", "driver_ref"):
            if entity_id not in reported:
                _fail(session_id, f"its NPU instance vanished from node {node.name}", report, entity_id)
    _residuals(node, reported, owned, now, report)
    _record_samples(node, instances, now)
    report.breaches += _check_guarantees(node, now)


def _residuals(node: Node, reported: dict, owned: dict, now, report: ReconcileReport) -> None:
    grace = timedelta(seconds=settings.LAB_RESIDUAL_GRACE_SECONDS)
    strangers = [entity_id for entity_id in reported if entity_id not in owned]
    ResidualCandidate.objects.filter(node=node).exclude(entity_id__in=strangers).delete()
    for entity_id in strangers:
        candidate, created = ResidualCandidate.objects.get_or_create(
            node=node, entity_id=entity_id, defaults={"first_seen_at": now}
        )
        if created:
            report.residuals_seen += 1
            RepairEvent.objects.create(
                kind=RepairEvent.Kind.RESIDUAL_SEEN,
                node=node,
                entity_id=entity_id,
                message=f"no open session owns this instance; it is unregistered if still so after {grace.total_seconds():.0f} s",
            )
        if now - candidate.first_seen_at < grace:
            continue
        # Check the ledger again right before acting: the session may have been bound meanwhile.
        if LabSession.objects.filter(driver_ref=entity_id, state__in=ACTIVE).exists():
            candidate.delete()
            continue
        outcome = instance_unregister(node, entity_id)
        if outcome is None:
            continue  # unreachable now: try again next time
        candidate.delete()
        report.residuals_unregistered += 1
        RepairEvent.objects.create(
            kind=RepairEvent.Kind.RESIDUAL_UNREGISTERED,
            node=node,
            entity_id=entity_id,
            message=f"unregistered a residual instance seen for {(now - candidate.first_seen_at).total_seconds():.0f} s"
            if outcome
            else "the residual instance was already gone",
        )


def _record_samples(node: Node, instances, now) -> None:
    samples = [
        InstanceSample(
            node=node,
            entity_id=i.entity_id,
            taken_at=now,
            floor_percent=i.core_percent,
            demand_percent=i.demand_percent,
            delivered_percent=i.aicore_percent,
        )
        for i in instances
        # Real nodes do not report demand; without it a low share is not a broken guarantee.
        if i.demand_percent is not None
    ]
    with transaction.atomic():
        InstanceSample.objects.bulk_create(samples)
        window = timedelta(seconds=settings.LAB_GUARANTEE_WINDOW_SECONDS)
        InstanceSample.objects.filter(node=node, taken_at__lt=now - 2 * window).delete()


def _check_guarantees(node: Node, now) -> int:
    """Record a breach for each instance whose floor was not delivered over the whole window."""
    window_start = now - timedelta(seconds=settings.LAB_GUARANTEE_WINDOW_SECONDS)
    tolerance = settings.LAB_GUARANTEE_TOLERANCE_PERCENT
    by_entity: dict[str, list[InstanceSample]] = {}
    for sample in InstanceSample.objects.filter(node=node, taken_at__gte=window_start).order_by("taken_at"):
        by_entity.setdefault(sample.entity_id, []).append(sample)
    breaches = 0
    for entity_id, samples in by_entity.items():
        if len(samples) < settings.LAB_GUARANTEE_MIN_SAMPLES:
            continue
        if all(s.demand_percent >= s.floor_percent and s.delivered_percent < s.floor_percent - tolerance for s in samples):
            recent = RepairEvent.objects.filter(
                kind=RepairEvent.Kind.GUARANTEE_BREACH, node=node, entity_id=entity_id, created_at__gte=window_start
            )
            if recent.exists():
                continue
            last = samples[-1]
            breaches += 1
            RepairEvent.objects.create(
                kind=RepairEvent.Kind.GUARANTEE_BREACH,
                node=node,
                entity_id=entity_id,
                message=(
                    f"delivered {last.delivered_percent} % AI Core against a floor of {last.floor_percent} % "
                    f"while demanding {last.demand_percent} %, in all {len(samples)} samples of the last "
                    f"{settings.LAB_GUARANTEE_WINDOW_SECONDS} s (tolerance {tolerance} % of the card)"
                ),
            )
    return breaches
