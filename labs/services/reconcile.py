"""The node reconciler: the ledger against what every node's agent reports, and drift repaired.

The cluster driver's side (pods and processes) is the lifecycle controller's
(``labs.services.controller``); this is the slower half of observation, one HTTP round per
node every ``RECONCILE_SECONDS``. Run from Celery beat (``labs.tasks.reconcile``) and safe to
run at any time, twice, or in two processes at once: every repair is idempotent (agent
unregister, conditional state changes). What it repairs, each recorded as a ``RepairEvent``:

- an instance the node reports on another card than its allocation (the device plugin, not
  the portal, picks the card on Kubernetes): the allocation is moved to the reported card, so
  the ledger never disagrees with the node for longer than one period;
- an open session's instance that a reachable agent does not list, where the portal itself
  registers instances (local and simulator drivers: the agent restarted or missed one), is
  registered again — never failed: whether the lab lives is the driver's to say;
- an instance is residual by the CCE FlexNPU guide's rule only: "若发现存在entity-id但不存在Pod的UID，
  则说明此NPU虚拟化设备为残留设备" (an entity-id with no pod of that UID is a residual device). The
  node's pods, of every owner, come from the driver (``pods_on``), read after the agent's list:
  a pod exists before its instance is registered, so an entity-id listed first whose pod is not
  in the later list has none. An instance of a pod the portal did not make (a researcher's job on
  the same server) is reported once (``foreign_instance``) and never removed; one of the
  portal's own pods that no open session owns yet, or any more, is the controller's to settle;
- a residual of a session that has ended is unregistered at once (its stop is done); any other
  residual once it has been seen for ``LAB_RESIDUAL_GRACE_SECONDS`` — never sooner, and never
  because it has not used the NPU yet: a fresh Jupyter session is idle by nature. When the pods
  cannot be read, or the list lacks the pod of a running lab the agent reports there (the
  cluster spells the node otherwise), nothing on that node is unregistered that round;
- every node's boot id and NPUs are read from the cluster driver (``nodes_observe``), so a node
  that restarts is known by a boot id seen before (``labs.services.reboots``);
- an agent that does not answer makes its node unavailable for placements; nothing on it is
  released on a guess. Such a node's agent is asked only briefly (``nodes_recheck``'s quick
  check) until it answers again, and then its instances are reconciled at once;
- on a node whose device plugin picks the card without telling (``Node.card_truth`` "none"),
  the ledger's card is only a packing: each card's measured memory is checked against it, and
  a card holding more than the ledger lists there is recorded (``card_totals``); the allocation
  pass already charges that card the difference.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from datetime import timedelta

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from labs.dispatch import controller_wake
from labs.domain.states import ACTIVE, TERMINAL, SessionState
from labs.drivers import DriverError, NodePod, get_driver
from labs.models import Allocation, Card, InstanceSample, LabSession, Node, RepairEvent, ResidualCandidate
from labs.selectors.capacity import memory_beyond_ledger
from labs.selectors.ledger import held_by_card
from labs.services.agents import (
    agent_client,
    instance_register,
    instance_unregister,
    node_inventory_sync,
    node_mark_unavailable,
    node_unreachable,
)
from labs.services.controller import allocation_rebind
from labs.services.locks import RECHECK_LOCK_KEY, try_lock
from labs.services.reboots import nodes_observe
from nodeagent.client import AgentError

logger = logging.getLogger(__name__)


@dataclass
class ReconcileReport:
    rebound: int = 0
    reregistered: int = 0
    sessions_failed: int = 0
    residuals_seen: int = 0
    residuals_unregistered: int = 0
    foreign_seen: int = 0
    nodes_unreachable: list[str] = field(default_factory=list)
    # Nodes whose pods could not be told this round: nothing on them was unregistered.
    pods_unknown: list[str] = field(default_factory=list)
    breaches: int = 0
    cards_over: int = 0
    # Nodes whose restart (a new boot id) or NPUs coming back after one were seen this round.
    nodes_restarted: int = 0


def reconcile() -> ReconcileReport:
    report = ReconcileReport()
    report.nodes_restarted = nodes_observe()
    for node in Node.objects.exclude(agent_url="").order_by("name"):
        # An agent that did not answer is asked only briefly until it does: a hung host must not
        # cost a whole timeout per period.
        checked = node_unreachable(node)
        if checked and not node_inventory_sync(node, timeout=settings.LAB_AGENT_RECHECK_TIMEOUT_SECONDS):
            report.nodes_unreachable.append(node.name)
            continue
        _reconcile_node(node, report, synced=checked)
    if any(
        (
            report.rebound,
            report.nodes_restarted,
            report.sessions_failed,
            report.residuals_unregistered,
            report.foreign_seen,
            report.nodes_unreachable,
            report.pods_unknown,
        )
    ):
        logger.info("reconcile: %s", report)
    return report


def _reconcile_node(node: Node, report: ReconcileReport, *, synced: bool = False) -> None:
    """``synced``: the node's inventory was read just now (its quick check)."""
    if not synced and not node_inventory_sync(node):
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
    # What tells an operator that a node being emptied has nothing left on it (labs.services.evacuation).
    Node.objects.filter(pk=node.pk).exclude(instances_reported=len(reported)).update(instances_reported=len(reported))
    # Sessions that own an instance on this node, by the entity id the driver returned.
    owned = dict(
        LabSession.objects.filter(state__in=ACTIVE, allocation__card__node=node, allocation__released_at__isnull=True)
        .exclude(driver_ref="")
        .values_list("driver_ref", "pk")
    )
    _follow_cards(node, reported, report)
    if settings.LAB_AGENT_REGISTERS_INSTANCES:
        _register_missing(node, reported, report)
    strangers = [entity_id for entity_id in reported if entity_id not in owned]
    if not strangers:
        ResidualCandidate.objects.filter(node=node).delete()
    elif (pods := _node_pods(node, reported, report)) is not None:
        _residuals(node, strangers, pods, now, report)
    _record_samples(node, instances, now)
    report.breaches += _check_guarantees(node, now)
    report.cards_over += _check_card_totals(node, now)


