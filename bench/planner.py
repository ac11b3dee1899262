"""The term capacity planner's time: a term of 15 weeks, 40 weekly class reservations, 1,000 nodes.

    .venv/bin/python -m bench.planner [--nodes 1000] [--weeks 15] [--reservations 40] [--repeat 3]

The cluster: ``--nodes`` servers of 8 cards (four in five 910B of 64 GiB, one in five 310P of
48 GiB), every card healthy. The term: ``--weeks`` weeks from a Monday, every hour of it (15 x
168 = 2,520 hours). On it: ``--reservations`` weekly classes (20 to 60 students, 5 %/4 GiB,
10 %/8 GiB or 25 %/16 GiB, two hours on a weekday between 08:00 and 18:00, every week of the term),
200 courses with guarantees, and the usual self-paced use of those courses learnt from eight past
weeks of synthetic ledger spans (``usual_use``: the 90th percentile of each hour of the week).

Timed: ``usual_use`` over the spans and ``plan_hours`` over the term (the median of ``--repeat``
runs each), the whole term placed on the engine (``labs.domain.planner``). The baseline, measured
in the same run: the same term on a tenth of the nodes. Printed: both times and their ratio (the
cost of ten times the cluster), hours placed against hours in the term (the memo of identical
hours), and PASS/FAIL against the target: the planner for the term at 1,000 nodes in <= 2 s.
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import time
from datetime import datetime, timedelta
from zoneinfo import ZoneInfo

from labs.domain.placement import CardCapacity, NodeCapacity
from labs.domain.planner import HOURS_PER_WEEK, Booking, PastSpan, lab_shape, plan_hours, usual_use
from labs.domain.quota import Resources

ZONE = ZoneInfo("Asia/Shanghai")
MONDAY = datetime(2027, 3, 1, tzinfo=ZONE)
GIB = 1024
SHAPES = [lab_shape(5, 4 * GIB), lab_shape(10, 8 * GIB), lab_shape(25, 16 * GIB)]
COURSES = 200
HISTORY_WEEKS = 8
TARGET_SECONDS = 2.0


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--nodes", type=int, default=1000)
    parser.add_argument("--weeks", type=int, default=15)
    parser.add_argument("--reservations", type=int, default=40)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--seed", type=int, default=1)
    return parser.parse_args(argv)


def cluster(nodes: int) -> list[NodeCapacity]:
    out = []
    for n in range(nodes):
        chip, memory = ("Ascend310P", 48 * GIB) if n % 5 == 4 else ("Ascend910B", 64 * GIB)
        out.append(NodeCapacity(f"n{n:04d}", tuple(CardCapacity(n * 8 + i, i, memory, chip_type=chip) for i in range(8))))
    return out


def term(args: argparse.Namespace, rng: random.Random) -> tuple[list[datetime], list[Booking], list[PastSpan], dict]:
    hours = [MONDAY + timedelta(hours=h) for h in range(args.weeks * HOURS_PER_WEEK)]
    bookings = []
    for r in range(args.reservations):
        course = rng.randrange(COURSES)
        shape = rng.choice(SHAPES)
        count = rng.randrange(20, 61)
        weekday, hour = rng.randrange(5), rng.randrange(8, 17)
        for week in range(args.weeks):
            start = MONDAY + timedelta(days=7 * week + weekday, hours=hour)
            bookings.append(Booking(course, start, start + timedelta(hours=2), shape, count, (r, week)))
    spans = []
    past = MONDAY - timedelta(weeks=HISTORY_WEEKS)
    for week in range(HISTORY_WEEKS):
        for _ in range(4000):
            course = rng.randrange(COURSES)
            start = past + timedelta(weeks=week, days=rng.randrange(7), hours=rng.randrange(8, 22), minutes=rng.randrange(60))
            spans.append(PastSpan(course, start, start + timedelta(minutes=rng.randrange(20, 180)), rng.choice(SHAPES)))
    guarantees = {c: Resources(100, 32 * GIB, 4) for c in range(COURSES)}
    return hours, bookings, spans, guarantees


def timed(repeat: int, work) -> tuple[float, object]:
    times = []
    result = None
    for _ in range(repeat):
        started = time.process_time()
        result = work()
        times.append(time.process_time() - started)
    return statistics.median(times), result


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    rng = random.Random(args.seed)
    hours, bookings, spans, guarantees = term(args, rng)
    weeks = [MONDAY - timedelta(weeks=w) for w in range(HISTORY_WEEKS, 0, -1)]
    usual_seconds, usual = timed(args.repeat, lambda: usual_use(spans, weeks=weeks))
    results = {}
    for nodes in (args.nodes // 10, args.nodes):
        snapshot = cluster(nodes)

        def work(snapshot=snapshot):
            return plan_hours(snapshot, hours, bookings=bookings, usual=usual, guarantees=guarantees)

        seconds, plan = timed(args.repeat, work)
        short = sum(1 for h in plan.hours if not h.fits)
        results[nodes] = seconds
        print(
            f"planner: {args.weeks} weeks ({len(hours):,} hours) x {args.reservations} reservations ({len(bookings)} slots) "
            f"x {nodes:,} nodes ({nodes * 8:,} cards): median {seconds:.3f} s of {args.repeat}; "
            f"{plan.evaluated} distinct hours placed, {short} hours short",
            flush=True,
        )
    print(f"usual use from {len(spans):,} ledger spans of {HISTORY_WEEKS} weeks (p90 per hour of week): {usual_seconds:.3f} s")
    big, small = results[args.nodes], results[args.nodes // 10]
    total = big + usual_seconds
    print(f"ratio {args.nodes:,} nodes / {args.nodes // 10:,} nodes (baseline, same term, same run): {big / small:.1f}x")
    verdict = "PASS" if total <= TARGET_SECONDS else "FAIL"
    print(f"target: the term at {args.nodes:,} nodes (usual use + plan) <= {TARGET_SECONDS:.0f} s: {total:.3f} s {verdict}")
    return 0 if verdict == "PASS" else 1


if __name__ == "__main__":
    sys.exit(main())
