"""Courses as instructors run them: create, edit, archive at term end, set the quota.

A quota is checked here, by the rules of ``labs.domain.quota_spec``, against the cluster's
healthy cards beside the other courses' guarantees and the institution's allotment, whoever sends it (the console's form shows the
same rules' errors first); each function writes in one transaction. Lowering a guarantee below
what is in use stops nothing: it applies to the next admissions.
"""

from __future__ import annotations

from dataclasses import dataclass

from django.core.exceptions import ValidationError
from django.db import transaction
from django.utils import timezone

from labs.dispatch import controller_wake
from labs.domain.quota_spec import (
    QUOTA_FIELDS,
    AllotmentRoom,
    ClusterCaps,
    Holder,
    QuotaContext,
    QuotaError,
    Resource,
    cap_of,
    cluster_left,
    fields_of,
    quota_errors,
)
from labs.domain.reasons import Reason
from labs.domain.states import TERMINAL
from labs.domain.units import Scenario
from labs.models import Affiliation, Course, CourseQuota, Enrollment, Institution, LabSession
from labs.models.tenancy import cohort_of_another_institution
from labs.selectors.console import (
    Allotment,
    ClusterFacts,
    GuaranteesHeld,
    cluster_facts,
    guarantees_held,
    institution_allotment,
)
from labs.services.affiliations import affiliation_ensure
from labs.services.audit import audit_record
from labs.services.events import events_batch
from labs.services.locks import GUARANTEE_LOCK_KEY, wait_for_xact_lock
from labs.services.sessions import session_stop


def course_create(*, by, institution: Institution, **fields) -> Course:
    """A new course of ``institution`` with ``by`` as its instructor."""
    with transaction.atomic():
        course = Course.objects.create(institution=institution, **fields)
        Enrollment.objects.create(user=by, course=course, role=Enrollment.Role.INSTRUCTOR)
        affiliation_ensure(user_ids=[by.pk], institution=institution, source=Affiliation.Source.ROLE)
        audit_record(by=by, action="course.create", target=f"course {course.code}", institution=institution, after=fields)
    return course


def course_update(*, course: Course, by, **fields) -> Course:
    before = {name: getattr(course, name) for name in fields}
    with transaction.atomic():
        for name, value in fields.items():
            setattr(course, name, value)
        course.save(update_fields=list(fields))
        changed = {k: v for k, v in fields.items() if before[k] != v}
        if changed:
            audit_record(
                by=by,
                action="course.edit",
                target=f"course {course.code}",
                institution=course.institution,
                before={k: before[k] for k in changed},
                after=changed,
            )
    return course


def course_archive(*, course: Course, by) -> int:
    """Archive ``course`` at term end: its open sessions stop with a notice, nothing new launches,
    history is kept. Returns how many sessions were stopped; archiving twice changes nothing."""
    with events_batch(), transaction.atomic():
        changed = Course.objects.filter(pk=course.pk, archived_at__isnull=True).update(archived_at=timezone.now())
        course.refresh_from_db(fields=["archived_at"])
        if not changed:
            return 0
        audit_record(by=by, action="course.archive", target=f"course {course.code}", institution=course.institution)
        reason = Reason.of("session.course_archived", course=course.code)
        stopped = 0
        for session_id in LabSession.objects.filter(course=course).exclude(state__in=TERMINAL).values_list("pk", flat=True):
            stopped += bool(session_stop(session_id=session_id, reason=reason))
    return stopped


def course_unarchive(*, course: Course, by) -> None:
    with transaction.atomic():
        if Course.objects.filter(pk=course.pk, archived_at__isnull=False).update(archived_at=None):
            audit_record(by=by, action="course.unarchive", target=f"course {course.code}", institution=course.institution)
    course.archived_at = None


def quota_context(
    *,
    facts: ClusterFacts,
    allotment: Allotment,
    held: GuaranteesHeld,
    overcommit: bool,
    scenarios: set[str],
    cohort: str,
    institution_id: int,
) -> QuotaContext:
    """What a quota of a course of ``institution_id`` whose templates run ``scenarios`` is checked
    against: the cluster ``facts`` beside what the other courses guarantee (``held``; not checked
    when the institution allows ``overcommit``), the institution's ``allotment``, whether
    ``cohort`` is taken."""
    caps = _caps(facts, scenarios)
    room = None
    if allotment.limit is not None:
        room = AllotmentRoom(
            limit={r: getattr(allotment.limit, r.value) for r in Resource},
            others={r: getattr(allotment.others, r.value) for r in Resource},
            left={r: allotment.left_of(r.value) for r in Resource},
        )
    taken = bool(cohort) and cohort_of_another_institution(cohort, institution_id)
    return QuotaContext(
        memory_step_mib=facts.memory_step_mib,
        caps=caps,
        held=_holders(held),
        overcommit=overcommit,
        allotment=room,
        cohort_taken=taken,
    )


