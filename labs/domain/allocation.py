"""Admission and placement of a batch of launch requests: what one allocation pass decides.

``allocate`` takes a capacity snapshot (``NodeCapacity``, with the instances already on every
card), the course quotas, how many sessions each student holds, the batch in queue order and
the time, and returns one decision per request:

- ``Placed`` — admitted on these card(s); ``borrowed`` when it rides on the cohort's idle quota;
- ``Waiting`` — not now, with the ``Reason`` (a code and its numbers), and a ``ReclaimPlan``
  when the course is within its guarantee and only other courses' borrowed sessions stand in
  the way. The plans of one batch are made together: each victim is named once, and each plan
  is made on the cluster as the earlier plans leave it (their victims gone, their requests
  placed), so a class waiting for N borrowed labs gets N victims warned at once;
- ``Refused`` — can never be admitted as configured (larger than any card, than the course's
  ceiling, a template the course does not allow, a memory size off every node's step, ...),
  with the ``Reason``.

Order: requests that fit their course's guarantee are decided first, in queue order; requests
that need to borrow come after them, in queue order — admission inside a guarantee always beats
borrowing. A decision for one request never stops the rest of the batch; a batch that names a
key twice, or a key already placed, is rejected whole (``ValueError``). Every instance is
charged by ``instance_charge``; a release gives back that charge and the student's session slot.
"""

from __future__ import annotations

import contextlib
from collections.abc import Collection, Iterable, Iterator, Mapping, Sequence
from typing import NamedTuple

from labs.domain.placement import (
    DEFAULT_CONFIG,
    Choice,
    Cluster,
    LaunchRequest,
    NodeCapacity,
    PlacementConfig,
    ReclaimPlan,
    SharePolicy,
    instance_charge,
)
from labs.domain.quota import CourseQuota, QuotaLedger, Resources
from labs.domain.reasons import Reason
from labs.domain.units import CORE_PERCENT_MAX, MEMORY_GRANULE_MIB


class Placed(NamedTuple):
    key: str
    node: str
    card_ids: tuple[int, ...]
    card_indices: tuple[int, ...]
    borrowed: bool = False

    @property
    def card_id(self) -> int:
        return self.card_ids[0]


class Waiting(NamedTuple):
    key: str
    reason: Reason
    reclaim: ReclaimPlan | None = None


class Refused(NamedTuple):
    key: str
    reason: Reason


Decision = Placed | Waiting | Refused


def request_resources(request: LaunchRequest, card_memory_mib: int = 0) -> Resources:
    """What ``request`` will charge its course once placed, by ``instance_charge``.

    A whole-card request charges all the memory of its cards: ``card_memory_mib`` is the memory
    of each (``Cluster.whole_card_memory``); without it, the request's own memory per card.
    """
    if request.cards > 1:
        return instance_charge(CORE_PERCENT_MAX, 0, (card_memory_mib or request.memory_mib,) * request.cards)
    return instance_charge(request.core_percent, request.memory_mib)


def allocate(
    nodes: Iterable[NodeCapacity],
    requests: Sequence[LaunchRequest],
    quotas: Mapping[int, CourseQuota],
    student_active: Mapping[tuple[int, int], int],
    *,
    now: float,
    config: PlacementConfig = DEFAULT_CONFIG,
    warned: Collection[str] = (),
) -> list[Decision]:
    """Decide every request of the batch; see the module docstring. ``now`` is in seconds;
    ``warned``: instances already warned of a reclaim, named again before any other."""
    cluster = Cluster(nodes, config)
    return Allocator(cluster, quotas, student_active, now=now, warned=warned).decide(requests)


