"""The allocation pass: the only place capacity is handed out (DESIGN §3)."""

from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta

from django.conf import settings
from django.db import transaction
from django.db.models import Count, F, Q, Sum
from django.utils import timezone

from labs.domain.allocation import Allocator, Placed, Refused, Waiting
from labs.domain.fairness import Waiting as FairWaiting
from labs.domain.fairness import cohort_fair_order, dominant_share
from labs.domain.offers import smaller_offers, waits_for_capacity
from labs.domain.placement import Cluster, LaunchRequest, SharePolicy
from labs.domain.quota import CourseQuota as QuotaRule
from labs.domain.quota import Resources
from labs.domain.reasons import Reason
from labs.domain.states import HOLDS_ALLOCATION, RECLAIMABLE, SessionState
from labs.domain.units import CORE_PERCENT_MAX, Scenario
from labs.drivers import get_driver
from labs.models import Allocation, Card, Course, CourseQuota, LabSession, LabTemplate, RepairEvent
from labs.selectors.capacity import capacity_snapshot, placement_config, quota_rule
from labs.services.events import events_batch, session_changes_publish
from labs.services.locks import allocation_lock
from labs.services.sessions import reason_fields, session_stop, session_transition


def _cohort_fair(queued: list[LabSession]) -> list[LabSession]:
    """The queue with each cohort's sessions reordered among their places: the course using the
    smaller part of its guarantee first (``labs.domain.fairness.cohort_fair_order``)."""
    cohorts = dict(
        CourseQuota.objects.filter(course_id__in={s.course_id for s in queued})
        .exclude(cohort="")
        .values_list("course_id", "cohort")
    )
    if len(set(cohorts)) < 2:
        return queued  # one course or none in a cohort: nobody to reorder against
    guarantees = {
        q[0]: q[1:]
        for q in CourseQuota.objects.filter(course_id__in=cohorts).values_list(
            "course_id", "core_percent", "memory_mib", "instance_count"
        )
    }
    held = {
        row[0]: row[1:]
        for row in Allocation.objects.filter(course_id__in=cohorts, released_at__isnull=True)
        .values("course_id")
        .annotate(core=Sum("core_percent"), memory=Sum("memory_mib"), n=Count("id"))
        .values_list("course_id", "core", "memory", "n")
        .order_by()
    }
    shares = {c: dominant_share(held.get(c, (0, 0, 0)), guarantees[c]) for c in cohorts}
    order = cohort_fair_order([FairWaiting(str(s.pk), s.course_id, cohorts.get(s.course_id, "")) for s in queued], shares)
    by_key = {str(s.pk): s for s in queued}
    return [by_key[k] for k in order]


@dataclass
class ReclaimReport:
    warned: list[str] = field(default_factory=list)
    withdrawn: list[str] = field(default_factory=list)
    stopped: list[str] = field(default_factory=list)
    # When each session a plan names stops (now, for one stopped or already stopping).
    stops_at: dict[str, datetime] = field(default_factory=dict)

    @property
    def changed(self) -> list[str]:
        return [*self.warned, *self.withdrawn]  # a stop publishes its own change


@dataclass
class PassResult:
    admitted: list[str] = field(default_factory=list)
    waiting: int = 0
    refused: list[str] = field(default_factory=list)
    reclaim: ReclaimReport = field(default_factory=ReclaimReport)


