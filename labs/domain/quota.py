"""Course quotas as Kueue's ClusterQueues: a guarantee, borrowing and lending within a cohort.

Each course has a guaranteed (nominal) amount of core percent, memory MiB and instances. A
course in a cohort may go over its guarantee by borrowing what other courses of the cohort have
idle and lendable, up to its own borrowing limit; a course lends at most its lending limit of
its idle guarantee. Per resource r, with use and nominal per course c:

    lendable idle of c  = min(lending limit of c, max(0, nominal - use))
    borrowed by c       = max(0, use - nominal)
    c may borrow up to  = Σ lendable idle of the others - Σ borrowed by the others

``QuotaLedger`` keeps the cohort sums up to date as admissions and releases change usage, so a
check costs the same whatever the number of courses.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import NamedTuple

from labs.domain.checks import check_int, check_optional_int, check_str, check_type
from labs.domain.reasons import Reason

RESOURCE_NAMES = ("core_percent", "memory_mib", "instances")
# Reason codes per resource, in RESOURCE_NAMES order.
_BORROWING_LIMIT = ("quota.borrowing_limit_core", "quota.borrowing_limit_memory", "quota.borrowing_limit_instances")
_COHORT_IDLE = ("cohort.core", "cohort.memory", "cohort.instances")


class _Amounts(NamedTuple):
    core_percent: int = 0
    memory_mib: int = 0
    instances: int = 0


_new = tuple.__new__


class Resources(_Amounts):
    """Core percent, memory MiB and instances: non-negative ints, checked when made.

    Sums and differences inside the ledger are made without the check (they may go below zero
    in between, as in ``guarantee - use``); a value from outside always passes through it.
    """

    __slots__ = ()

    def __new__(cls, core_percent: int = 0, memory_mib: int = 0, instances: int = 0) -> Resources:
        if not (
            type(core_percent) is int
            and type(memory_mib) is int
            and type(instances) is int
            and core_percent >= 0
            and memory_mib >= 0
            and instances >= 0
        ):
            check_int("Resources", "core_percent", core_percent, 0)
            check_int("Resources", "memory_mib", memory_mib, 0)
            check_int("Resources", "instances", instances, 0)
        return _new(cls, (core_percent, memory_mib, instances))

    # Spelled out rather than zipped: these run several times per placement.
    def __add__(self, other: Resources) -> Resources:  # type: ignore[override]
        return _new(Resources, (self[0] + other[0], self[1] + other[1], self[2] + other[2]))

    def __sub__(self, other: Resources) -> Resources:
        return _new(Resources, (self[0] - other[0], self[1] - other[1], self[2] - other[2]))

    def fits_in(self, other: Resources) -> bool:
        return self[0] <= other[0] and self[1] <= other[1] and self[2] <= other[2]


@dataclass(frozen=True, slots=True)
class CourseQuota:
    """A course's guarantee and limits. ``None`` limits: unlimited borrowing / lend all idle.

    ``sessions_per_student`` counts concurrent sessions; ``allowed_templates`` are template ids
    (``None``: any). Fields are checked when the quota is made.
    """

    guarantee: Resources
    cohort: str | None = None
    borrowing_limit: Resources | None = None
    lending_limit: Resources | None = None
    sessions_per_student: int = 1
    allowed_templates: frozenset[int] | None = None
    # Caps on the host CPU (millicores) and memory (MiB) the course's sessions request in all;
    # ``None``: no cap (issue 14). Hard caps: not borrowed, not lent.
    host_cpu_cap_millicores: int | None = None
    host_memory_cap_mib: int | None = None

    def __post_init__(self) -> None:
        check_type("CourseQuota", "guarantee", self.guarantee, Resources)
        for name in ("host_cpu_cap_millicores", "host_memory_cap_mib"):
            check_optional_int("CourseQuota", name, getattr(self, name))
            if getattr(self, name) is not None and getattr(self, name) < 0:
                raise ValueError(f"CourseQuota.{name} must be >= 0 or None, not {getattr(self, name)}")
        if self.cohort is not None:
            check_str("CourseQuota", "cohort", self.cohort, empty=False)
        for name in ("borrowing_limit", "lending_limit"):
            if getattr(self, name) is not None:
                check_type("CourseQuota", name, getattr(self, name), Resources, "Resources or None")
        check_int("CourseQuota", "sessions_per_student", self.sessions_per_student, 0)
        templates = self.allowed_templates
        if templates is not None:
            check_type("CourseQuota", "allowed_templates", templates, frozenset, "frozenset of template ids or None")
            for template_id in templates:
                check_int("CourseQuota", "allowed_templates", template_id)

    def ceiling(self) -> Resources | None:
        """The most the course can ever hold, or ``None`` when unbounded."""
        if self.cohort is None:
            return self.guarantee
        if self.borrowing_limit is None:
            return None
        return self.guarantee + self.borrowing_limit


class Admission(NamedTuple):
    """Whether a request may be charged now; ``reason`` says why not (``None`` when admitted)."""

    admitted: bool
    borrowing: bool
    reason: Reason | None


_WITHIN_GUARANTEE = Admission(True, False, None)


class QuotaLedger:
    """Usage per course against its quota, with cohort sums for borrowing."""

    def __init__(self, quotas: Mapping[int, CourseQuota], usage: Mapping[int, Resources]) -> None:
        self.quotas = dict(quotas)
        self.usage: dict[int, Resources] = {c: Resources(*usage.get(c, Resources())) for c in self.quotas}
        # Per cohort: [Σ lendable idle, Σ borrowed] for each resource.
        self._cohorts: dict[str, list[list[int]]] = {}
        for course_id, quota in self.quotas.items():
            if quota.cohort is not None:
                self._add_terms(course_id, +1)

    def _terms(self, course_id: int) -> tuple[Resources, Resources]:
        quota = self.quotas[course_id]
        use = self.usage[course_id]
        lend_cap = quota.lending_limit
        lendable = Resources(
            *(
                min(cap if lend_cap is not None else nominal, max(0, nominal - used))
                for nominal, used, cap in zip(quota.guarantee, use, lend_cap or quota.guarantee, strict=True)
            )
        )
        borrowed = Resources(*(max(0, used - nominal) for nominal, used in zip(quota.guarantee, use, strict=True)))
        return lendable, borrowed

    def _add_terms(self, course_id: int, sign: int) -> None:
        cohort = self.quotas[course_id].cohort
        if cohort is None:  # a course outside any cohort neither lends nor borrows
            return
        sums = self._cohorts.setdefault(cohort, [[0, 0, 0], [0, 0, 0]])
        lendable, borrowed = self._terms(course_id)
        for i in range(3):
            sums[0][i] += sign * lendable[i]
            sums[1][i] += sign * borrowed[i]

    def borrowable(self, course_id: int) -> Resources:
        """What ``course_id`` could borrow from the rest of its cohort right now."""
        quota = self.quotas[course_id]
        if quota.cohort is None:
            return Resources()
        lend_sum, borrow_sum = self._cohorts.get(quota.cohort, [[0, 0, 0], [0, 0, 0]])
        own_lendable, own_borrowed = self._terms(course_id)
        return Resources(*(max(0, (lend_sum[i] - own_lendable[i]) - (borrow_sum[i] - own_borrowed[i])) for i in range(3)))

    def check(self, course_id: int, request: Resources) -> Admission:
        """Whether the course may take ``request`` now, and whether that means borrowing."""
        quota = self.quotas[course_id]
        use = self.usage[course_id]
        after = use + request
        if after.fits_in(quota.guarantee):
            return _WITHIN_GUARANTEE
        if quota.cohort is None:
            return Admission(False, False, _over_guarantee(course_id, use, quota.guarantee, request))
        available = self.borrowable(course_id)
        for i in range(3):
            over = after[i] - quota.guarantee[i]
            if over <= 0:
                continue
            if quota.borrowing_limit is not None and over > quota.borrowing_limit[i]:
                reason = Reason.of(
                    _BORROWING_LIMIT[i],
                    used=use[i],
                    guarantee=quota.guarantee[i],
                    limit=quota.borrowing_limit[i],
                    need=request[i],
                    course=course_id,
                )
                return Admission(False, True, reason)
            # Lenders' usage does not move when this course borrows, so their idle lendable
            # amount is the pool for everything the course holds beyond its guarantee.
            if over > available[i]:
                reason = Reason.of(_COHORT_IDLE[i], cohort=quota.cohort, over=over, idle=available[i], course=course_id)
                return Admission(False, True, reason)
        return Admission(True, True, None)

    def charge(self, course_id: int, amount: Resources) -> None:
        in_cohort = self.quotas[course_id].cohort is not None
        if in_cohort:
            self._add_terms(course_id, -1)
        self.usage[course_id] = self.usage[course_id] + amount
        if in_cohort:
            self._add_terms(course_id, +1)

    def refund(self, course_id: int, amount: Resources) -> None:
        in_cohort = self.quotas[course_id].cohort is not None
        if in_cohort:
            self._add_terms(course_id, -1)
        self.usage[course_id] = self.usage[course_id] - amount
        if in_cohort:
            self._add_terms(course_id, +1)


def _over_guarantee(course_id: int, use: Resources, guarantee: Resources, request: Resources) -> Reason:
    """The first resource (instances, core, memory) that ``request`` would take over the guarantee."""
    if use.instances + request.instances > guarantee.instances:
        return Reason.of("quota.instances", used=use.instances, limit=guarantee.instances, course=course_id)
    if use.core_percent + request.core_percent > guarantee.core_percent:
        return Reason.of(
            "quota.core", used=use.core_percent, limit=guarantee.core_percent, need=request.core_percent, course=course_id
        )
    return Reason.of("quota.memory", used=use.memory_mib, limit=guarantee.memory_mib, need=request.memory_mib, course=course_id)
