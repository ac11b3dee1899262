"""The allocation pass: the only place capacity is handed out (DESIGN §3)."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field

from django.conf import settings
from django.db import transaction
from django.db.models import Count, F, Sum
from django.utils import timezone

from labs.domain.allocation import (
    CardCapacity,
    CourseLimits,
    CourseUsage,
    Instance,
    LaunchRequest,
    NodeCapacity,
    Placed,
    Refused,
    Waiting,
    allocate,
)
from labs.domain.states import HOLDS_ALLOCATION, SessionState
from labs.domain.units import Scenario
from labs.models import Allocation, Card, CourseQuota, LabSession, Node
from labs.services.events import session_changes_publish
from labs.services.locks import allocation_lock
from labs.services.sessions import session_transition


@dataclass
class PassResult:
    admitted: list[str] = field(default_factory=list)
    waiting: int = 0
    refused: list[str] = field(default_factory=list)


def capacity_snapshot() -> list[NodeCapacity]:
    """Every node and card with the instances the ledger has on it (unreleased allocations)."""
    instances: dict[int, list[Instance]] = defaultdict(list)
    for card_id, core, memory, scenario in Allocation.objects.filter(released_at__isnull=True).values_list(
        "card_id", "core_percent", "memory_mib", "scenario"
    ):
        instances[card_id].append(Instance(core, memory, Scenario(scenario)))
    cards_by_node: dict[int, list[CardCapacity]] = defaultdict(list)
    for card in Card.objects.order_by("node_id", "index"):
        cards_by_node[card.node_id].append(
            CardCapacity(card.pk, card.index, card.memory_mib, card.healthy, tuple(instances.get(card.pk, ())))
        )
    return [
        NodeCapacity(node.name, tuple(cards_by_node.get(node.pk, ())), node.available) for node in Node.objects.order_by("name")
    ]


def allocation_pass(*, batch: int | None = None) -> PassResult:
    """Admit and place queued sessions, oldest first, as one batch in one transaction.

    Holds the allocation lock for the whole pass, so two passes never hand out the same
    capacity. Placed sessions become ``admitted`` with an Allocation row; the others stay
    queued with the reason in words, or fail when they can never fit. Admitted sessions are
    queued for start once the transaction commits.
    """
    batch = batch or settings.LAB_ALLOCATION_BATCH
    result = PassResult()
    with transaction.atomic():
        allocation_lock()
        # Row locks make a concurrent cancel wait for this pass instead of slipping between
        # the decision and the write (SQLite's IMMEDIATE transaction already excludes it).
        queued = list(
            LabSession.objects.select_for_update(of=("self",))
            .filter(state=SessionState.QUEUED)
            .select_related("template")
            .order_by("created_at", "id")[:batch]
        )
        if not queued:
            return result
        course_ids = {s.course_id for s in queued}
        limits = {
            q.course_id: CourseLimits(q.core_percent, q.memory_mib, q.instance_count, q.sessions_per_student)
            for q in CourseQuota.objects.filter(course_id__in=course_ids)
        }
        usage = {
            row["course_id"]: CourseUsage(row["core"], row["memory"], row["instances"])
            for row in Allocation.objects.filter(course_id__in=course_ids, released_at__isnull=True)
            .values("course_id")
            .annotate(core=Sum("core_percent"), memory=Sum("memory_mib"), instances=Count("id"))
        }
        student_active = {
            (row["course_id"], row["student_id"]): row["n"]
            for row in LabSession.objects.filter(course_id__in=course_ids, state__in=HOLDS_ALLOCATION)
            .values("course_id", "student_id")
            .annotate(n=Count("id"))
        }
        requests = [
            LaunchRequest(
                key=str(s.pk),
                course_id=s.course_id,
                student_id=s.student_id,
                core_percent=s.template.core_percent,
                memory_mib=s.template.memory_mib,
                scenario=Scenario(s.template.scenario),
            )
            for s in queued
        ]
        by_key = {str(s.pk): s for s in queued}
        decisions = allocate(capacity_snapshot(), requests, limits, usage, student_active)

        placed = [d for d in decisions if isinstance(d, Placed)]
        if placed:
            Allocation.objects.bulk_create(
                Allocation(
                    session_id=by_key[d.key].pk,
                    card_id=d.card_id,
                    course_id=by_key[d.key].course_id,
                    core_percent=by_key[d.key].template.core_percent,
                    memory_mib=by_key[d.key].template.memory_mib,
                    scenario=by_key[d.key].template.scenario,
                )
                for d in placed
            )
            result.admitted = [d.key for d in placed]
            LabSession.objects.filter(pk__in=result.admitted, state=SessionState.QUEUED).update(
                state=SessionState.ADMITTED, reason="", admitted_at=timezone.now(), version=F("version") + 1
            )
        waiting_by_reason: dict[str, list[str]] = defaultdict(list)
        for d in decisions:
            if isinstance(d, Waiting):
                waiting_by_reason[d.reason[:500]].append(d.key)
            elif isinstance(d, Refused):
                session_transition(d.key, to=SessionState.FAILED, reason=d.reason)
                result.refused.append(d.key)
        changed = list(result.admitted)
        for reason, keys in waiting_by_reason.items():
            result.waiting += len(keys)
            stale = list(LabSession.objects.filter(pk__in=keys).exclude(reason=reason).values_list("pk", flat=True))
            if stale:
                LabSession.objects.filter(pk__in=stale).update(reason=reason, version=F("version") + 1)
                changed.extend(stale)
        session_changes_publish(changed)
        if result.admitted:
            admitted = list(result.admitted)
            transaction.on_commit(lambda: _queue_starts(admitted))
    return result


def _queue_starts(session_ids: list[str]) -> None:
    from labs import tasks

    for session_id in session_ids:
        tasks.session_start.delay(session_id)
