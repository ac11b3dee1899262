"""Which smaller lab a session queued for capacity is offered (labs.domain.offers)."""

import pytest

from labs.domain.allocation import Allocator, Waiting
from labs.domain.offers import is_smaller, smaller_offer, smaller_offers, waits_for_capacity
from labs.domain.placement import CardCapacity, Cluster, Instance, LaunchRequest, NodeCapacity
from labs.domain.quota import CourseQuota, Resources
from labs.domain.reasons import Reason
from labs.domain.units import Scenario

GIB = 1024
CARD_MIB = 64 * GIB
ROOMY = CourseQuota(Resources(100_000, 10**9, 10_000), sessions_per_student=1)
BIG, MEDIUM, SMALL, TINY, WIDE = 1, 2, 3, 4, 5


def card(card_id: int, used_core: int, used_mib: int, course: int = 99) -> CardCapacity:
    """A 64 GiB card with one instance of ``course`` (another one's) holding ``used_core`` % and ``used_mib``."""
    instances = (Instance(used_core, used_mib, Scenario.DEVELOPMENT, key=f"other-{card_id}", course_id=course),)
    return CardCapacity(card_id=card_id, index=card_id, memory_mib=CARD_MIB, instances=instances)


def template(template_id: int, core: int, memory_mib: int, course: int = 1) -> LaunchRequest:
    return LaunchRequest(f"t{template_id}", course, 0, core, memory_mib, template_id=template_id)


# The course's templates: 50 %/32 GiB (the one queued), 30 %/8 GiB, 20 %/8 GiB, 10 %/4 GiB, and
# 20 %/16 GiB (less AI Core, but wants 16 GiB on one card).
TEMPLATES = [
    template(BIG, 50, 32 * GIB),
    template(MEDIUM, 30, 8 * GIB),
    template(SMALL, 20, 8 * GIB),
    template(TINY, 10, 4 * GIB),
    template(WIDE, 20, 16 * GIB),
]


def decided(cards: list[CardCapacity], quota: CourseQuota = ROOMY, held: int = 0, students: int = 1):
    """An allocator that has decided the big template's sessions of ``students`` students, and their
    requests and decisions."""
    quotas = {1: quota, 99: ROOMY}
    allocator = Allocator(Cluster([NodeCapacity("n1", tuple(cards))]), quotas, {(1, 7): held}, now=0.0)
    requests = [LaunchRequest(f"s{i}", 1, 7 + i, 50, 32 * GIB, template_id=BIG) for i in range(students)]
    decisions = allocator.decide(requests)
    return allocator, list(zip(requests, [d.reason for d in decisions], strict=True)), decisions


def test_a_session_queued_for_capacity_is_offered_the_largest_smaller_template_that_fits():
    # Two cards, each with 25 % AI Core and 12 GiB free: 30 % fits on neither, 20 %/8 GiB does.
    allocator, waiting, decisions = decided([card(0, 75, 52 * GIB), card(1, 75, 52 * GIB)])
    assert isinstance(decisions[0], Waiting) and waits_for_capacity(decisions[0].reason)
    assert smaller_offers(allocator, waiting, {1: TEMPLATES}, offering={BIG}) == {"s0": SMALL}


def test_fragmented_free_memory_is_not_offered():
    # 8 GiB free on each of two cards: 16 GiB in all, but no card takes a 16 GiB lab; an 8 GiB one fits.
    allocator, waiting, _ = decided([card(0, 75, 56 * GIB), card(1, 75, 56 * GIB)])
    assert smaller_offer(allocator, waiting[0][0], [TEMPLATES[0], TEMPLATES[4]]) is None
    assert smaller_offers(allocator, waiting, {1: TEMPLATES}, offering={BIG}) == {"s0": SMALL}


def test_nothing_is_offered_when_nothing_smaller_fits():
    allocator, waiting, _ = decided([card(0, 95, 62 * GIB)])
    assert waits_for_capacity(waiting[0][1])
    assert smaller_offers(allocator, waiting, {1: TEMPLATES}, offering={BIG}) == {}


def test_nothing_is_offered_to_a_session_queued_for_its_courses_quota():
    # The course's guarantee of 60 % AI Core holds 20 % already: the cards have room, the quota not.
    quota = CourseQuota(Resources(60, 64 * GIB, 10), sessions_per_student=1)
    allocator, waiting, _ = decided([card(0, 20, 4 * GIB, course=1), card(1, 0, 128)], quota=quota)
    assert waiting[0][1].code == "quota.core"
    assert smaller_offers(allocator, waiting, {1: TEMPLATES}, offering={BIG}) == {}


def test_nothing_is_offered_to_a_student_at_their_session_limit():
    allocator, waiting, _ = decided([card(0, 95, 62 * GIB)], held=1)
    assert waiting[0][1].code == "student.limit"
    assert smaller_offers(allocator, waiting, {1: TEMPLATES}, offering={BIG}) == {}


def test_nothing_is_offered_when_the_queued_template_has_offers_turned_off():
    allocator, waiting, _ = decided([card(0, 75, 52 * GIB)])
    assert smaller_offers(allocator, waiting, {1: TEMPLATES}, offering=set()) == {}


def test_every_session_of_the_template_is_offered_it_and_nothing_is_placed():
    allocator, waiting, _ = decided([card(0, 75, 52 * GIB)], students=3)
    before = allocator.cluster.usage_by_course()
    assert smaller_offers(allocator, waiting, {1: TEMPLATES}, offering={BIG}) == {"s0": SMALL, "s1": SMALL, "s2": SMALL}
    assert allocator.cluster.usage_by_course() == before


def test_only_the_courses_own_templates_are_offered():
    allocator, waiting, _ = decided([card(0, 75, 52 * GIB)])
    assert smaller_offers(allocator, waiting, {2: [template(SMALL, 20, 8 * GIB, course=2)]}, offering={BIG}) == {}
    with pytest.raises(ValueError, match="course 1"):
        smaller_offer(allocator, waiting[0][0], [template(SMALL, 20, 8 * GIB, course=2)])


def test_smaller_means_no_more_core_and_memory_and_less_of_one():
    queued = template(BIG, 50, 32 * GIB)
    assert is_smaller(template(TINY, 10, 4 * GIB), queued)
    assert is_smaller(template(TINY, 50, 4 * GIB), queued)
    assert not is_smaller(template(TINY, 50, 32 * GIB), queued)  # the same share
    assert not is_smaller(template(TINY, 60, 4 * GIB), queued)  # more AI Core
    assert not is_smaller(template(BIG, 10, 4 * GIB), queued)  # the queued template itself
    whole = LaunchRequest("w", 1, 0, 200, CARD_MIB, cards=2, template_id=9)
    assert is_smaller(template(TINY, 100, 64 * GIB), whole)


def test_capacity_reasons_are_the_clusters_not_the_quotas():
    assert waits_for_capacity(Reason.of("card.core", need_percent=50, best_free_percent=20, node="n1", card=0))
    assert waits_for_capacity(Reason.of("node.instances_cap", cap=128, nodes="n1"))
    assert not waits_for_capacity(Reason.of("quota.instances", used=3, limit=3))
    assert not waits_for_capacity(Reason.of("student.limit", held=1, limit=1))
    assert not waits_for_capacity(Reason.of("reclaim.returning", minutes=3))
