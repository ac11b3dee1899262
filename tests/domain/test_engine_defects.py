"""Engine defects found by an independent checker: each test failed before its fix."""

from __future__ import annotations

import pytest

from labs.domain.allocation import Allocator, Placed, Waiting, allocate
from labs.domain.placement import Cluster, Instance, PlacementConfig, ScoreWeights
from labs.domain.quota import CourseQuota, Resources
from tests.domain.test_engine import DEV, GIB, INF, UNLIMITED, cohort_quota, node, req


def whole(key, cards=2, memory=32 * GIB, **extra):
    return req(key, core=100 * cards, memory=memory, cards=cards, **extra)


def place(cluster, request, started_at=0.0):
    choice = cluster.choose(request)
    assert choice is not None
    cluster.commit(request, choice, started_at=started_at)


# --- 1. snapshots of multi-card instances -------------------------------------------------------


def test_a_multi_card_instance_survives_a_snapshot_round_trip():
    cluster = Cluster([node("a", cards=4)])
    place(cluster, whole("w", cards=3), started_at=5.0)
    place(cluster, req("s"))
    again = Cluster(cluster.snapshot())
    assert again.snapshot() == cluster.snapshot()
    assert again.usage_by_course() == cluster.usage_by_course()
    assert again.placement_of("w") == cluster.placement_of("w")


def test_releasing_a_multi_card_instance_from_a_snapshot_frees_every_card():
    cluster = Cluster([node("a", cards=4)])
    place(cluster, whole("w", cards=3))
    again = Cluster(cluster.snapshot())
    assert again.release("w")
    assert [(c.count, c.core_used, c.memory_used) for c in again.nodes[0].cards] == [(0, 0, 0)] * 4


# --- 2. the cap quoted is the cap that binds ------------------------------------------------------


def test_a_node_at_its_inference_cap_is_explained_with_64_not_128():
    full = {i: [Instance(1, 128, INF, key=f"i{i}-{j}") for j in range(8)] for i in range(8)}
    (decision,) = allocate([node("a", cards=9, instances=full)], [req("r")], {1: UNLIMITED}, {}, now=0)
    assert isinstance(decision, Waiting)
    assert "maximum of 64 instances" in str(decision.reason)


def test_a_card_at_its_inference_cap_is_explained_with_8_not_16():
    full = {0: [Instance(1, 128, INF, key=f"i{j}") for j in range(8)]}
    (decision,) = allocate([node("a", cards=1, instances=full)], [req("r")], {1: UNLIMITED}, {}, now=0)
    assert str(decision.reason) == "card instances: every healthy card holds its maximum of 8 instances"


# --- 3. node cap with multi-card requests -------------------------------------------------------


def test_a_multi_card_request_never_takes_a_node_over_its_instance_cap():
    # 63 inference instances on a 10-card node: two more would make 65 of 64.
    held = {i: [Instance(1, 128, INF, key=f"i{i}-{j}") for j in range(8 if i < 7 else 7)] for i in range(8)}
    cluster = Cluster([node("a", cards=10, instances=held)])
    allocator = Allocator(cluster, {1: UNLIMITED}, {}, now=0)
    (decision,) = allocator.decide([whole("w", scenario=INF)])
    cluster.check_invariants()
    assert isinstance(decision, Waiting)
    assert "node instances" in str(decision.reason)


# --- 4. binpack prefers a partly used card whatever the weights -------------------------------------


def test_binpack_with_zero_weights_still_fills_a_partly_used_card():
    busy = node("a", instances={3: [Instance(5, GIB, DEV)]})
    config = PlacementConfig(weights=ScoreWeights(0, 0, 0))
    (decision,) = allocate([busy], [req("r")], {1: UNLIMITED}, {}, now=0, config=config)
    assert decision.card_indices == (3,)


def test_binpack_counts_a_best_effort_instance_as_using_its_card():
    busy = node("a", instances={2: [Instance(0, 128, DEV)]})
    config = PlacementConfig(weights=ScoreWeights(instances=0, core=1, memory=0))
    (decision,) = allocate([busy], [req("r")], {1: UNLIMITED}, {}, now=0, config=config)
    assert decision.card_indices == (2,)


