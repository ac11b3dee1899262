"""``make bench``: placements per second of the allocation engine beside the naive reference.

(a) one 8-card 910B server filled to its 128 instances by a class of "small" (5 %, 4 GiB)
    launches, emptied, and filled again, repeatedly;
(b) 1,000 nodes x 8 cards with a mixed template stream and stops, from a cluster already about
    two-thirds full.

Each case runs the engine (``labs.domain.allocation.Allocator`` over ``Cluster``: quota
admission, placement, bookkeeping) and the naive full-scan reference (``bench/naive.py``) on the
same requests in the same run, checks that both made the same placements, and prints both rates
and their ratio. Targets on one core: (a) >= 50,000/s; (b) >= 5,000/s and >= 20x the naive scan.
"""

from __future__ import annotations

import argparse
import gc
import random
import statistics
import time

from bench.naive import NaiveCluster
from labs.domain.allocation import Allocator, Placed
from labs.domain.placement import CardCapacity, Cluster, LaunchRequest, NodeCapacity
from labs.domain.quota import CourseQuota, Resources
from labs.domain.units import Scenario

GIB = 1024
UNLIMITED = {c: CourseQuota(Resources(10**9, 10**12, 10**9), sessions_per_student=10**9) for c in range(1, 9)}
TEMPLATES = [  # (core %, memory MiB, scenario, weight)
    (5, 4 * GIB, Scenario.DEVELOPMENT, 40),
    (10, 8 * GIB, Scenario.DEVELOPMENT, 30),
    (25, 16 * GIB, Scenario.DEVELOPMENT, 10),
    (20, 16 * GIB, Scenario.INFERENCE, 15),
    (50, 32 * GIB, Scenario.INFERENCE, 5),
]


def server(name: str, cards: int = 8) -> NodeCapacity:
    return NodeCapacity(name, tuple(CardCapacity(hash((name, i)) & 0x7FFFFFFF, i, 64 * GIB) for i in range(cards)))


def small_class(prefix: str, n: int = 128) -> list[LaunchRequest]:
    return [LaunchRequest(f"{prefix}-{i}", 1, i, 5, 4 * GIB) for i in range(n)]


