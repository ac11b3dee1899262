"""The portal's side of the node agents: reaching them, syncing inventory, registering instances."""

from __future__ import annotations

import logging
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor, wait
from dataclasses import dataclass, field, replace
from functools import lru_cache

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from labs.dispatch import controller_wake
from labs.domain.readiness import NodeFacts, node_readiness
from labs.domain.reasons import Reason
from labs.drivers import DriverError, NodeStatus, get_driver
from labs.models import Card, LabSession, Node, RepairEvent
from labs.services.events import cluster_changed_publish
from labs.services.reboots import node_boot_record
from nodeagent.client import AgentClient, AgentError, AgentRequestError, AgentUnreachable
from nodeagent.wire import CardReport, InventoryReport

logger = logging.getLogger(__name__)


def agent_client(node: Node, *, timeout: float | None = None) -> AgentClient:
    return AgentClient(node.agent_url, settings.LAB_AGENT_TOKEN, timeout=timeout or settings.LAB_AGENT_TIMEOUT_SECONDS)


def node_unreachable(node: Node) -> bool:
    """Marked unavailable because its agent did not answer (not drained or disabled by an
    operator): nothing calls the agent again but the quick check, ``nodes_recheck``, until it answers."""
    return not node.available and bool(node.unavailable_reason)


def node_mark_unavailable(node: Node, *, reason: str) -> None:
    """No new placements on ``node``; nothing on it is released (the agent may just be unreachable)."""
    with transaction.atomic():
        changed = Node.objects.filter(pk=node.pk, available=True).update(available=False, unavailable_reason=reason[:300])
        if changed:
            RepairEvent.objects.create(kind=RepairEvent.Kind.NODE_UNAVAILABLE, node=node, message=reason[:500])
    node.available = False
    node.unavailable_reason = reason[:300]


def node_inventory_sync(node: Node, *, timeout: float | None = None) -> bool:
    """Bring the node's Card rows in line with what its agent reports; ``False`` if unreachable.

    Cards the agent no longer reports are marked unhealthy, never deleted: allocations refer
    to them. A node whose agent answers again becomes available for placements again. Each
    card keeps its latest temperature, power and memory in use, and the node its driver,
    firmware and npu-smi versions, as the agent last read them (empty: not reported).

    The node's readiness for its device profile (``node_readiness_judge``) is stored with them:
    an unready node takes no placements until a later sync finds it ready. When the cluster
    cannot say (``DriverError``), the readiness stays as it was.
    """
    try:
        inventory = agent_client(node, timeout=timeout).inventory_report()
    except AgentError as exc:
        node_mark_unavailable(node, reason=f"agent unreachable: {exc}")
        return False
    try:
        status = get_driver().node_status(node.name)
    except DriverError as exc:
        logger.warning("cannot read node %s from the cluster; its readiness stays as it was: %s", node.name, exc)
        status, readiness_known = None, False
    else:
        readiness_known = True
    readiness = node_readiness_judge(node, inventory, status) if readiness_known else None
    now = timezone.now()
    with transaction.atomic():
        cards = {card.index: card for card in Card.objects.select_for_update().filter(node=node)}
        seen = set()
        changed = False
        reports, host, versions = _registered_devices(inventory.cards, status), inventory.host, inventory.versions
        for report in reports:
            seen.add(report.index)
            card = cards.get(report.index)
            fields = {
                "die_id": report.die_id,
                "chip_type": report.chip_type,
                "memory_mib": report.memory_total_mib,
                "healthy": report.healthy,
                "memory_used_mib": report.memory_used_mib,
                "temperature_celsius": report.temperature_celsius,
                "power_milliwatts": report.power_milliwatts,
            }
            if card is None:
                Card.objects.create(node=node, index=report.index, **fields)
                RepairEvent.objects.create(
                    kind=RepairEvent.Kind.CARD_CHANGED, node=node, message=f"card {report.index} ({report.chip_type}) added"
                )
            elif any(getattr(card, name) != value for name, value in fields.items()):
                changed = True
                was_healthy = card.healthy
                for name, value in fields.items():
                    setattr(card, name, value)
                card.save(update_fields=list(fields))
                if was_healthy != report.healthy:
                    state = "healthy" if report.healthy else "unhealthy"
                    RepairEvent.objects.create(
                        kind=RepairEvent.Kind.CARD_CHANGED, node=node, message=f"card {report.index} is {state}"
                    )
        for index, card in cards.items():
            if index not in seen and card.healthy:
                card.healthy = False
                card.save(update_fields=["healthy"])
                RepairEvent.objects.create(
                    kind=RepairEvent.Kind.CARD_CHANGED, node=node, message=f"card {index} is no longer reported; marked unhealthy"
                )
        truth = get_driver().card_truth(node.labels or {}, die_ids_known=bool(reports) and all(r.die_id for r in reports))
        if truth != node.card_truth:
            Node.objects.filter(pk=node.pk).update(card_truth=truth)
            node.card_truth = truth
            RepairEvent.objects.create(
                kind=RepairEvent.Kind.CARD_CHANGED,
                node=node,
                message="the device plugin picks the card and nothing reports it: this node's ledger is kept at node "
                "granularity, checked against the memory its agent reports on each card"
                if truth == Node.CardTruth.NONE
                else f"each instance's card is now {Node.CardTruth(truth).label}: the ledger follows it per card",
            )
        came_back = (
            Node.objects.filter(pk=node.pk, available=False)
            .exclude(unavailable_reason="")
            .update(available=True, unavailable_reason="")
        )
        # Host figures as reported; an old agent's ``None`` clears them (its node is not limited).
        host_fields = {
            "host_cpu_millicores": None if host is None else host.cpu_millicores,
            "host_memory_mib": None if host is None else host.memory_mib,
        }
        version_fields = {
            "driver_version": versions.driver[:64],
            "firmware_version": versions.firmware[:64],
            "npu_smi_version": versions.npu_smi[:64],
        }
        Node.objects.filter(pk=node.pk).update(last_seen_at=now, **host_fields, **version_fields)
        if readiness_known:
            changed = _readiness_store(node, readiness) or changed
        if changed:
            # The heatmap shows each card's readings: it reads the cluster again (at most once a second).
            cluster_changed_publish()
        if came_back:
            RepairEvent.objects.create(kind=RepairEvent.Kind.NODE_AVAILABLE, node=node, message="agent answers again")
    node.available = node.available or bool(came_back)
    # The host's boot: a new one is a restart, whose labs wait until the node reports healthy cards.
    healthy = any(r.healthy for r in inventory.cards)
    node_boot_record(node.name, boot_id=inventory.boot_id, npus_reported=healthy, source="agent", now=now)
    return True