def _reclaim_follow(needed: dict[str, str]) -> ReclaimReport:
    """Carry out the engine's reclaim plans (inside the pass's transaction and lock).

    ``needed`` maps each borrowed session some plan of this pass names to the course code of the
    guaranteed request that waits for its room. A newly named session is warned: its reason says
    why and its card counts down to ``reclaim_at`` (``LAB_RECLAIM_WARNING_SECONDS`` ahead). One
    still named when its time comes is stopped like any other (the controller deletes the
    instance; the pass admits the waiting request once the room is free). A warned session no
    plan names any more (the waiting request was admitted elsewhere, stopped, or the room freed
    up) is told so and runs on. Each step is a repair event.
    """
    report = ReclaimReport()
    now = timezone.now()
    warned: dict[str, datetime] = {}
    # A lab on a node being emptied for maintenance was warned by the operator's evacuation
    # (labs.services.evacuation), not by a plan: that warning is not this rule's to withdraw or
    # restart, and the evacuation stops it at its deadline.
    evacuating: dict[str, datetime] = {}
    for pk, at, evacuate_at in (
        LabSession.objects.select_for_update(of=("self",))
        .filter(reclaim_at__isnull=False, state__in=RECLAIMABLE)
        .values_list("pk", "reclaim_at", "allocation__card__node__evacuate_at")
    ):
        (warned if evacuate_at is None else evacuating)[str(pk)] = at
    for key in sorted(set(warned) - set(needed)):
        LabSession.objects.filter(pk=key).update(reclaim_at=None, version=F("version") + 1, **reason_fields(None))
        RepairEvent.objects.create(kind=RepairEvent.Kind.RECLAIM_WITHDRAWN, session_id=key, message="no longer needed: runs on")
        report.withdrawn.append(key)
    stop_at = now + timedelta(seconds=settings.LAB_RECLAIM_WARNING_SECONDS)
    for key, course in sorted(needed.items()):
        if key in evacuating:
            report.stops_at[key] = max(now, evacuating[key])
            continue
        at = warned.get(key)
        report.stops_at[key] = now if at is None or at <= now else at
        if at is None:
            reason = Reason.of("session.reclaim_warned", course=course)
            if LabSession.objects.filter(pk=key, state__in=RECLAIMABLE).update(
                reclaim_at=stop_at, version=F("version") + 1, **reason_fields(reason)
            ):
                RepairEvent.objects.create(
                    kind=RepairEvent.Kind.RECLAIM_WARNED,
                    session_id=key,
                    message=f"{course} waits inside its guarantee; stops at {stop_at.isoformat(timespec='seconds')}",
                )
                report.warned.append(key)
                report.stops_at[key] = stop_at
        elif at <= now and session_stop(session_id=key, reason=Reason.of("session.reclaimed", course=course)):
            LabSession.objects.filter(pk=key).update(reclaim_at=None)  # the stop told the student; its version moved
            RepairEvent.objects.create(kind=RepairEvent.Kind.RECLAIMED, session_id=key, message=f"stopped for {course}")
            report.stopped.append(key)
    return report


def _returning(plan_victims: tuple[str, ...], stops_at: dict[str, datetime], now: datetime) -> Reason:
    """What a student waiting for reclaimed room reads: about how long until the last of its
    victims stops (its instance then goes, and the next pass places the lab)."""
    last = max((stops_at.get(key, now) for key in plan_victims), default=now)
    return Reason.of("reclaim.returning", minutes=max(1, math.ceil((last - now).total_seconds() / 60)))


def course_rules(course_ids: set[int] | None = None) -> dict[int, QuotaRule]:
    """The quota rules of the given courses and of every course in the same cohorts."""
    quotas = CourseQuota.objects.all()
    if course_ids is not None:
        cohorts = set(CourseQuota.objects.filter(course_id__in=course_ids).exclude(cohort="").values_list("cohort", flat=True))
        quotas = quotas.filter(Q(course_id__in=course_ids) | Q(cohort__in=cohorts))
    quotas = list(quotas)
    allowed: dict[int, set[int]] = defaultdict(set)
    for course_id, template_id in Course.templates.through.objects.filter(
        course_id__in=[q.course_id for q in quotas]
    ).values_list("course_id", "labtemplate_id"):
        allowed[course_id].add(template_id)
    rules = {q.course_id: quota_rule(q, frozenset(allowed[q.course_id])) for q in quotas}
    return _with_reservations(rules)


def _with_reservations(rules: dict[int, QuotaRule]) -> dict[int, QuotaRule]:
    """Each course's guarantee raised, per resource, to at least what its reservations hold now
    (``labs.services.reservations.reserved_demand``: from the pre-start lead before a slot to its
    end). A raise, not a sum: a course whose guarantee already covers its class keeps it as is.
    The ceiling of a course outside a cohort (its guarantee) rises with it."""
    from labs.services.reservations import reserved_demand

    held = reserved_demand(rules.keys())
    for course_id, demand in held.items():
        rule = rules[course_id]
        raised = Resources(*(max(g, d) for g, d in zip(rule.guarantee, demand, strict=True)))
        if raised != rule.guarantee:
            rules[course_id] = replace(rule, guarantee=raised)
    return rules


def best_effort_nodes() -> tuple[tuple[str, str], ...]:
    """The node selector of a best-effort instance: only where the device plugin runs one."""
    return tuple(sorted((get_driver().best_effort_nodes() or {}).items()))


def template_request(
    template: LabTemplate,
    *,
    key: str,
    course_id: int,
    student_id: int,
    best_effort_selector: tuple[tuple[str, str], ...],
    pooled: bool = False,
) -> LaunchRequest:
    """What the engine is asked to place for a lab of ``template`` in ``course_id``."""
    return LaunchRequest(
        key=key,
        course_id=course_id,
        student_id=student_id,
        core_percent=template.core_percent_total,
        memory_mib=template.memory_mib,
        scenario=Scenario(template.scenario),
        cards=template.card_count,
        template_id=template.pk,
        pooled=pooled,
        cpu_millicores=template.cpu_request_millicores,
        host_memory_mib=template.host_memory_request_mib,
        share_policy=SharePolicy(template.share_policy),
        node_selector=best_effort_selector if template.share_policy == SharePolicy.BEST_EFFORT else (),
    )