def test_binpack_across_nodes_with_zero_weights_prefers_the_node_with_a_partly_used_card():
    config = PlacementConfig(weights=ScoreWeights(0, 0, 0), index_min_nodes=0)
    nodes = [node("a"), node("b", instances={5: [Instance(0, 128, DEV)]})]
    (decision,) = allocate(nodes, [req("r")], {1: UNLIMITED}, {}, now=0, config=config)
    assert (decision.node, decision.card_indices) == ("b", (5,))


# --- 5. reclaim for whole-card requests -----------------------------------------------------------


def test_a_whole_card_request_inside_its_guarantee_gets_a_reclaim_plan():
    quotas = {1: cohort_quota(800, 10, per_student=9), 2: cohort_quota(0, 0, per_student=99)}
    borrowed = {
        0: [Instance(10, GIB, DEV, key="old0", course_id=2, started_at=0.0)],
        1: [Instance(10, GIB, DEV, key="old1", course_id=2, started_at=1.0)],
    }
    cluster = Cluster([node("a", cards=2, instances=borrowed)])
    allocator = Allocator(cluster, quotas, {}, now=10_000)
    (decision,) = allocator.decide([whole("mine", course=1)])
    assert isinstance(decision, Waiting) and decision.reclaim is not None
    assert decision.reclaim.victims == ("old1", "old0")
    for victim in decision.reclaim.victims:
        allocator.release(victim)
    (again,) = allocator.decide([whole("mine-again", course=1)])
    assert isinstance(again, Placed)


# --- 6. whole-card charges --------------------------------------------------------------------------


def test_a_whole_card_request_is_charged_all_the_memory_of_its_cards():
    cluster = Cluster([node("a", cards=4)])
    allocator = Allocator(cluster, {1: UNLIMITED}, {}, now=0)
    (decision,) = allocator.decide([whole("w", memory=32 * GIB)])
    assert isinstance(decision, Placed)
    assert allocator.ledger.usage[1] == Resources(200, 128 * GIB, 1)
    assert cluster.usage_by_course()[1] == (200, 128 * GIB, 1)
    assert allocator.release("w")
    assert allocator.ledger.usage[1] == Resources(0, 0, 0)


def test_a_whole_card_request_over_the_memory_guarantee_is_not_admitted():
    quota = CourseQuota(Resources(800, 100 * GIB, 10))  # 2 x 64 GiB cards exceed 100 GiB
    (decision,) = allocate([node("a", cards=4)], [whole("w", memory=32 * GIB)], {1: quota}, {}, now=0)
    assert not isinstance(decision, Placed)


# --- 7. release gives back the student's session slot ---------------------------------------------


def test_releasing_an_instance_gives_the_student_their_session_slot_back():
    quota = CourseQuota(Resources(100, 10**6, 10), sessions_per_student=1)
    allocator = Allocator(Cluster([node("a")]), {1: quota}, {}, now=0)
    assert isinstance(allocator.decide([req("first", student=7)])[0], Placed)
    assert allocator.release("first")
    assert isinstance(allocator.decide([req("second", student=7)])[0], Placed)


# --- 8. duplicate keys ------------------------------------------------------------------------------


def test_a_batch_with_a_key_twice_is_rejected():
    allocator = Allocator(Cluster([node("a")]), {1: UNLIMITED}, {}, now=0)
    with pytest.raises(ValueError, match="duplicate request key 'r'"):
        allocator.decide([req("r"), req("r")])
    assert not list(allocator.cluster.instances())


def test_a_request_whose_key_is_already_placed_is_rejected():
    allocator = Allocator(Cluster([node("a")]), {1: UNLIMITED}, {}, now=0)
    allocator.decide([req("r")])
    with pytest.raises(ValueError, match="'r' is already placed"):
        allocator.decide([req("r")])
    with pytest.raises(ValueError, match="'r' is already placed"):
        allocator.cluster.commit(req("r"), allocator.cluster.choose(req("r")))


def test_a_snapshot_naming_one_instance_twice_is_rejected():
    twice = {0: [Instance(5, GIB, DEV, key="x")], 1: [Instance(5, GIB, DEV, key="x")]}
    with pytest.raises(ValueError, match="'x'"):
        Cluster([node("a", instances=twice)])