def node_readiness_judge(node: Node, inventory: InventoryReport, status: NodeStatus | None) -> Reason | None:
    """Why ``node`` does not meet its device profile's preconditions, or ``None`` (``labs.domain.readiness``).

    The facts are the agent's (chips, the HDK driver of npu-smi's banner, device-share mode)
    and the cluster's node object, ``status`` (labels, registered resources), as the driver's
    ``node_status`` read it; ``None`` (a driver without node objects) leaves those unknown.
    """
    driver = get_driver()
    if status is not None and not status.exists:
        return Reason.of("readiness.node_missing", node=node.name)
    facts = NodeFacts(
        profile=status.profile if status is not None else driver.device_profile(node.labels or {}),
        chip_types=tuple(sorted({card.chip_type for card in _registered_devices(inventory.cards, status) if card.chip_type})),
        driver_version=inventory.versions.driver,
        device_share=inventory.device_share,
        labels=None if status is None else status.labels,
        resources=None if status is None else status.resources,
    )
    return node_readiness(facts)


def _registered_devices(reports: list[CardReport], status: NodeStatus | None) -> list[CardReport]:
    """The agent's cards, each without a die id (``npu-smi`` shows none) given the one the device
    plugin registered on the node for its index (``NodeStatus.devices``), and its chip type
    where the agent names none: so the card can be pinned (``huawei.com/vnpu-use-npu-dieID``)."""
    devices = status.devices if status is not None else ()
    if not devices:
        return reports
    filled = []
    for report in reports:
        if not report.die_id and 0 <= report.index < len(devices):
            die_id, chip = devices[report.index]
            report = replace(report, die_id=die_id, chip_type=report.chip_type or chip)
        filled.append(report)
    return filled


def _readiness_store(node: Node, readiness: Reason | None) -> bool:
    """Store ``readiness`` on ``node`` (in the caller's transaction); whether it changed. A node
    that became ready wakes the controller: sessions queued for want of room may fit now."""
    stored = readiness.to_json() if readiness is not None else {"code": "", "params": {}}
    if stored == {"code": node.readiness_code, "params": node.readiness_params or {}}:
        return False
    Node.objects.filter(pk=node.pk).update(readiness_code=stored["code"], readiness_params=stored["params"])
    message = f"not ready: {readiness}" if readiness is not None else "ready for its device profile"
    RepairEvent.objects.create(kind=RepairEvent.Kind.NODE_READINESS, node=node, message=message[:500])
    if readiness is None:
        controller_wake()
    node.readiness_code, node.readiness_params = stored["code"], stored["params"]
    return True


def instance_register(session: LabSession) -> bool:
    """Tell the node's agent about a session's instance (local and simulator drivers only; not
    an instance on whole cards, which the agent's share of one card cannot describe).

    On Kubernetes the FlexNPU device plugin registers the instance when the pod starts; with
    the other drivers nothing on the node would, so the portal does. A failure is logged and
    left to the node reconciler, which registers it again: the session itself does not depend
    on it. An agent that does not answer marks its node unavailable (``node_unreachable``),
    and is not called here again until it does. Returns whether the agent took it.
    """
    allocation = session.allocation
    node = allocation.card.node
    if not settings.LAB_AGENT_REGISTERS_INSTANCES or not node.agent_url or not session.driver_ref or node_unreachable(node):
        return False
    if allocation.cards > 1:
        return False  # the agent models shares of one card; a whole-card instance is not one
    try:
        agent_client(node).register(
            entity_id=session.driver_ref,
            card_index=allocation.card.index,
            core_percent=allocation.core_percent,
            memory_mib=allocation.memory_mib,
            scenario=allocation.scenario,
        )
    except AgentError as exc:  # unreachable, refused, or already registered by a retried task
        logger.warning("could not register instance of session %s with %s: %s", session.pk, node.name, exc)
        if isinstance(exc, AgentUnreachable):
            node_mark_unavailable(node, reason=f"agent unreachable: {exc}")
        return False
    return True


