"""What ``make chaos`` runs: the class, its templates, the faults and the command line."""

from __future__ import annotations

import argparse
import contextlib
import random
import time
from collections.abc import Callable
from dataclasses import dataclass

from bench.chaos.report import MIN_IN_FLIGHT

CARD_MIB = 64 * 1024
CARDS_PER_NODE = 8
NODES = ("n1", "n2")
DEV_CARD_CAP, INFERENCE_CARD_CAP = 16, 8
DEV_NODE_CAP, INFERENCE_NODE_CAP = 128, 64
HOLDS = ("admitted", "starting", "running", "stopping")
IN_PROGRESS = ("admitted", "starting", "stopping")
TERMINAL = ("stopped", "failed")
INJECTED_MESSAGE = "chaos: injected instance failure"
DATABASE = "chaos"
# A student presses again this long after a 5xx or no answer, for at most RETRY_FOR seconds.
RETRY_AFTER, RETRY_FOR = 1.0, 20.0
# Sessions in flight beyond --min-in-flight before a fault lands: some settle while it is injected.
IN_FLIGHT_MARGIN = 10


@dataclass
class Landing:
    """When a fault lands on its burst (``Chaos.wait_to_land`` asks at every look at the ledger).

    Once every press is out and ``want`` sessions are in flight: at ``earliest`` (the first
    press plus ``--lead``), or sooner once half the presses are answered (the portal has
    committed those and the rest are still in its web tier: the middle of the burst, however fast
    the portal is). At once when the count falls past a peak of ``want``: a portal ends a burst's
    stops together, in one step, so waiting longer would leave only its launches in flight. At
    ``latest`` whatever the count.
    """

    want: int
    earliest: float
    latest: float
    last: int = 0
    peak: int = 0

    def lands(self, *, now: float, live: int, out: bool, half_answered: bool) -> bool:
        falling = out and live < self.last
        ready = out and (now >= self.earliest or half_answered) and (live >= self.want or falling)
        land = now >= self.latest or ready or falling and self.peak >= self.want
        self.last = live
        if out:
            self.peak = max(self.peak, live)
        return land


@dataclass(frozen=True)
class TemplatePlan:
    slug: str
    scenario: str
    core_percent: int
    memory_mib: int
    students: int  # students who use it
    first_fill: int  # of them, launched in the class start (on the first node)
    cap: str  # the per-card cap it reaches


TEMPLATES = (
    TemplatePlan("core", "development", 25, 8 * 1024, 25, 8, "AI Core 100 %"),
    TemplatePlan("memory", "development", 5, 16 * 1024, 25, 8, "memory 64 GiB"),
    TemplatePlan("small", "development", 5, 2 * 1024, 100, 32, "16 development instances"),
    TemplatePlan("inference", "inference", 10, 4 * 1024, 50, 16, "8 inference instances"),
)


@dataclass(frozen=True)
class FaultPlan:
    name: str
    launches: int  # idle students who press Launch in the burst it lands on
    stops: int  # running labs stopped in that burst (-1: every running lab)
    mid: tuple[int, int] | None  # launches and stops pressed half-way through it, while it holds
    summary: str
    lead: float | None = None  # latest it lands after the burst's first press unless half are answered (None: --lead)


