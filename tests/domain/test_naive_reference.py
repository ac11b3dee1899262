"""The benchmark's naive reference and the engine choose the same cards: the ratio compares like with like."""

import random

from hypothesis import given, settings
from hypothesis import strategies as st

from bench.naive import NaiveCluster
from labs.domain.placement import (
    CardCapacity,
    Cluster,
    LaunchRequest,
    NodeCapacity,
    PlacementConfig,
    Policy,
    ScoreWeights,
    SharePolicy,
)
from labs.domain.units import Scenario

TEMPLATES = [
    (5, 4096, Scenario.DEVELOPMENT),
    (10, 8192, Scenario.DEVELOPMENT),
    (25, 16384, Scenario.INFERENCE),
    (50, 32768, Scenario.INFERENCE),
]


@settings(max_examples=25, deadline=None)
@given(
    seed=st.integers(0, 2**32 - 1),
    node_policy=st.sampled_from(list(Policy)),
    card_policy=st.sampled_from(list(Policy)),
    weights=st.sampled_from([(1, 1, 1), (0, 0, 0), (0, 1, 0), (3, 0, 1)]),
)
def test_the_naive_scan_places_exactly_like_the_engine(seed, node_policy, card_policy, weights):
    rng = random.Random(seed)
    nodes = [
        NodeCapacity(f"n{i}", tuple(CardCapacity(i * 100 + c, c, rng.choice([32768, 65536])) for c in range(rng.randint(1, 8))))
        for i in range(rng.randint(1, 30))
    ]
    config = PlacementConfig(node_policy=node_policy, card_policy=card_policy, weights=ScoreWeights(*weights))
    engine = Cluster(nodes, config)
    naive = NaiveCluster(nodes, config)
    live = []
    for step in range(300):
        if live and rng.random() < 0.3:
            key = live.pop(rng.randrange(len(live)))
            assert engine.release(key) and naive.release(key)
            continue
        if rng.random() < 0.1:  # best-effort: no floor, but it uses its card all the same
            request = LaunchRequest(f"s{step}", 1, step, 0, 1024, Scenario.DEVELOPMENT, share_policy=SharePolicy.BEST_EFFORT)
        else:
            core, memory, scenario = rng.choice(TEMPLATES)
            request = LaunchRequest(f"s{step}", 1, step, core, memory, scenario)
        choice = engine.choose(request)
        expected = naive.place(request)
        assert (None if choice is None else (choice.node.name, choice.cards[0].index)) == expected
        if choice is not None:
            engine.commit(request, choice)
            live.append(request.key)