class Allocator:
    """One pass's admission state over a ``Cluster``; ``decide`` may be called repeatedly."""

    def __init__(
        self,
        cluster: Cluster,
        quotas: Mapping[int, CourseQuota],
        student_active: Mapping[tuple[int, int], int],
        *,
        now: float,
        warned: Collection[str] = (),
    ) -> None:
        self.cluster = cluster
        self.warned = frozenset(warned)
        # Reclaim plans made so far in this pass: the victims they name, the requests waiting
        # for their room (with the card(s) they will take), and what those requests will charge.
        self._promised: set[str] = set()
        self._planned: list[tuple[LaunchRequest, Choice]] = []
        self._planned_use: dict[int, Resources] = {}
        self.quotas = quotas
        usage = {course: Resources(*amounts) for course, amounts in cluster.usage_by_course().items()}
        self.ledger = QuotaLedger(quotas, usage)
        self.active = dict(student_active)
        self.now = now
        self._borrowed_now: set[str] | None = None
        self._by_shape: dict[tuple, tuple[Reason | None, Resources]] = {}
        self.host_used = cluster.host_usage_by_course()

    def decide(self, requests: Sequence[LaunchRequest]) -> list[Decision]:
        """One decision per request, in the order given (see the module docstring).

        ``ValueError``, before anything is decided, if a key appears twice in the batch or is
        already placed in the cluster: a key names one instance, and a second one would hold
        capacity that nothing ever releases.
        """
        seen: set[str] = set()
        for request in requests:
            if request.key in seen:
                raise ValueError(f"duplicate request key {request.key!r} in the batch")
            if request.key in self.cluster:
                raise ValueError(f"request key {request.key!r} is already placed; a key names one instance")
            seen.add(request.key)
        self._promised.clear()
        self._planned.clear()
        self._planned_use.clear()
        decisions: list[Decision | None] = [None] * len(requests)
        borrowers: list[tuple[int, LaunchRequest, Resources]] = []
        check = self.ledger.check
        for position, request in enumerate(requests):
            # Whether a request can ever fit, and what it charges, depend on its course and
            # shape, not on who asks: worked out once per batch and shape.
            shape = (
                request.course_id,
                request.core_percent,
                request.memory_mib,
                request.cards,
                request.share_policy,
                request.template_id,
                request.cpu_millicores,
                request.host_memory_mib,
            )
            known = self._by_shape.get(shape)
            if known is None:
                card_mib = self.cluster.whole_card_memory(request.memory_mib) if request.cards > 1 else 0
                need = request_resources(request, card_mib)
                known = self._by_shape[shape] = (self._never_fits(request, need), need)
            refusal, need = known
            if refusal:
                decisions[position] = Refused(request.key, refusal)
                continue
            wait = self._student_wait(request)
            if wait:
                decisions[position] = Waiting(request.key, wait)
                continue
            admission = check(request.course_id, need)
            if admission.borrowing:
                borrowers.append((position, request, need))
            elif admission.admitted:
                decisions[position] = self._place(request, need, borrowed=False)
            else:
                decisions[position] = Waiting(request.key, admission.reason)  # type: ignore[arg-type]  # set when not admitted
        for position, request, need in borrowers:
            wait = self._student_wait(request)
            admission = check(request.course_id, need)
            if wait:
                decisions[position] = Waiting(request.key, wait)
            elif not admission.admitted:
                decisions[position] = Waiting(request.key, admission.reason)  # type: ignore[arg-type]  # set when not admitted
            else:
                decisions[position] = self._place(request, need, borrowed=admission.borrowing)
        return decisions  # type: ignore[return-value]  # every position was filled above

    def fits_now(self, request: LaunchRequest, *, student_limit: bool = True) -> bool:
        """Whether ``request`` would be placed now were it next in the queue: it can ever fit, its
        course's quota admits it (within the guarantee or borrowing), the course's host caps and
        (``student_limit``) the student's session limit leave room, and the placement engine finds
        it a place on the cluster as this pass leaves it (its placements and planned reclaims
        counted, so fragmentation counts). Changes nothing."""
        card_mib = self.cluster.whole_card_memory(request.memory_mib) if request.cards > 1 else 0
        need = request_resources(request, card_mib)
        if self._never_fits(request, need) is not None or (student_limit and self._student_wait(request) is not None):
            return False
        if not self.ledger.check(request.course_id, need).admitted or self._host_quota_wait(request) is not None:
            return False
        choice = self._choose(request)
        if choice is None:
            return False
        if request.cards > 1:
            charge = instance_charge(CORE_PERCENT_MAX, 0, tuple(card.memory_mib for card in choice.cards))
            return charge == need or self.ledger.check(request.course_id, charge).admitted
        return True

    def student_room(self, request: LaunchRequest) -> bool:
        """Whether ``request``'s student may hold one more session of its course now."""
        return self._student_wait(request) is None

    def release(self, key: str) -> bool:
        """Remove a placed instance (a stop): give back its quota and its student's session slot.

        ``False`` if nothing is placed under ``key``.
        """
        placed = self.cluster.instance_of(key)
        held = self.cluster.release(key)
        if held is None:
            return False
        course_id = held.course_id
        if placed is not None and course_id in self.host_used:
            cpu, mib = self.host_used[course_id]
            self.host_used[course_id] = (cpu - placed[0].cpu_millicores, mib - placed[0].host_memory_mib)
        if course_id is not None:
            if course_id in self.ledger.quotas:
                self.ledger.refund(course_id, held.charge)
            student = (course_id, held.student_id)
            if held.student_id is not None and self.active.get(student, 0) > 0:
                self.active[student] -= 1
        self._borrowed_now = None
        return True

    def _host_quota_wait(self, request: LaunchRequest) -> Reason | None:
        """Why the course's host CPU or memory cap leaves no room for ``request`` now, or ``None``."""
        quota = self.quotas[request.course_id]
        cpu, mib = self.host_used.get(request.course_id, (0, 0))
        if quota.host_memory_cap_mib is not None and mib + request.host_memory_mib > quota.host_memory_cap_mib:
            return Reason.of("quota.host_memory", used=mib, limit=quota.host_memory_cap_mib, need=request.host_memory_mib)
        if quota.host_cpu_cap_millicores is not None and cpu + request.cpu_millicores > quota.host_cpu_cap_millicores:
            return Reason.of("quota.host_cpu", used=cpu, limit=quota.host_cpu_cap_millicores, need=request.cpu_millicores)
        return None

    def _place(self, request: LaunchRequest, need: Resources, *, borrowed: bool) -> Decision:
        host_wait = self._host_quota_wait(request)
        if host_wait is not None:
            return Waiting(request.key, host_wait)
        choice = self._choose(request)
        if choice is not None and request.cards > 1:
            # The charge was worked out on the smallest cards that fit; cards chosen larger
            # charge more, and the quota has to allow that too.
            charge = instance_charge(CORE_PERCENT_MAX, 0, tuple(card.memory_mib for card in choice.cards))
            if charge != need:
                admission = self.ledger.check(request.course_id, charge)
                if not admission.admitted:
                    return Waiting(request.key, admission.reason)  # type: ignore[arg-type]  # set when not admitted
                need, borrowed = charge, admission.borrowing
        if choice is None:
            reason = self.cluster.explain(request)
            plan = None if borrowed else self._plan_reclaim(request, need)
            if plan is not None:
                reason = Reason.of("reclaim.possible", reason=reason, victims=len(plan.victims))
            return Waiting(request.key, reason, plan)
        self.cluster.commit(request, choice, started_at=self.now)
        self.ledger.charge(request.course_id, need)
        cpu, mib = self.host_used.get(request.course_id, (0, 0))
        self.host_used[request.course_id] = (cpu + request.cpu_millicores, mib + request.host_memory_mib)
        student = (request.course_id, request.student_id)
        self.active[student] = self.active.get(student, 0) + 1
        self._borrowed_now = None
        cards = choice.cards
        if len(cards) == 1:
            card = cards[0]
            return Placed(request.key, choice.node.name, (card.card_id,), (card.index,), borrowed)
        return Placed(request.key, choice.node.name, tuple(c.card_id for c in cards), tuple(c.index for c in cards), borrowed)

    def _choose(self, request: LaunchRequest) -> Choice | None:
        """Where ``request`` goes now. Once this pass has planned reclaims, the room they promise
        is taken: the planned requests are counted as placed on top of their victims, which
        still run, so a request later in the queue neither takes that room now nor finds it
        gone when its victims stop."""
        if not self._planned:
            return self.cluster.choose(request)
        with self._as_planned(victims_gone=False):
            return self.cluster.choose(request)

    @contextlib.contextmanager
    def _as_planned(self, *, victims_gone: bool) -> Iterator[None]:
        """For the block, the cluster with this pass's planned requests placed where their plans
        put them, and (``victims_gone``) their victims set aside; as it was afterwards."""
        cluster = self.cluster
        aside = [p for key in self._promised if (p := cluster.set_aside(key)) is not None] if victims_gone else []
        for planned, choice in self._planned:
            cluster.commit(planned, choice, started_at=self.now)
        try:
            yield
        finally:
            for planned, _ in self._planned:
                cluster.release(planned.key)
            for placement in aside:
                cluster.put_back(placement)

    def _plan_reclaim(self, request: LaunchRequest, need: Resources) -> ReclaimPlan | None:
        """The victims whose stop seats ``request`` (a guaranteed request that fits nowhere now),
        on the cluster as this pass's earlier plans leave it, or ``None``.

        A request is planned for only while its course's guarantee covers it together with the
        requests already planned for: the guarantee is what reclaim gives back, not more.
        """
        course_id = request.course_id
        promised = self.ledger.usage[course_id] + self._planned_use.get(course_id, Resources()) + need
        if not promised.fits_in(self.quotas[course_id].guarantee):
            return None
        candidates = [key for key in self._reclaimable(course_id) if key not in self._promised]
        if not candidates:
            return None
        cluster = self.cluster
        choice = None
        with self._as_planned(victims_gone=True):
            plan = cluster.reclaim_plan(request, candidates, self.warned)
            if plan is not None:
                victims = [placement for key in plan.victims if (placement := cluster.set_aside(key)) is not None]
                choice = cluster.choose(request)
                for placement in victims:
                    cluster.put_back(placement)
        if plan is None or choice is None:
            return None
        self._promised.update(plan.victims)
        self._planned.append((request, choice))
        self._planned_use[course_id] = self._planned_use.get(course_id, Resources()) + need
        return plan

    def _never_fits(self, request: LaunchRequest, need: Resources) -> Reason | None:
        """Why ``request`` (charging ``need``) can never be placed as asked (a refusal), or ``None``."""
        cards = request.cards
        best_effort = request.share_policy == SharePolicy.BEST_EFFORT
        if cards > 1:
            if request.core_percent != CORE_PERCENT_MAX * cards:
                return Reason.of(
                    "whole_cards.core", cards=cards, need_percent=CORE_PERCENT_MAX * cards, core_percent=request.core_percent
                )
            if cards > self.cluster.most_cards_per_node:
                return Reason.of("whole_cards.node_size", cards=cards, most=self.cluster.most_cards_per_node)
        elif best_effort and request.core_percent != 0:
            return Reason.of("core.best_effort_floor")
        elif not best_effort and not 1 <= request.core_percent <= CORE_PERCENT_MAX:
            return Reason.of("core.range", core_percent=request.core_percent, max_percent=CORE_PERCENT_MAX)
        if request.memory_mib <= 0 or request.memory_mib % MEMORY_GRANULE_MIB:
            return Reason.of("memory.granule", memory_mib=request.memory_mib, granule_mib=MEMORY_GRANULE_MIB)
        steps = self.cluster.granules
        if steps and all(request.memory_mib % step for step in steps):
            # Every node allocates memory in larger steps (openFuyao vNPU: 1 GiB): no node ever can.
            return Reason.of("memory.granularity", memory_mib=request.memory_mib, step_mib=min(steps))
        quota = self.quotas.get(request.course_id)
        if quota is None:
            return Reason.of("quota.missing")
        if quota.allowed_templates is not None and request.template_id not in quota.allowed_templates:
            return Reason.of("template.not_offered")
        if quota.host_memory_cap_mib is not None and request.host_memory_mib > quota.host_memory_cap_mib:
            return Reason.of("quota.host_memory_cap", need_mib=request.host_memory_mib, limit_mib=quota.host_memory_cap_mib)
        if quota.host_cpu_cap_millicores is not None and request.cpu_millicores > quota.host_cpu_cap_millicores:
            return Reason.of(
                "quota.host_cpu_cap", need_millicores=request.cpu_millicores, limit_millicores=quota.host_cpu_cap_millicores
            )
        ceiling = quota.ceiling()
        if ceiling is not None and not need.fits_in(ceiling):
            if ceiling.instances < 1:
                return Reason.of("quota.ceiling_instances")
            if need.core_percent > ceiling.core_percent:
                return Reason.of("quota.ceiling_core", need=need.core_percent, limit=ceiling.core_percent)
            return Reason.of("quota.ceiling_memory", need_mib=need.memory_mib, limit_mib=ceiling.memory_mib)
        if request.memory_mib > self.cluster.largest_card_mib:
            if not self.cluster.largest_card_mib:
                return Reason.of("capacity.no_cards")
            return Reason.of("card.too_small", need_mib=request.memory_mib, largest_mib=self.cluster.largest_card_mib)
        largest_mib = self.cluster.largest_host_mib
        if largest_mib is not None and request.host_memory_mib > largest_mib:
            return Reason.of("node.host_memory_too_small", need_mib=request.host_memory_mib, largest_mib=largest_mib)
        largest_cpu = self.cluster.largest_cpu_millicores
        if largest_cpu is not None and request.cpu_millicores > largest_cpu:
            return Reason.of("node.host_cpu_too_small", need_millicores=request.cpu_millicores, largest_millicores=largest_cpu)
        return None

    def _student_wait(self, request: LaunchRequest) -> Reason | None:
        if request.pooled:
            return None
        limit = self.quotas[request.course_id].sessions_per_student
        held = self.active.get((request.course_id, request.student_id), 0)
        if held >= limit:
            return Reason.of("student.limit", held=held, limit=limit)
        return None

    def _reclaimable(self, course_id: int) -> list[str]:
        """Borrowed instances of other courses that have run for at least the minimum runtime."""
        oldest_allowed = self.now - self.cluster.config.min_runtime_seconds
        return [
            key
            for key in self.borrowed_now()
            if (instance := self.cluster.instance_of(key)) is not None
            and instance[0].course_id != course_id
            and instance[0].started_at <= oldest_allowed
        ]

    def borrowed_now(self) -> set[str]:
        """Instances outside their course's guarantee right now.

        Each course's instances are counted oldest first against its guarantee; one that would
        not fit in what is left of it is borrowed. So a borrowed instance becomes guaranteed
        when older ones of its course end, and an instance inside its course's guarantee is
        never a reclaim victim. Only courses over their guarantee are looked at.
        """
        if self._borrowed_now is None:
            borrowed: set[str] = set()
            for course_id, quota in self.quotas.items():
                if self.ledger.usage[course_id].fits_in(quota.guarantee):
                    continue
                left = quota.guarantee
                members = sorted(self.cluster.course_holdings(course_id), key=lambda m: (m[1].started_at, m[0]))
                for key, held in members:
                    need = held.charge
                    if need.fits_in(left):
                        left = left - need
                    else:
                        borrowed.add(key)
            self._borrowed_now = borrowed
        return self._borrowed_now