def instance_unregister(node: Node, entity_id: str) -> bool | None:
    """Unregister ``entity_id`` on ``node``: True if removed, False if unknown, None if unreachable
    (the node is then marked unavailable, and not called here again until it answers)."""
    if not node.agent_url or not entity_id or node_unreachable(node):
        return None
    try:
        return agent_client(node).unregister(entity_id)
    except AgentError as exc:
        logger.warning("could not unregister %s on %s: %s", entity_id, node.name, exc)
        if isinstance(exc, AgentUnreachable):
            node_mark_unavailable(node, reason=f"agent unreachable: {exc}")
        return None


@dataclass(frozen=True)
class InstanceCall:
    """One call the lifecycle controller makes to a node's agent: register ``entity_id`` with its
    share (``card_index`` and the rest set), or unregister it (``card_index`` ``None``)."""

    node_id: int
    entity_id: str
    card_index: int | None = None
    core_percent: int = 0
    memory_mib: int = 0
    scenario: str = "development"


@dataclass
class InstanceCallsReport:
    made: int = 0
    skipped: int = 0  # calls to nodes marked unavailable, or after a call that was not answered
    unanswered: list[str] = field(default_factory=list)  # nodes marked unavailable now


def instance_calls_make(
    calls: list[InstanceCall], *, on_slow: Callable[[], object] | None = None, slow_seconds: float = 0.2
) -> InstanceCallsReport:
    """Make the controller's calls to the node agents: each node's in a thread of its own, all
    nodes at once, each call given ``LAB_AGENT_DEADLINE_SECONDS`` to answer. ``on_slow`` is
    called once if they are not all done within ``slow_seconds``.

    Made after a controller round, outside its lock, so a hung agent delays one run by one
    deadline and nothing else. A node whose agent does not answer in time (or refuses the
    connection) is marked unavailable and the rest of its calls are dropped; calls to a node
    already marked so are not made. Nothing is lost by that: once the node answers its quick
    check again (``labs.services.reconcile.nodes_recheck``), its instances are reconciled at
    once — an ended session's registration removed, a live one's made again.
    """
    report = InstanceCallsReport()
    if not calls:
        return report
    by_node: dict[int, list[InstanceCall]] = {}
    for call in calls:
        by_node.setdefault(call.node_id, []).append(call)
    nodes = list(Node.objects.filter(pk__in=list(by_node)).exclude(agent_url=""))
    reachable = []
    for node in nodes:
        if node_unreachable(node):
            report.skipped += len(by_node[node.pk])
        else:
            reachable.append(node)
    deadline = settings.LAB_AGENT_DEADLINE_SECONDS
    futures = [
        (node, _agent_pool().submit(_node_calls, agent_client(node, timeout=deadline), by_node[node.pk])) for node in reachable
    ]
    if on_slow is not None and futures:
        _, waiting = wait([future for _, future in futures], timeout=slow_seconds)
        if waiting:
            on_slow()
    for node, future in futures:
        made, unanswered = future.result()  # each call is bounded by the deadline
        report.made += made
        if unanswered:
            report.skipped += len(by_node[node.pk]) - made
            report.unanswered.append(node.name)
            node_mark_unavailable(node, reason=f"agent unreachable: {unanswered}")
    if report.unanswered:
        logger.warning("controller: node agents not answering: %s", ", ".join(report.unanswered))
    return report


@lru_cache(maxsize=1)
def _agent_pool() -> ThreadPoolExecutor:
    # Apart from the driver's pool, so a hung agent never holds up a create. Made lazily, in the
    # process that uses it (Celery forks its workers after import).
    return ThreadPoolExecutor(max_workers=settings.LAB_CONTROLLER_THREADS, thread_name_prefix="agent-calls")


def _node_calls(client: AgentClient, calls: list[InstanceCall]) -> tuple[int, str]:
    """Runs in a pool thread, HTTP only: the calls in order until one is not answered. Returns
    how many were made and, when one was not answered, why."""
    for made, call in enumerate(calls):
        try:
            if call.card_index is None:
                client.unregister(call.entity_id)
            else:
                client.register(call.entity_id, call.card_index, call.core_percent, call.memory_mib, call.scenario)
        except AgentUnreachable as exc:
            return made, str(exc)
        except AgentRequestError as exc:
            if exc.status != 409:  # 409: registered already (a run that died after it, a retried task)
                logger.warning("the agent at %s refused %s: %s", client.base_url, call, exc)
        except AgentError as exc:  # an error on the node (5xx) or a wrong token: the reconciler sees to it
            logger.warning("the agent at %s failed %s: %s", client.base_url, call, exc)
    return len(calls), ""
