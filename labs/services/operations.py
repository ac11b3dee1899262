"""What operators do to the fleet: drain and undrain nodes, mark cards unhealthy or healthy,
stop a session. Each takes a reason, changes one thing in one transaction, records it in the
audit log and tells the cluster page."""

from __future__ import annotations

from django.db import transaction
from django.utils import timezone

from labs.dispatch import controller_wake
from labs.domain.reasons import Reason
from labs.models import Card, LabSession, Node
from labs.services.audit import audit_record
from labs.services.events import cluster_changed_publish
from labs.services.sessions import session_stop


class OperationRefused(Exception):
    """The action cannot be done as asked; the message says why."""


def node_drain(*, node: Node, by, reason: str) -> bool:
    """No new placements on ``node``; running sessions continue. ``False`` if already drained."""
    with transaction.atomic():
        changed = Node.objects.filter(pk=node.pk, drained=False).update(
            drained=True, drain_reason=reason[:300], drained_at=timezone.now()
        )
        if changed:
            audit_record(
                by=by,
                action="node.drain",
                target=f"node {node.name}",
                before={"drained": False},
                after={"drained": True, "reason": reason},
            )
            cluster_changed_publish()
    return bool(changed)


def node_undrain(*, node: Node, by, reason: str = "") -> bool:
    with transaction.atomic():
        changed = Node.objects.filter(pk=node.pk, drained=True).update(drained=False, drain_reason="", drained_at=None)
        if changed:
            audit_record(
                by=by,
                action="node.undrain",
                target=f"node {node.name}",
                before={"drained": True},
                after={"drained": False, "reason": reason},
            )
            controller_wake()  # queued sessions may fit there now
            cluster_changed_publish()
    return bool(changed)


def card_set_disabled(*, card: Card, by, disabled: bool, reason: str) -> bool:
    """Mark a card unhealthy (no new placements on it; what runs there goes on) or healthy again."""
    with transaction.atomic():
        changed = Card.objects.filter(pk=card.pk, disabled=not disabled).update(
            disabled=disabled, disabled_reason=reason[:300] if disabled else ""
        )
        if changed:
            audit_record(
                by=by,
                action="card.unhealthy" if disabled else "card.healthy",
                target=f"{card.node.name}/npu{card.index}",
                before={"marked_unhealthy": not disabled},
                after={"marked_unhealthy": disabled, "reason": reason},
            )
            if not disabled:
                controller_wake()
            cluster_changed_publish()
    return bool(changed)


def session_stop_by_operator(*, session: LabSession, by, reason: str) -> bool:
    with transaction.atomic():
        stopped = session_stop(session_id=session.pk, reason=Reason.of("session.stopped_by", who=by.get_username()))
        if stopped:
            audit_record(
                by=by,
                action="session.stop",
                target=f"session {session.pk} of {session.student.get_username()} in {session.course.code}",
                institution=session.course.institution,
                before={"state": session.state},
                after={"reason": reason},
            )
    return stopped
