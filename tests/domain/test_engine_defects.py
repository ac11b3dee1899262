"""Engine defects found by an independent checker: each test failed before its fix."""

from __future__ import annotations

from labs.domain.allocation import allocate
from labs.domain.placement import Instance, PlacementConfig, ScoreWeights
from tests.domain.test_engine import DEV, GIB, UNLIMITED, node, req

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
