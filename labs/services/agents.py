"""The portal's side of the node agents: reaching them, syncing inventory, registering instances."""

from __future__ import annotations

import logging

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from labs.agent.client import AgentClient, AgentError
from labs.drivers import get_driver
from labs.models import Card, LabSession, Node, RepairEvent

logger = logging.getLogger(__name__)


def agent_client(node: Node, *, timeout: float | None = None) -> AgentClient:
    return AgentClient(node.agent_url, settings.LAB_AGENT_TOKEN, timeout=timeout or settings.LAB_AGENT_TIMEOUT_SECONDS)


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
    to them. A node whose agent answers again becomes available for placements again.
    """
    try:
        reports, host = agent_client(node, timeout=timeout).inventory_and_host()
    except AgentError as exc:
        node_mark_unavailable(node, reason=f"agent unreachable: {exc}")
        return False
    now = timezone.now()
    with transaction.atomic():
        cards = {card.index: card for card in Card.objects.select_for_update().filter(node=node)}
        seen = set()
        for report in reports:
            seen.add(report.index)
            card = cards.get(report.index)
            fields = {
                "die_id": report.die_id,
                "chip_type": report.chip_type,
                "memory_mib": report.memory_total_mib,
                "healthy": report.healthy,
                "memory_used_mib": report.memory_used_mib,
            }
            if card is None:
                Card.objects.create(node=node, index=report.index, **fields)
                RepairEvent.objects.create(
                    kind=RepairEvent.Kind.CARD_CHANGED, node=node, message=f"card {report.index} ({report.chip_type}) added"
                )
            elif any(getattr(card, name) != value for name, value in fields.items()):
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
        Node.objects.filter(pk=node.pk).update(last_seen_at=now, **host_fields)
        if came_back:
            RepairEvent.objects.create(kind=RepairEvent.Kind.NODE_AVAILABLE, node=node, message="agent answers again")
    node.available = node.available or bool(came_back)
    return True


def instance_register(session: LabSession) -> bool:
    """Tell the node's agent about a session's instance (local and simulator drivers only).

    On Kubernetes the FlexNPU device plugin registers the instance when the pod starts; with
    the other drivers nothing on the node would, so the portal does. A failure is logged and
    left to the node reconciler, which registers it again: the session itself does not depend
    on it. Returns whether the agent took it.
    """
    allocation = session.allocation
    node = allocation.card.node
    if not settings.LAB_AGENT_REGISTERS_INSTANCES or not node.agent_url or not session.driver_ref:
        return False
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
        return False
    return True


def instance_unregister(node: Node, entity_id: str) -> bool | None:
    """Unregister ``entity_id`` on ``node``: True if removed, False if unknown, None if unreachable."""
    if not node.agent_url or not entity_id:
        return None
    try:
        return agent_client(node).unregister(entity_id)
    except AgentError as exc:
        logger.warning("could not unregister %s on %s: %s", entity_id, node.name, exc)
        return None