@dataclass(frozen=True)
class GuaranteeRoom:
    """What the cluster holds for a course's guarantee (``caps``, per resource) and how much of it
    the other courses already guarantee (``held``) and leave (``left``)."""

    caps: dict[Resource, int]
    held: dict[Resource, int]
    left: dict[Resource, int]

    def past(self, quota) -> bool:
        """Whether ``quota``'s guarantee is more than what is left: a priority, not a guarantee."""
        return any(getattr(quota, spec.name) > self.left[spec.resource] for spec in fields_of("guarantee"))  # type: ignore[index]


def guarantee_room(*, facts: ClusterFacts, held: GuaranteesHeld, scenarios: set[str]) -> GuaranteeRoom:
    """The cluster's room for a guarantee of a course whose templates run ``scenarios``, beside
    the ``held`` guarantees of the other courses (``labs.domain.quota_spec.cluster_left``)."""
    caps, holders = _caps(facts, scenarios), _holders(held)
    return GuaranteeRoom(
        caps={r: cap_of(caps, r) for r in Resource},
        held={r: sum(h.amounts[r] for h in holders) for r in Resource},
        left=cluster_left(caps, holders),
    )


def _caps(facts: ClusterFacts, scenarios: set[str]) -> ClusterCaps:
    scenario = Scenario.INFERENCE if Scenario.INFERENCE.value in scenarios else Scenario.DEVELOPMENT
    return ClusterCaps(
        cards=facts.cards,
        instances=facts.instance_cap(scenario),
        core_percent=facts.core_total_percent,
        memory_mib=facts.memory_total_mib,
        scenario=scenario,
    )


def _holders(held: GuaranteesHeld) -> tuple[Holder, ...]:
    holders = tuple(Holder(code, _amounts(use)) for code, use in held.own)
    if held.elsewhere_courses:
        holders += (Holder("", _amounts(held.elsewhere)),)
    return holders


def _amounts(use) -> dict[Resource, int]:
    return {r: getattr(use, r.value) for r in Resource}


class QuotaRefused(ValidationError):
    """The quota breaks a rule of ``labs.domain.quota_spec``; ``errors`` says which, as codes.

    A ``ValidationError`` whose messages are the errors in English; pages and the API render
    ``errors`` in the reader's language.
    """

    def __init__(self, errors: list[QuotaError]) -> None:
        self.errors = errors
        by_field: dict[str, list[str]] = {}
        for error in errors:
            by_field.setdefault(error.field, []).append(str(error))
        super().__init__(by_field)


@dataclass(frozen=True)
class QuotaChange:
    quota: CourseQuota
    created: bool
    below_use: tuple[str, ...]  # the guarantee's resources now below what is in use


def quota_set(*, course: Course, values: dict, in_use, by=None) -> QuotaChange:
    """Set the course's quota to ``values`` (every field of ``QUOTA_FIELDS``).

    Raises ``QuotaRefused`` and changes nothing when ``values`` break a rule of
    ``labs.domain.quota_spec`` (checked against the cluster's healthy cards less what the other
    courses guarantee, unless the institution allows overcommit; the institution's allotment
    less its other courses' guarantees; and the other institutions' cohorts).
    Nothing running is stopped when a guarantee drops below ``in_use``: the new value applies to
    the next admissions; ``below_use`` names the resources where that is so. Queued sessions are
    looked at again at once (a raised guarantee may admit them).
    """
    if set(values) != set(QUOTA_FIELDS):
        unknown, missing = sorted(set(values) - set(QUOTA_FIELDS)), sorted(set(QUOTA_FIELDS) - set(values))
        raise ValueError(f"quota fields: unknown {unknown}, missing {missing}")
    with transaction.atomic():
        # Checked and written under one lock: two changes at once cannot each fit beside the
        # other's old guarantee and together pass the cluster.
        wait_for_xact_lock(GUARANTEE_LOCK_KEY)
        context = quota_context(
            facts=cluster_facts(),
            allotment=institution_allotment(institution=course.institution, excluding=course),
            held=guarantees_held(institution=course.institution, excluding=course),
            overcommit=course.institution.allow_overcommit,
            scenarios=set(course.templates.values_list("scenario", flat=True)),
            cohort=values["cohort"],
            institution_id=course.institution_id,
        )
        errors = quota_errors(values, context)
        if errors:
            raise QuotaRefused(errors)
        old = CourseQuota.objects.filter(course=course).values(*QUOTA_FIELDS).first() or {}
        quota, created = CourseQuota.objects.update_or_create(course=course, defaults=values)
        changed = {k: v for k, v in values.items() if old.get(k) != v}
        if changed:
            audit_record(
                by=by,
                action="quota.set",
                target=f"course {course.code}",
                institution=course.institution,
                before={k: old.get(k) for k in changed},
                after=changed,
            )
        controller_wake()
    below = tuple(
        name
        for name, used, limit in (
            ("instances", in_use.instances, quota.instance_count),
            ("core_percent", in_use.core_percent, quota.core_percent),
            ("memory_mib", in_use.memory_mib, quota.memory_mib),
        )
        if used > limit
    )
    return QuotaChange(quota, created, below)
