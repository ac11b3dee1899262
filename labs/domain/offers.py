"""A smaller lab that starts now: what a session queued for capacity is offered instead.

A session waits either for its course's quota or its student's session limit (the course's own
rule: a smaller lab would wait too, or take room the course promised to others) or for the
cluster: no card, node or host has room for its share now (``waits_for_capacity``). Only in the
second case, and only when its template allows it (``offers_smaller_lab``), is its student
offered another template of the same course that is smaller — no more AI Core and no more NPU
memory in all, less of at least one — and that the allocation pass would place at once, were it
next in the queue (``Allocator.fits_now``: quota, host caps, the student's limit and the
placement engine on the cluster as the pass leaves it, so fragmentation counts). Of those, the
largest is offered (most AI Core, then most memory, then the lowest template id).

An offer is not a reservation: every session of one course and template waiting for capacity is
offered the same template, the first student to switch takes the room, and the switch checks
again (``labs.services.smaller_lab``). It is worked out once per course and queued template in a
pass, on the cluster after the pass's own placements.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping, Sequence

from labs.domain.allocation import Allocator
from labs.domain.placement import LaunchRequest
from labs.domain.reasons import Reason

# Reasons that say the cluster has no room now (cards, nodes, host CPU and memory), as
# ``Cluster.explain`` gives them; a course's quota, a cohort, a student's limit or a reclaim under
# way are not among them.
CAPACITY_PREFIXES = ("capacity.", "node.", "card.")


def waits_for_capacity(reason: Reason) -> bool:
    """Whether a session waiting with ``reason`` waits for the cluster, not for a quota or a limit."""
    return reason.code.startswith(CAPACITY_PREFIXES)


def is_smaller(candidate: LaunchRequest, queued: LaunchRequest) -> bool:
    """Whether ``candidate`` (a template of the course, as a request) is a smaller lab than ``queued``:
    another template, no more AI Core and no more NPU memory in all, and less of at least one."""
    if candidate.template_id == queued.template_id:
        return False
    core, memory = candidate.core_percent, candidate.memory_mib * candidate.cards
    queued_core, queued_memory = queued.core_percent, queued.memory_mib * queued.cards
    return core <= queued_core and memory <= queued_memory and (core, memory) != (queued_core, queued_memory)


def _largest_first(candidate: LaunchRequest) -> tuple[int, int, int]:
    return (-candidate.core_percent, -candidate.memory_mib * candidate.cards, candidate.template_id or 0)


def smaller_offer(
    allocator: Allocator,
    queued: LaunchRequest,
    candidates: Iterable[LaunchRequest],
    fits: dict[tuple[int, int | None], bool] | None = None,
) -> int | None:
    """The template id of the largest of ``candidates`` smaller than ``queued`` (``is_smaller``) that
    ``allocator`` would place now, or ``None``. ``candidates`` are the course's templates as
    requests (any key and student); the queued session's student must have room for one more
    session (``Allocator.student_room``), which is not looked at here. ``fits`` keeps what
    ``Allocator.fits_now`` answered for a (course, template) across calls on one allocator."""
    fits = {} if fits is None else fits
    for candidate in sorted((c for c in candidates if is_smaller(c, queued)), key=_largest_first):
        if candidate.course_id != queued.course_id:
            raise ValueError(f"a smaller lab must be of course {queued.course_id}, not of {candidate.course_id}")
        known = (candidate.course_id, candidate.template_id)
        if known not in fits:
            fits[known] = allocator.fits_now(candidate, student_limit=False)
        if fits[known]:
            return candidate.template_id
    return None


def smaller_offers(
    allocator: Allocator,
    waiting: Sequence[tuple[LaunchRequest, Reason]],
    candidates: Mapping[int, Sequence[LaunchRequest]],
    offering: Collection[int],
) -> dict[str, int]:
    """The offer of each session of ``waiting`` (its request and the reason it waits, after the
    pass decided the batch with ``allocator``): ``key -> template id``, for those that wait for
    capacity (``waits_for_capacity``), whose template is in ``offering`` (the templates that allow
    offers), whose student has room for a session, and for which a smaller template of
    ``candidates[course_id]`` fits now.

    Worked out once per course and queued template, each candidate placed (or not) once per course.
    The offer does not depend on the student, so once a (course, template) is known to have none,
    its other sessions are passed over without looking at their reasons or their students.
    """
    by_template: dict[tuple[int, int | None], int | None] = {}
    fits: dict[tuple[int, int | None], bool] = {}
    offers: dict[str, int] = {}
    for request, reason in waiting:
        if request.template_id not in offering:
            continue
        known = (request.course_id, request.template_id)
        if by_template.get(known, 0) is None:
            continue
        if not waits_for_capacity(reason) or not allocator.student_room(request):
            continue
        if known not in by_template:
            by_template[known] = smaller_offer(allocator, request, candidates.get(request.course_id, ()), fits)
        offer = by_template[known]
        if offer is not None:
            offers[request.key] = offer
    return offers