def nodes_recheck() -> list[str]:
    """Ask the agents of unavailable nodes, briefly, whether they answer again; the names of those that do.

    Run at the controller's pace (beat), so a node whose agent came back takes placements again
    within a second or two rather than at the next full reconcile, and its instances are
    reconciled straight away: the registrations of sessions that ended while it did not answer
    go at once. One check at a time (a check that finds another running returns): a hung agent
    makes each wait its whole timeout. Queued sessions that may now fit wake the controller.
    """
    back = []
    with try_lock(RECHECK_LOCK_KEY) as held:
        if not held:
            return back
        for node in Node.objects.filter(available=False).exclude(agent_url="").order_by("name"):
            if node_inventory_sync(node, timeout=settings.LAB_AGENT_RECHECK_TIMEOUT_SECONDS) and node.available:
                back.append(node.name)
                _reconcile_node(node, ReconcileReport(), synced=True)
    if back:
        with transaction.atomic():
            controller_wake()
    return back


def _register_missing(node: Node, reported: dict, report: ReconcileReport) -> None:
    """Register again the instances of open sessions the agent does not list.

    Only where the portal itself registers instances (local and simulator drivers): there a
    missing registration means the agent restarted or never got one, not that the lab died —
    whether the lab lives is the controller's to see, in the driver's ``observe()``. Failing the
    session here would end a healthy lab.
    """
    missing = (
        LabSession.objects.filter(
            state__in=(SessionState.STARTING, SessionState.RUNNING),
            allocation__card__node=node,
            allocation__released_at__isnull=True,
            allocation__cards=1,  # whole-card instances are not the agent's (``instance_register``)
        )
        .exclude(driver_ref="")
        .exclude(driver_ref__in=list(reported))
        .select_related("allocation__card__node")
    )
    for session in missing:
        if instance_register(session):
            report.reregistered += 1
        elif node_unreachable(session.allocation.card.node):
            break  # it stopped answering: the rest waits for its quick check


def _follow_cards(node: Node, reported: dict, report: ReconcileReport) -> None:
    """Move each allocation on this node to the card the agent reports its instance on."""
    ledger = Allocation.objects.filter(
        card__node=node, released_at__isnull=True, entity_id__in=list(reported), session__state__in=ACTIVE
    ).values_list("session_id", "entity_id", "card__index")
    for session_id, entity_id, card_index in ledger:
        actual = reported[entity_id].card_index
        if actual != card_index and allocation_rebind(str(session_id), node=node.name, card_index=actual):
            report.rebound += 1


def _node_pods(node: Node, reported: dict, report: ReconcileReport) -> dict[str, NodePod] | None:
    """Every pod on ``node`` by UID, from the driver; ``None`` when nothing may be concluded from it.

    Read after the agent's instances (see the module docstring). A list that lacks the pod of a
    running lab whose instance the agent reports there does not describe this node — the cluster
    names it otherwise, or answered from a stale cache — and judged by it every instance would
    look residual, a researcher's among them.
    """
    try:
        pods = get_driver().pods_on(node.name)
    except DriverError as exc:
        logger.warning("reconcile: the pods on %s cannot be read, nothing there is unregistered: %s", node.name, exc)
        report.pods_unknown.append(node.name)
        return None
    running = LabSession.objects.filter(
        state=SessionState.RUNNING,
        allocation__card__node=node,
        allocation__released_at__isnull=True,
        driver_ref__in=list(reported),
    ).values_list("driver_ref", flat=True)
    missing = sorted(ref for ref in running if ref not in pods)
    if missing:
        logger.warning(
            "reconcile: the driver lists no pod on %s for running labs %s, nothing there is unregistered",
            node.name,
            ", ".join(missing[:5]),
        )
        report.pods_unknown.append(node.name)
        return None
    return pods