def launch_request(session: LabSession, best_effort_selector: tuple[tuple[str, str], ...]) -> LaunchRequest:
    """What the engine is asked to place for ``session`` (read with its template)."""
    return template_request(
        session.template,
        key=str(session.pk),
        course_id=session.course_id,
        student_id=session.student_id,
        best_effort_selector=best_effort_selector,
        pooled=session.reservation_slot_id is not None and session.claimed_at is None,
    )


def _smaller_offers(
    allocator: Allocator,
    requests: list[LaunchRequest],
    decisions: list,
    by_key: dict[str, LabSession],
    best_effort_selector: tuple[tuple[str, str], ...],
) -> dict[str, dict[str, int]]:
    """The smaller template offered to each session the pass leaves waiting for capacity
    (``labs.domain.offers.smaller_offers``), by key, as its ``smaller_offer`` stores it. Reads the
    courses' templates only when some session waits for capacity with a template that allows offers."""
    waiting = [
        (request, d.reason)
        for request, d in zip(requests, decisions, strict=True)
        if isinstance(d, Waiting)
        and waits_for_capacity(d.reason)
        and by_key[d.key].template.offers_smaller_lab
        and by_key[d.key].reservation_slot_id is None  # pre-started for a class: nobody's to switch
    ]
    if not waiting:
        return {}
    candidates: dict[int, list[LaunchRequest]] = defaultdict(list)
    shown: dict[int, dict[str, int]] = {}
    offered = Course.templates.through.objects.filter(course_id__in={r.course_id for r, _ in waiting}).select_related(
        "labtemplate"
    )
    for row in offered:
        template = row.labtemplate
        candidates[row.course_id].append(
            template_request(
                template,
                key=f"offer-{row.course_id}-{template.pk}",
                course_id=row.course_id,
                student_id=0,
                best_effort_selector=best_effort_selector,
            )
        )
        shown[template.pk] = {
            "template": template.pk,
            "core_percent": template.core_percent,
            "memory_mib": template.memory_mib,
            "cards": template.card_count,
        }
    offering = {r.template_id for r, _ in waiting}
    return {key: shown[template_id] for key, template_id in smaller_offers(allocator, waiting, candidates, offering).items()}


def _ledger_write(placed: list[Placed], by_key: dict[str, LabSession]) -> None:
    """An Allocation row for each placed session; one on whole cards holds 100 % and the whole
    memory of each of its cards (the charge the engine made), its first card as ``card``."""
    whole = [d for d in placed if len(d.card_ids) > 1]
    card_mib = dict(Card.objects.filter(pk__in={c for d in whole for c in d.card_ids}).values_list("pk", "memory_mib"))
    Allocation.objects.bulk_create(
        Allocation(
            session_id=by_key[d.key].pk,
            card_id=d.card_id,
            course_id=by_key[d.key].course_id,
            core_percent=CORE_PERCENT_MAX * len(d.card_ids) if len(d.card_ids) > 1 else by_key[d.key].template.core_percent,
            memory_mib=sum(card_mib[c] for c in d.card_ids) if len(d.card_ids) > 1 else by_key[d.key].template.memory_mib,
            cards=len(d.card_ids),
            scenario=by_key[d.key].template.scenario,
            cpu_millicores=by_key[d.key].template.cpu_request_millicores,
            host_memory_mib=by_key[d.key].template.host_memory_request_mib,
            borrowed=d.borrowed,
        )
        for d in placed
    )
    if whole:
        ids = dict(
            Allocation.objects.filter(session_id__one_of=[by_key[d.key].pk for d in whole]).values_list("session_id", "pk")
        )
        Allocation.more_cards.through.objects.bulk_create(
            Allocation.more_cards.through(allocation_id=ids[by_key[d.key].pk], card_id=card_id)
            for d in whole
            for card_id in d.card_ids[1:]
        )