def case_a(rounds: int) -> tuple[float, float, float]:
    """Fill one server with 128 instances and empty it, ``rounds`` times.

    Returns placements per second counting only the fills (``decide`` on the class's batch),
    the same counting fills and empties, and the naive scan's placements per second (fills only).
    """
    cluster = Cluster([server("npu-1")])
    allocator = Allocator(cluster, UNLIMITED, {}, now=0.0)
    batches = [small_class(f"r{r}") for r in range(rounds)]
    placed = 0
    placing = 0.0
    gc.disable()
    started = time.perf_counter()
    for batch in batches:
        fill_started = time.perf_counter()
        decisions = allocator.decide(batch)
        placing += time.perf_counter() - fill_started
        placed += sum(1 for d in decisions if type(d) is Placed)
        for request in batch:
            allocator.release(request.key)  # gives back the quota and the student's session slot
    cycle = time.perf_counter() - started
    gc.enable()
    assert placed == 128 * rounds, placed

    naive = NaiveCluster([server("npu-1")])
    naive_rounds = max(1, rounds // 20)
    naive_placing = 0.0
    for batch in batches[:naive_rounds]:
        fill_started = time.perf_counter()
        for request in batch:
            assert naive.place(request) is not None
        naive_placing += time.perf_counter() - fill_started
        for request in batch:
            naive.release(request.key)
    return placed / placing, placed / cycle, 128 * naive_rounds / naive_placing


def mixed_stream(rng: random.Random, n: int, prefix: str) -> list[tuple[str, LaunchRequest | None]]:
    """``n`` operations: a launch of a random template, or (one in three) a stop of a random live one."""
    weights = [t[3] for t in TEMPLATES]
    ops: list[tuple[str, LaunchRequest | None]] = []
    for i in range(n):
        if i % 3 == 2:
            ops.append(("stop", None))
        else:
            core, memory, scenario, _ = rng.choices(TEMPLATES, weights)[0]
            ops.append(("launch", LaunchRequest(f"{prefix}{i}", 1 + i % 8, i, core, memory, scenario)))
    return ops


def case_b(nodes: int, operations: int, naive_operations: int, seed: int) -> dict[str, float]:
    rng = random.Random(seed)
    # Fill to about two-thirds with the same template mix, then snapshot: both placers start there.
    filler = Cluster([server(f"node-{i:04d}") for i in range(nodes)])
    fill = Allocator(filler, UNLIMITED, {}, now=0.0)
    target = nodes * 128 * 2 // 3 // 2  # instances, given the mix's mean size
    for _, request in mixed_stream(rng, target * 3 // 2, "fill"):
        if request is not None:
            fill.decide([request])
    snapshot = filler.snapshot()
    live_at_start = [key for key, _, _ in filler.instances()]
    ops = mixed_stream(rng, operations, "op")

    def run(placer_place, placer_release, ops_slice) -> tuple[int, float, list]:
        live = list(live_at_start)
        pick = random.Random(seed + 1)
        placements = []
        gc.disable()
        started = time.perf_counter()
        for kind, request in ops_slice:
            if kind == "stop":
                if live:
                    key = live.pop(pick.randrange(len(live)))
                    placer_release(key)
            else:
                where = placer_place(request)
                placements.append(where)
                if where is not None:
                    live.append(request.key)
        elapsed = time.perf_counter() - started
        gc.enable()
        return sum(1 for p in placements if p is not None), elapsed, placements

    cluster = Cluster(snapshot)
    allocator = Allocator(cluster, UNLIMITED, {}, now=0.0)

    def engine_place(request):
        (decision,) = allocator.decide([request])
        if type(decision) is Placed:
            return decision.node, decision.card_indices[0]
        return None

    def engine_release(key):
        allocator.release(key)

    placed, seconds, engine_placements = run(engine_place, engine_release, ops)
    cluster.check_invariants()

    # The same first operations through the engine (fresh, from the snapshot) and the naive scan.
    cluster = Cluster(snapshot)
    allocator = Allocator(cluster, UNLIMITED, {}, now=0.0)
    prefix_placed, prefix_seconds, prefix_engine = run(engine_place, engine_release, ops[:naive_operations])
    naive = NaiveCluster(snapshot)
    naive_placed, naive_seconds, naive_placements = run(naive.place, naive.release, ops[:naive_operations])
    assert prefix_engine == naive_placements, "the engine and the naive scan placed differently"
    return {
        "engine_rate": placed / seconds,
        "placed": placed,
        "prefix_engine_rate": prefix_placed / prefix_seconds,
        "naive_rate": naive_placed / naive_seconds,
        "naive_placed": naive_placed,
        "failed_share": 1 - placed / sum(1 for kind, _ in ops if kind == "launch"),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=400, help="case (a): fills of the server")
    parser.add_argument("--nodes", type=int, default=1000, help="case (b): nodes of 8 cards")
    parser.add_argument("--operations", type=int, default=60_000, help="case (b): launches and stops")
    parser.add_argument("--naive-operations", type=int, default=1_500, help="case (b): operations for the naive scan")
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()

    a_engine, a_cycle, a_naive = zip(*(case_a(args.rounds) for _ in range(args.repeat)), strict=True)
    a_rate, a_cycle_rate, a_naive_rate = (statistics.median(x) for x in (a_engine, a_cycle, a_naive))
    print(f"(a) one 8-card server, 128 small instances per fill, {args.rounds} fills, median of {args.repeat}:")
    print(f"    engine {a_rate:,.0f} placements/s   naive scan {a_naive_rate:,.0f}/s   ratio {a_rate / a_naive_rate:.1f}x")
    print(f"    (fills and the stops that empty the server between them, timed together: {a_cycle_rate:,.0f} placements/s)")
    print(f"    target >= 50,000/s: {'met' if a_rate >= 50_000 else 'NOT MET'}")

    b = case_b(args.nodes, args.operations, args.naive_operations, seed=7)
    ratio = b["prefix_engine_rate"] / b["naive_rate"]
    print(f"(b) {args.nodes} nodes x 8 cards, mixed templates, {args.operations:,} launches and stops from ~2/3 full:")
    print(
        f"    engine {b['engine_rate']:,.0f} placements/s "
        f"({b['placed']:,} placed, {b['failed_share']:.1%} of launches found no room)"
    )
    print(
        f"    same first {args.naive_operations:,} operations: engine {b['prefix_engine_rate']:,.0f}/s, "
        f"naive scan {b['naive_rate']:,.0f}/s, ratio {ratio:.0f}x (identical placements)"
    )
    met = b["engine_rate"] >= 5_000 and ratio >= 20
    print(f"    target >= 5,000/s and >= 20x naive: {'met' if met else 'NOT MET'}")


if __name__ == "__main__":
    main()
