"""Engine defects found by an independent checker: each test failed before its fix."""

from __future__ import annotations

from labs.domain.allocation import Allocator, Waiting, allocate
from labs.domain.placement import Cluster, Instance, PlacementConfig, ScoreWeights
from tests.domain.test_engine import DEV, GIB, INF, UNLIMITED, node, req


def whole(key, cards=2, memory=32 * GIB, **extra):
    return req(key, core=100 * cards, memory=memory, cards=cards, **extra)


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
