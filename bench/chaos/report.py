"""What ``make chaos`` (``bench/chaos/``) judges and prints: the targets, each fault's figures, the verdict.

Pure: no process, no database, no clock. ``bench.chaos`` measures a class under fire and hands
the measurements here as ``Item`` records (one student's launch or stop, every press of it with
its HTTP status, and what the ledger says became of it); this module turns them into a fault's
figures, judges them against the targets below and prints the table. The rules are tested on
their own in ``tests/bench/test_chaos_report.py``.

Every target gates the run: a missed latency fails it like a lost session does.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field

from bench.harness import percentile

# Sessions starting or stopping (pressed and not yet running, or not yet ended) when a fault lands.
MIN_IN_FLIGHT = 50


@dataclass(frozen=True)
class Target:
    """A fault's latency targets in seconds: the p99 of launch -> running and of stop -> ended over
    the launches and stops made while it lasted (the first press to the ledger's ``running_at``
    or ``ended_at``), and the settle time: from the fault clearing to the last of those
    sessions running or ended."""

    start_p99: float
    stop_p99: float
    settle: float


# The targets, one row per fault (``bench.chaos.plan.FAULTS`` says what each does). Every burst is 80
# launches and stops pressed at once on 2 cores, labs starting 2 s after their create, so
# "control" (the burst with no fault: about 4 s to running and 2 s to ended at p99 on the
# project's machine) sets the floor: 8 s to running, 5 s to ended. A fault that leaves the work
# a way round keeps that floor: another worker, beat's ticks being only a backstop, a
# reconnect, the other node (the paused or killed agent's targets are its healthy node's:
# that node must not wait for the hung one, issue 26 item 3). A fault that stops all work
# for ``--down`` (3 s: Redis, PostgreSQL) adds it; the flaky cluster API (30 % of creates and
# deletes failing, creates taking 0.5 s) adds its retries: a create that fails three times in a
# row (0.3³, about 3 % of them: inside the p99) waits up to 1 s of back-off and a controller
# period after each, so 15 s to running and 10 s to ended (11.3 s and 6.8 s were seen). A
# server ending every connection every 0.2 s cuts a request again in its retry (up to 3 runs,
# ``portal.middleware.LostConnectionRetry``): 10 s and 7 s (6.9 s and 4.3 s were seen). Settle, from the clear: 5 s where
# work waited for the fault (one simulated start and 3 s to pick up the backlog; issue 26
# item 5: work back within 2 s of Redis), 6 s after PostgreSQL, whose restart every process's
# pool must reconnect from; 8 s where the fault is a moment (control, inject, storm) and the
# whole burst is still in flight when it clears.
TARGETS: dict[str, Target] = {
    "control": Target(start_p99=8.0, stop_p99=5.0, settle=8.0),
    "driver": Target(start_p99=15.0, stop_p99=10.0, settle=8.0),
    "worker": Target(start_p99=8.0, stop_p99=5.0, settle=5.0),
    "beat": Target(start_p99=8.0, stop_p99=5.0, settle=5.0),
    "redis": Target(start_p99=11.0, stop_p99=8.0, settle=5.0),
    "postgres": Target(start_p99=11.0, stop_p99=8.0, settle=6.0),
    "backends": Target(start_p99=10.0, stop_p99=7.0, settle=5.0),
    "inject": Target(start_p99=8.0, stop_p99=5.0, settle=8.0),
    "agent-pause": Target(start_p99=8.0, stop_p99=5.0, settle=5.0),
    "agent-kill": Target(start_p99=8.0, stop_p99=5.0, settle=5.0),
    "storm": Target(start_p99=8.0, stop_p99=5.0, settle=8.0),
}


@dataclass(frozen=True)
class Press:
    """One HTTP request of a student: sent and answered (``time.time()``), the status (0: no answer)."""

    sent: float
    answered: float
    status: int

    @property
    def server_error(self) -> bool:
        return self.status >= 500


@dataclass
class Item:
    """One student's launch or stop, every press of it, and what the ledger made of it.

    ``committed_at``: when the launch's session was created, or the stop took effect (the
    session's ``stopping_at``, or ``ended_at`` for a session that ended at once). ``done_at``:
    when the student got what they asked for, ``running_at`` of a launch or ``ended_at`` of a
    stop; for a launch that ended before running, its ``ended_at`` (it is done, as a failure).
    ``expected_failure``: the fault itself was meant to fail it (a create that failed every try
    in the driver fault's window, an instance failed on purpose).
    """

    kind: str  # "launch" or "stop"
    student: int
    presses: list[Press]
    session_id: str | None = None
    committed_at: float | None = None
    done_at: float | None = None
    running: bool = False  # a launch whose session reached running
    ended: bool = False  # the session ended (stopped or failed)
    refused: str = ""  # the last answer's error when the portal refused (4xx) without a session
    node: str = ""
    expected_failure: bool = False

    @property
    def first_sent(self) -> float:
        return self.presses[0].sent

    @property
    def answered(self) -> float:
        return self.presses[-1].answered

    @property
    def succeeded(self) -> bool:
        """The student got what they asked for: a running lab, or an ended one."""
        return self.running if self.kind == "launch" else self.ended

    @property
    def latency(self) -> float | None:
        """First press to running (launch) or ended (stop); ``None`` if that never happened."""
        if not self.succeeded or self.done_at is None:
            return None
        return self.done_at - self.first_sent

    def settled_at(self) -> float | None:
        """When nothing more was to happen to it: ``done_at``, or the answer of a refused press."""
        if self.done_at is not None:
            return self.done_at
        if self.refused or (self.kind == "launch" and self.session_id is None and self.presses):
            return self.answered
        return None

    def in_flight_at(self, moment: float) -> bool:
        """Pressed by ``moment`` and not yet settled then."""
        settled = self.settled_at()
        return self.first_sent <= moment and (settled is None or settled > moment)


def in_flight_at(items: Iterable[Item], moment: float) -> int:
    return sum(1 for item in items if item.in_flight_at(moment))


def server_errors(items: Iterable[Item]) -> int:
    """Presses answered with a 5xx."""
    return sum(1 for item in items for press in item.presses if press.server_error)


def no_answers(items: Iterable[Item]) -> int:
    """Presses that got no answer at all (connection refused or reset, timed out)."""
    return sum(1 for item in items for press in item.presses if press.status == 0)


def committed_behind_500(items: Iterable[Item]) -> int:
    """Presses answered 5xx although what they asked for was committed meanwhile: the student was
    told it failed, and it happened (the launch's session was created, the stop took effect,
    between sending the press and its answer)."""
    count = 0
    for item in items:
        if item.committed_at is None:
            continue
        count += sum(1 for p in item.presses if p.server_error and p.sent <= item.committed_at <= p.answered)
    return count


def failed(items: Iterable[Item]) -> list[Item]:
    """What the student asked for and did not get, unless the fault was meant to do that: a launch
    without a session (refused, or no press answered), or whose session ended before running; a
    stop refused. Pending ones are stuck, not failed."""
    out = []
    for item in items:
        if item.expected_failure or item.succeeded:
            continue
        if item.kind == "launch" and (item.ended or item.session_id is None and item.settled_at() is not None):
            out.append(item)
        elif item.kind == "stop" and item.refused:
            out.append(item)
    return out


def pending(items: Iterable[Item]) -> list[Item]:
    """Not settled: neither done nor refused (stuck, once the settle bound has passed)."""
    return [item for item in items if item.settled_at() is None]


def p99(values: Sequence[float]) -> float | None:
    return percentile(values, 99) if values else None


def settle_after(items: Iterable[Item], cleared: float) -> tuple[int, float | None]:
    """``(sessions in flight when the fault cleared, seconds until the last of them settled)``.

    The seconds are ``None`` when nothing was in flight then (nothing to settle: not a zero)
    or when one of them never settled (stuck).
    """
    caught = [item for item in items if item.in_flight_at(cleared)]
    if not caught:
        return 0, None
    moments = [item.settled_at() for item in caught]
    if any(moment is None for moment in moments):
        return len(caught), None
    return len(caught), max(moments) - cleared


@dataclass
class FaultFigures:
    """One fault's row of the report."""

    name: str
    title: str
    in_flight: int  # sessions starting or stopping when it was injected
    launches: int
    stops: int
    failed: int
    stuck: int
    lost: int  # running labs that ended without their student asking
    leaked: int  # instances or registrations without a live session, allocations not released
    server_errors: int
    no_answers: int
    committed_behind_500: int
    start_p99: float | None
    stop_p99: float | None
    caught_at_clear: int  # sessions still in flight when it cleared
    settle: float | None  # None: nothing in flight at the clear, or not settled (then stuck > 0)
    violations: int  # ledger invariant violations seen while it lasted and settled
    notes: list[str] = field(default_factory=list)

    @property
    def sessions(self) -> int:
        return self.launches + self.stops


def fault_figures(
    name: str,
    title: str,
    items: Sequence[Item],
    *,
    injected: float,
    cleared: float,
    measured: Callable[[Item], bool] = lambda item: True,
    lost: int = 0,
    leaked: int = 0,
    stuck_elsewhere: int = 0,
    violations: int = 0,
    notes: Sequence[str] = (),
) -> FaultFigures:
    """The row of a fault whose class (``items``) was in flight when it was ``injected``.

    ``measured`` picks the items whose latency is judged "during" the fault (the paused agent's:
    those of the healthy node); every item counts for errors, failures and the settle time.
    ``stuck_elsewhere``: sessions outside the class found stuck (admitted, starting or stopping
    too long) after it settled.
    """
    _, settle = settle_after(items, cleared)
    caught = sum(1 for item in items if item.in_flight_at(cleared))
    starts = [item.latency for item in items if item.kind == "launch" and measured(item) and item.latency is not None]
    stops = [item.latency for item in items if item.kind == "stop" and measured(item) and item.latency is not None]
    return FaultFigures(
        name=name,
        title=title,
        in_flight=in_flight_at(items, injected),
        launches=sum(1 for item in items if item.kind == "launch"),
        stops=sum(1 for item in items if item.kind == "stop"),
        failed=len(failed(items)),
        stuck=len(pending(items)) + stuck_elsewhere,
        lost=lost,
        leaked=leaked,
        server_errors=server_errors(items),
        no_answers=no_answers(items),
        committed_behind_500=committed_behind_500(items),
        start_p99=p99(starts),
        stop_p99=p99(stops),
        caught_at_clear=caught,
        settle=settle,
        violations=violations,
        notes=list(notes),
    )


@dataclass(frozen=True)
class Check:
    what: str
    passed: bool
    detail: str


def _latency_check(what: str, value: float | None, target: float, expected: int) -> Check:
    if value is None:
        if expected:
            return Check(f"{what} p99 <= {target:g} s", False, f"none of {expected} reached it")
        return Check(f"{what} p99 <= {target:g} s", True, "none asked for in this fault")
    return Check(f"{what} p99 <= {target:g} s", value <= target, f"{value:.2f} s")


def fault_checks(f: FaultFigures, target: Target, *, min_in_flight: int = MIN_IN_FLIGHT) -> list[Check]:
    """Every target of one fault; each is gating."""
    checks = [
        Check(f"in flight >= {min_in_flight} when it landed", f.in_flight >= min_in_flight, f"{f.in_flight}"),
        Check("no 5xx", f.server_errors == 0, f"{f.server_errors}"),
        Check("every press answered", f.no_answers == 0, f"{f.no_answers} without an answer"),
        Check("no 5xx for what was committed", f.committed_behind_500 == 0, f"{f.committed_behind_500}"),
        Check("nothing failed", f.failed == 0, f"{f.failed}"),
        Check("nothing stuck", f.stuck == 0, f"{f.stuck}"),
        Check("nothing lost", f.lost == 0, f"{f.lost}"),
        Check("nothing leaked", f.leaked == 0, f"{f.leaked}"),
        Check("ledger invariants held", f.violations == 0, f"{f.violations} violations"),
        _latency_check("start", f.start_p99, target.start_p99, f.launches),
        _latency_check("stop", f.stop_p99, target.stop_p99, f.stops),
    ]
    if f.caught_at_clear == 0:
        checks.append(Check(f"settle <= {target.settle:g} s", True, "nothing in flight when it cleared"))
    elif f.settle is None:
        checks.append(Check(f"settle <= {target.settle:g} s", False, f"{f.caught_at_clear} in flight never settled"))
    else:
        checks.append(Check(f"settle <= {target.settle:g} s", f.settle <= target.settle, f"{f.settle:.2f} s"))
    return checks


def _seconds(value: float | None, target: float, *, caught: int | None = None) -> str:
    if value is None:
        return "-" if caught == 0 or caught is None else "NEVER"
    mark = "" if value <= target else "!"
    return f"{value:.2f}{mark}/{target:g}"


COLUMNS = (
    ("fault", 12),
    ("in flight", 9),
    ("sessions", 8),
    ("failed", 6),
    ("stuck", 5),
    ("lost", 4),
    ("leaked", 6),
    ("5xx", 4),
    ("500 committed", 13),
    ("start p99/target s", 18),
    ("stop p99/target s", 17),
    ("settle/target s", 15),
    ("verdict", 7),
)


def fault_table(rows: Sequence[tuple[FaultFigures, Target, list[Check]]]) -> list[str]:
    """The per-fault table: one line a fault; ``!`` marks a missed latency target."""
    header = "  ".join(f"{name:>{width}}" if i else f"{name:<{width}}" for i, (name, width) in enumerate(COLUMNS))
    lines = [header]
    for f, target, checks in rows:
        values = (
            f.name,
            f.in_flight,
            f"{f.launches}+{f.stops}",
            f.failed,
            f.stuck,
            f.lost,
            f.leaked,
            f.server_errors + f.no_answers,
            f.committed_behind_500,
            _seconds(f.start_p99, target.start_p99),
            _seconds(f.stop_p99, target.stop_p99),
            _seconds(f.settle, target.settle, caught=f.caught_at_clear),
            "PASS" if all(c.passed for c in checks) else "FAIL",
        )
        lines.append(
            "  ".join(
                f"{v!s:>{width}}" if i else f"{v!s:<{width}}"
                for i, (v, (_, width)) in enumerate(zip(values, COLUMNS, strict=True))
            )
        )
    return lines


def verdict(checks: Iterable[Check]) -> bool:
    """PASS only when every check passed (latency targets included)."""
    checks = list(checks)
    return bool(checks) and all(c.passed for c in checks)
