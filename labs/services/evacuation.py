"""Emptying a node for maintenance: before its NPU plugin is upgraded or uninstalled, the vendor's
guides require that no vNPU workload runs there.

``node_evacuate`` drains the node (no new placements), moves the class reservations on it to
other nodes where they fit (``labs.services.reservations.reservations_move_off``; the
instructor is told of those that do not), and warns every student with a lab there through the
reclaim warning: ``LabSession.reclaim_at`` is the deadline, the reason says why, and the card
counts down to it (``labs.selectors.sessions.session_stops_at``) as the websocket pushes the
change. ``evacuations_enforce`` (beat, every ``LAB_EVACUATION_CHECK_SECONDS``) stops what is
still there at the deadline with ``session.evacuated``; each stop releases its allocation once,
as any stop does. The node stays drained; it is empty when the ledger holds nothing on it and
its agent reports no instance (``node_evacuation_state``). Undraining cancels the evacuation
(``evacuation_cancel``, from ``labs.services.operations.node_undrain``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta

from django.db import transaction
from django.db.models import F
from django.db.models.functions import Coalesce
from django.utils import timezone
from django.utils.translation import gettext as _

from labs.domain.reasons import Reason
from labs.domain.states import RECLAIMABLE
from labs.models import LabSession, Node
from labs.services.audit import audit_record
from labs.services.events import cluster_changed_publish, events_batch, session_changes_publish
from labs.services.locks import allocation_lock
from labs.services.reservations import reservations_move_off, reservations_node_back
from labs.services.sessions import reason_fields, session_stop

# The deadline an operator may give, in minutes: long enough to save work, short enough to plan a window.
EVACUATION_MINUTES_DEFAULT = 15
EVACUATION_MINUTES_MIN = 1
EVACUATION_MINUTES_MAX = 240


class EvacuationRefused(Exception):
    """The evacuation cannot be done as asked; the message says why. Nothing was changed."""


@dataclass
class EvacuationReport:
    deadline: datetime
    warned: list[str] = field(default_factory=list)  # labs whose students were warned
    moved: list[str] = field(default_factory=list)  # pre-started class labs queued again elsewhere
    left: list[str] = field(default_factory=list)  # pre-started class labs no other node holds
    slots_short: list[int] = field(default_factory=list)  # class slots that no longer all fit


def _on_node(node: Node):
    """The node's labs that hold an instance there and can still be stopped."""
    return LabSession.objects.filter(
        state__in=RECLAIMABLE, allocation__card__node=node, allocation__released_at__isnull=True
    )


def node_evacuate(*, node: Node, by, minutes: int, reason: str, now: datetime | None = None) -> EvacuationReport:
    """Empty ``node`` within ``minutes`` (``EVACUATION_MINUTES_MIN``..``MAX``), in one transaction.

    Drains it (if it was not), moves its class reservations, and warns every lab on it that it
    stops at the deadline (``reclaim_at``, the reason ``session.evacuation_warned``). Raises
    ``EvacuationRefused`` for a deadline out of range or a node already being emptied. Audited
    as ``node.evacuate``.
    """
    in_range = isinstance(minutes, int) and not isinstance(minutes, bool)
    if not in_range or not EVACUATION_MINUTES_MIN <= minutes <= EVACUATION_MINUTES_MAX:
        raise EvacuationRefused(
            _("Give a deadline between %(min)s and %(max)s minutes.")
            % {"min": EVACUATION_MINUTES_MIN, "max": EVACUATION_MINUTES_MAX}
        )
    now = now or timezone.now()
    deadline = now + timedelta(minutes=minutes)
    with events_batch(), transaction.atomic():
        # The allocation pass places nothing here and warns nobody while this runs (its reclaim
        # rule leaves the warnings of an evacuating node alone: ``_reclaim_follow``).
        allocation_lock()
        locked = Node.objects.select_for_update().get(pk=node.pk)
        if locked.evacuate_at is not None:
            raise EvacuationRefused(
                _("%(node)s is already being emptied, by %(time)s.")
                % {"node": locked.name, "time": timezone.localtime(locked.evacuate_at).strftime("%H:%M")}
            )
        Node.objects.filter(pk=node.pk).update(
            drained=True,
            drain_reason=reason[:300],
            drained_at=Coalesce(F("drained_at"), now),
            evacuate_at=deadline,
        )
        report = EvacuationReport(deadline=deadline)
        moves = reservations_move_off(node=locked, now=now)
        report.moved, report.left, report.slots_short = moves.moved, moves.left, moves.slots_short
        warning = Reason.of("session.evacuation_warned", time=timezone.localtime(deadline).strftime("%H:%M"))
        report.warned = [str(pk) for pk in _on_node(locked).order_by("pk").values_list("pk", flat=True)]
        LabSession.objects.filter(pk__in=report.warned).update(
            reclaim_at=deadline, version=F("version") + 1, **reason_fields(warning)
        )
        audit_record(
            by=by,
            action="node.evacuate",
            target=f"node {locked.name}",
            before={"drained": locked.drained},
            after={
                "drained": True,
                "reason": reason,
                "deadline": deadline.isoformat(timespec="seconds"),
                "labs_warned": len(report.warned),
                "class_labs_moved": len(report.moved),
                "class_labs_not_movable": len(report.left),
                "class_slots_short": len(report.slots_short),
            },
        )
        session_changes_publish(report.warned)
        cluster_changed_publish()
    return report


def evacuations_enforce(*, now: datetime | None = None) -> list[str]:
    """Stop the labs still on a node whose evacuation deadline has passed (beat; idempotent).

    The ids of the labs stopped. A lab already stopping is left to end; one a second run finds
    stopped is not stopped again (``session_stop``'s conditional update).
    """
    now = now or timezone.now()
    stopped: list[str] = []
    due = list(Node.objects.filter(evacuate_at__lte=now))
    if not due:
        return stopped
    with events_batch(), transaction.atomic():
        for node in due:
            for session_id in _on_node(node).order_by("pk").values_list("pk", flat=True):
                if session_stop(session_id=session_id, reason=Reason.of("session.evacuated")):
                    LabSession.objects.filter(pk=session_id).update(reclaim_at=None)  # the stop told the student
                    stopped.append(str(session_id))
        if stopped:
            cluster_changed_publish()
    return stopped


def evacuation_cancel(*, node: Node) -> list[str] | None:
    """The evacuation of ``node`` is called off (in the caller's transaction: the undrain): its labs'
    warnings are withdrawn and run on, and its class slots lose their marks. The ids of the labs;
    ``None`` when the node was not being emptied."""
    if not Node.objects.filter(pk=node.pk, evacuate_at__isnull=False).update(evacuate_at=None):
        return None
    withdrawn = [str(pk) for pk in _on_node(node).filter(reclaim_at__isnull=False).values_list("pk", flat=True)]
    LabSession.objects.filter(pk__in=withdrawn).update(reclaim_at=None, version=F("version") + 1, **reason_fields(None))
    reservations_node_back(node=node)
    session_changes_publish(withdrawn)
    return withdrawn

