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

RESOURCE_NAMES = ("core_percent", "memory_mib", "instances")
_LABEL = {"core_percent": ("% core", "%"), "memory_mib": ("MiB", "MiB"), "instances": ("instances", "")}


class Resources(NamedTuple):
    core_percent: int = 0
    memory_mib: int = 0
    instances: int = 0

    # Spelled out rather than zipped: these run several times per placement.
    def __add__(self, other: Resources) -> Resources:  # type: ignore[override]
        return Resources(self[0] + other[0], self[1] + other[1], self[2] + other[2])

    def __sub__(self, other: Resources) -> Resources:
        return Resources(self[0] - other[0], self[1] - other[1], self[2] - other[2])

    def fits_in(self, other: Resources) -> bool:
        return self[0] <= other[0] and self[1] <= other[1] and self[2] <= other[2]


@dataclass(frozen=True)
class CourseQuota:
    """A course's guarantee and limits. ``None`` limits: unlimited borrowing / lend all idle."""

    guarantee: Resources
    cohort: str | None = None
    borrowing_limit: Resources | None = None
    lending_limit: Resources | None = None
    sessions_per_student: int = 1
    allowed_templates: frozenset[int] | None = None

    def ceiling(self) -> Resources | None:
        """The most the course can ever hold, or ``None`` when unbounded."""
        if self.cohort is None:
            return self.guarantee
        if self.borrowing_limit is None:
            return None
        return self.guarantee + self.borrowing_limit


class Admission(NamedTuple):
    admitted: bool
    borrowing: bool
    reason: str


_WITHIN_GUARANTEE = Admission(True, False, "")


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
            return Admission(False, False, _over_guarantee(use, quota.guarantee, request))
        available = self.borrowable(course_id)
        for i, name in enumerate(RESOURCE_NAMES):
            over = after[i] - quota.guarantee[i]
            if over <= 0:
                continue
            if quota.borrowing_limit is not None and over > quota.borrowing_limit[i]:
                unit = _LABEL[name][0]
                return Admission(
                    False,
                    True,
                    f"course quota: {use[i]} {unit} in use of a guarantee of {quota.guarantee[i]} plus "
                    f"a borrowing limit of {quota.borrowing_limit[i]}; needs {request[i]} more",
                )
            # Lenders' usage does not move when this course borrows, so their idle lendable
            # amount is the pool for everything the course holds beyond its guarantee.
            if over > available[i]:
                unit = _LABEL[name][0]
                return Admission(
                    False,
                    True,
                    f"cohort {quota.cohort}: needs {over} {unit} beyond the course's guarantee; "
                    f"{available[i]} {unit} is idle and lendable",
                )
        return Admission(True, True, "")

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


def _over_guarantee(use: Resources, guarantee: Resources, request: Resources) -> str:
    if use.instances + request.instances > guarantee.instances:
        return f"course quota: {use.instances} of {guarantee.instances} instances in use"
    if use.core_percent + request.core_percent > guarantee.core_percent:
        return f"course quota: {use.core_percent} of {guarantee.core_percent} % core in use; needs {request.core_percent} % more"
    return f"course quota: {use.memory_mib} of {guarantee.memory_mib} MiB in use; needs {request.memory_mib} MiB more"