def session_place_now(session: LabSession) -> bool:
    """The allocation pass for one queued ``session`` out of turn (a switch to the smaller lab
    offered, ``labs.services.smaller_lab``): the engine decides it on the cluster as it is now, with
    its course's quota and its student's limit. Placed: its Allocation is written and it is
    admitted (``True``). Otherwise ``False`` and nothing is written. In the caller's transaction,
    which must hold the allocation lock (``allocation_lock``)."""
    held = LabSession.objects.filter(
        course_id=session.course_id, student_id=session.student_id, state__in=HOLDS_ALLOCATION
    ).count()
    allocator = Allocator(
        Cluster(capacity_snapshot(), placement_config()),
        course_rules({session.course_id}),
        {(session.course_id, session.student_id): held},
        now=timezone.now().timestamp(),
    )
    (decision,) = allocator.decide([launch_request(session, best_effort_nodes())])
    if not isinstance(decision, Placed):
        return False
    _ledger_write([decision], {decision.key: session})
    LabSession.objects.filter(pk=session.pk, state=SessionState.QUEUED).update(
        state=SessionState.ADMITTED, admitted_at=timezone.now(), version=F("version") + 1, **reason_fields(None)
    )
    return True


def allocation_pass(*, batch: int | None = None) -> PassResult:
    """Admit and place queued sessions, oldest first, as one batch in one transaction.

    Holds the allocation lock for the whole pass, so two passes never hand out the same
    capacity. Placed sessions become ``admitted`` with an Allocation row (the controller creates
    their instances); the others stay queued with the reason, or fail when they can never fit.
    Pages hear of the changes after the commit, one message per student and course group.
    """
    batch = batch or settings.LAB_ALLOCATION_BATCH
    result = PassResult()
    with events_batch(), transaction.atomic():
        allocation_lock()
        # Row locks make a concurrent cancel wait for this pass instead of slipping between
        # the decision and the write (SQLite's IMMEDIATE transaction already excludes it).
        queued = list(
            LabSession.objects.select_for_update(of=("self",))
            .filter(state=SessionState.QUEUED)
            .select_related("template", "course")
            .order_by("queue_at", "id")[:batch]
        )
        if not queued:
            result.reclaim = _reclaim_follow({})
            session_changes_publish(result.reclaim.changed)
            return result
        queued = _cohort_fair(queued)
        course_ids = {s.course_id for s in queued}
        student_active = {
            (row["course_id"], row["student_id"]): row["n"]
            for row in LabSession.objects.filter(course_id__in=course_ids, state__in=HOLDS_ALLOCATION)
            .values("course_id", "student_id")
            .annotate(n=Count("id"))
        }
        best_effort_selector = best_effort_nodes()
        requests = [launch_request(s, best_effort_selector) for s in queued]
        by_key = {str(s.pk): s for s in queued}
        warned = {str(pk) for pk in LabSession.objects.filter(reclaim_at__isnull=False).values_list("pk", flat=True)}
        allocator = Allocator(
            Cluster(capacity_snapshot(), placement_config()),
            course_rules(course_ids),
            student_active,
            now=timezone.now().timestamp(),
            warned=warned,
        )
        decisions = allocator.decide(requests)
        offers = _smaller_offers(allocator, requests, decisions, by_key, best_effort_selector)

        placed = [d for d in decisions if isinstance(d, Placed)]
        if placed:
            _ledger_write(placed, by_key)
            result.admitted = [d.key for d in placed]
            LabSession.objects.filter(pk__one_of=result.admitted, state=SessionState.QUEUED).update(
                state=SessionState.ADMITTED,
                admitted_at=timezone.now(),
                version=F("version") + 1,
                smaller_offer={},
                **reason_fields(None),
            )
        for d in decisions:
            if isinstance(d, Refused):
                session_transition(d.key, to=SessionState.FAILED, reason=d.reason)
                result.refused.append(d.key)
        changed = list(result.admitted)
        needed = {
            victim: by_key[d.key].course.code
            for d in decisions
            if isinstance(d, Waiting) and d.reclaim is not None
            for victim in d.reclaim.victims
        }
        result.reclaim = _reclaim_follow(needed)
        changed.extend(result.reclaim.changed)
        waiting_by_reason: dict[tuple[Reason, int | None], list[str]] = defaultdict(list)
        now = timezone.now()
        for d in decisions:
            if isinstance(d, Waiting):
                reason = d.reason if d.reclaim is None else _returning(d.reclaim.victims, result.reclaim.stops_at, now)
                offer = offers.get(d.key)
                waiting_by_reason[reason, offer["template"] if offer else None].append(d.key)
        for (reason, _offered), keys in waiting_by_reason.items():
            result.waiting += len(keys)
            stored = {**reason_fields(reason), "smaller_offer": offers.get(keys[0], {})}
            stale = list(LabSession.objects.filter(pk__one_of=keys).exclude(**stored).values_list("pk", flat=True))
            if stale:
                LabSession.objects.filter(pk__one_of=stale).update(**stored, version=F("version") + 1)
                changed.extend(stale)
        session_changes_publish(changed)
    return result