FAULTS = (
    FaultPlan("control", 40, 40, None, "no fault: the burst alone, the floor of every target"),
    FaultPlan("driver", 40, 40, (15, 15), "the cluster API fails 30 % of creates and deletes and creates take 0.5 s, for 8 s"),
    FaultPlan("worker", 40, 40, (15, 15), "kill -9 of one Celery worker's process group, restarted after --down s"),
    FaultPlan("beat", 40, 40, (15, 15), "kill -9 of Celery beat, restarted after --down s"),
    FaultPlan("redis", 40, 40, (15, 15), "kill -9 of the Redis server, restarted empty on its port after --down s"),
    FaultPlan("postgres", 40, 40, (15, 15), "PostgreSQL stopped (fast shutdown), started again after --down s"),
    FaultPlan("backends", 40, 40, (15, 15), "pg_terminate_backend of every portal connection, every 0.2 s for 3 s"),
    FaultPlan("inject", 40, 40, None, "three running instances fail (inject_failure) as the burst lands"),
    FaultPlan("agent-pause", 40, 40, (15, 15), "node n1's agent stopped (SIGSTOP) for --agent-down s, then continued"),
    FaultPlan("agent-kill", 40, 40, (15, 15), "node n1's agent killed for --agent-down s, started again (it forgets)"),
    # The storm is the fault: it lands as its last stop is pressed.
    FaultPlan("storm", 0, -1, None, "every running lab stopped at once", lead=0.0),
)
FAULT_NAMES = tuple(f.name for f in FAULTS)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m bench.chaos", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--only", default="", metavar="FAULT[,FAULT]", help=f"run only these faults, in the usual order: {', '.join(FAULT_NAMES)}"
    )
    parser.add_argument("--quick", action="store_true", help="shorter outages (--down 2, --agent-down 6) for development")
    parser.add_argument(
        "--down", type=float, default=3.0, help="seconds a killed worker, beat, Redis or PostgreSQL stays down (3)"
    )
    parser.add_argument("--agent-down", type=float, default=12.0, help="seconds the node agent stays paused or dead (12)")
    parser.add_argument(
        "--lead",
        type=float,
        default=0.5,
        help="a fault lands this long after its burst's first press, s (0.5), or once half its presses are "
        f"answered if sooner; either way once --min-in-flight + {IN_FLIGHT_MARGIN} sessions are in flight, or as soon as fewer "
        "are than a moment before (before either too, once that many were), or at 3 s",
    )
    parser.add_argument("--settle-bound", type=float, default=30.0, help="longest wait for a fault's sessions to settle (30)")
    parser.add_argument("--start-delay", type=float, default=2.0, help="LAB_SIMULATOR_DELAY_SECONDS (2)")
    parser.add_argument("--controller-seconds", type=float, default=1.0, help="LAB_CONTROLLER_SECONDS (1)")
    parser.add_argument("--reconcile-seconds", type=float, default=5.0, help="RECONCILE_SECONDS (5)")
    parser.add_argument("--threads", type=int, default=96, help="client threads pressing launch and stop (96)")
    parser.add_argument(
        "--min-in-flight",
        type=int,
        default=MIN_IN_FLIGHT,
        help=f"sessions starting or stopping a fault must meet ({MIN_IN_FLIGHT}; lower only while developing)",
    )
    parser.add_argument("--seed", type=int, default=None, help="random seed (default: random, printed)")
    parser.add_argument("--keep", action="store_true", help="keep the run's directory (logs) even when it passes")
    args = parser.parse_args(argv)
    chosen = [name.strip() for name in args.only.split(",") if name.strip()]
    unknown = [name for name in chosen if name not in FAULT_NAMES]
    if unknown:
        parser.error(f"--only: unknown fault(s) {', '.join(unknown)}; choose from {', '.join(FAULT_NAMES)}")
    args.faults = [f for f in FAULTS if not chosen or f.name in chosen]
    if args.quick:
        if args.down == parser.get_default("down"):
            args.down = 2.0
        if args.agent_down == parser.get_default("agent_down"):
            args.agent_down = 6.0
    if args.down <= 0 or args.agent_down <= 0 or args.lead < 0 or args.threads < 1:
        parser.error("--down and --agent-down must be positive, --lead >= 0, --threads >= 1")
    if args.seed is None:
        args.seed = random.SystemRandom().randrange(1 << 30)
    return args


T0 = time.monotonic()


def say(message: str) -> None:
    print(f"[{time.monotonic() - T0:6.1f} s] {message}", flush=True)


def wait_until(predicate: Callable[[], object], timeout: float, interval: float = 0.1) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with contextlib.suppress(Exception):
            if predicate():
                return True
        time.sleep(interval)
    return False