def _residuals(node: Node, strangers: list[str], pods: dict[str, NodePod], now, report: ReconcileReport) -> None:
    """``strangers``: the entity-ids the agent reports that no open session owns; ``pods``: the node's."""
    grace = timedelta(seconds=settings.LAB_RESIDUAL_GRACE_SECONDS)
    _report_foreign(node, [pods[e] for e in strangers if e in pods and not pods[e].portal], report)
    # The vendor's rule: residual is an entity-id whose pod exists nowhere. A pod of the portal's
    # own that no open session owns (a bind not yet recorded, a stop not yet done) is the
    # controller's, and its instance goes with it.
    residuals = [entity_id for entity_id in strangers if entity_id not in pods]
    ResidualCandidate.objects.filter(node=node).exclude(entity_id__in=residuals).delete()
    # A residual of a session that has ended is certain: its stop is done and its pod or process
    # is gone, so what the node still holds is a leftover that keeps its card's memory booked.
    # It goes now; the grace window is for instances the ledger does not know yet.
    ended = set(
        Allocation.objects.filter(entity_id__in=residuals, session__state__in=TERMINAL).values_list("entity_id", flat=True)
    ) | set(LabSession.objects.filter(driver_ref__in=residuals, state__in=TERMINAL).values_list("driver_ref", flat=True))
    for entity_id in sorted(ended):
        if instance_unregister(node, entity_id):
            report.residuals_unregistered += 1
            RepairEvent.objects.create(
                kind=RepairEvent.Kind.RESIDUAL_UNREGISTERED,
                node=node,
                entity_id=entity_id,
                message="unregistered the instance of a session that has ended",
            )
    residuals = [entity_id for entity_id in residuals if entity_id not in ended]
    for entity_id in residuals:
        candidate, created = ResidualCandidate.objects.get_or_create(
            node=node, entity_id=entity_id, defaults={"first_seen_at": now}
        )
        if created:
            report.residuals_seen += 1
            RepairEvent.objects.create(
                kind=RepairEvent.Kind.RESIDUAL_SEEN,
                node=node,
                entity_id=entity_id,
                message=f"no pod has this instance's UID; it is unregistered if still so after {grace.total_seconds():.0f} s",
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


def _report_foreign(node: Node, foreign: list[NodePod], report: ReconcileReport) -> None:
    """Record once, for operators, each instance on ``node`` of a pod the portal did not make.

    It is never unregistered: its pod exists, so by the vendor's rule it is no residual, and
    removing it would break another owner's job. It does hold a share of its card.
    """
    if not foreign:
        return
    known = set(
        RepairEvent.objects.filter(
            kind=RepairEvent.Kind.FOREIGN_INSTANCE, node=node, entity_id__in=[pod.uid for pod in foreign]
        ).values_list("entity_id", flat=True)
    )
    for pod in foreign:
        if pod.uid in known:
            continue
        report.foreign_seen += 1
        RepairEvent.objects.create(
            kind=RepairEvent.Kind.FOREIGN_INSTANCE,
            node=node,
            entity_id=pod.uid,
            message=f"an instance of pod {pod.name}, which the portal did not make: left alone"[:500],
        )


def _check_card_totals(node: Node, now) -> int:
    """Node granularity: the cards whose measured memory passes what the ledger lists on them.

    Recorded at most once per ``LAB_RESIDUAL_GRACE_SECONDS`` per node (a real card also shows
    the driver's own few GiB in use while idle, which no ledger lists). Returns how many cards.
    """
    if node.card_truth != Node.CardTruth.NONE:
        return 0
    held = {card_id: memory for card_id, (_n, _inference, _core, memory) in held_by_card(node_id=node.pk).items()}
    over = []
    for card in Card.objects.filter(node=node, healthy=True, memory_used_mib__isnull=False).order_by("index"):
        listed = held.get(card.pk, 0)
        if memory_beyond_ledger(card.memory_used_mib, listed):
            over.append(f"card {card.index}: {card.memory_used_mib} MiB in use, {listed} MiB listed")
    if not over:
        return 0
    since = now - timedelta(seconds=settings.LAB_RESIDUAL_GRACE_SECONDS)
    if not RepairEvent.objects.filter(kind=RepairEvent.Kind.CARD_TOTALS, node=node, created_at__gte=since).exists():
        measured = "; ".join(over)
        RepairEvent.objects.create(
            kind=RepairEvent.Kind.CARD_TOTALS,
            node=node,
            message=f"the device plugin picks the card here; placements count the difference as used. {measured}"[:500],
        )
    return len(over)


def _record_samples(node: Node, instances, now) -> None:
    samples = [
        InstanceSample(
            node=node,
            entity_id=i.entity_id,
            taken_at=now,
            floor_percent=i.core_percent,
            demand_percent=i.demand_percent,
            delivered_percent=i.aicore_percent,
            memory_used_mib=i.memory_used_mib,
        )
        for i in instances
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
    # Real nodes report no demand; without it a low share is not a broken guarantee.
    readings = InstanceSample.objects.filter(node=node, taken_at__gte=window_start, demand_percent__isnull=False)
    for sample in readings.order_by("taken_at"):
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
