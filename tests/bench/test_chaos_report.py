"""``make chaos``'s judging and report (bench/chaos/report.py) and its command line; not the run itself.

The run (bench/chaos/) is minutes of real processes under faults, run by CI after ``make test``;
here are the rules it judges by: what counts as in flight, a 5xx for what was committed, a
settle time, and that every missed target, latency included, fails the run.
"""

from __future__ import annotations

import pytest

from bench.chaos.plan import FAULT_NAMES, parse_args
from bench.chaos.report import (
    MIN_IN_FLIGHT,
    TARGETS,
    FaultFigures,
    Item,
    Press,
    Target,
    committed_behind_500,
    failed,
    fault_checks,
    fault_figures,
    fault_table,
    in_flight_at,
    settle_after,
    verdict,
)

TARGET = Target(start_p99=6.0, stop_p99=4.0, settle=5.0)


def launch(
    sent: float, running: float | None, *, statuses=(201,), committed: float | None = None, session: bool = True, student: int = 0
) -> Item:
    """A launch pressed at ``sent`` (again a second after each 5xx) whose session runs at ``running`` (None: not yet)."""
    presses = [Press(sent + i, sent + i + 0.2, status) for i, status in enumerate(statuses)]
    created = sent + 0.1 if committed is None else committed
    return Item("launch", student, presses, session_id="s" if session else None, committed_at=created if session else None,
                done_at=running, running=running is not None)  # fmt: skip


def stop(sent: float, ended: float | None, *, statuses=(200,), student: int = 0) -> Item:
    presses = [Press(sent + i, sent + i + 0.2, status) for i, status in enumerate(statuses)]
    return Item("stop", student, presses, session_id="s", committed_at=sent + 0.1, done_at=ended, ended=ended is not None)


def good_figures(**changes) -> FaultFigures:
    figures = dict(
        name="redis", title="Redis down", in_flight=80, launches=40, stops=40, failed=0, stuck=0, lost=0, leaked=0,
        server_errors=0, no_answers=0, committed_behind_500=0, start_p99=3.0, stop_p99=1.5, caught_at_clear=20,
        settle=2.0, violations=0,
    )  # fmt: skip
    figures.update(changes)
    return FaultFigures(**figures)


def test_a_fault_meeting_every_target_passes():
    checks = fault_checks(good_figures(), TARGET)

    assert verdict(checks)
    assert all(check.passed for check in checks)


@pytest.mark.parametrize(
    ("changes", "missed"),
    [
        ({"in_flight": MIN_IN_FLIGHT - 1}, f"in flight >= {MIN_IN_FLIGHT} when it landed"),
        ({"server_errors": 1}, "no 5xx"),
        ({"no_answers": 1}, "every press answered"),
        ({"committed_behind_500": 1}, "no 5xx for what was committed"),
        ({"failed": 1}, "nothing failed"),
        ({"stuck": 1}, "nothing stuck"),
        ({"lost": 1}, "nothing lost"),
        ({"leaked": 1}, "nothing leaked"),
        ({"violations": 1}, "ledger invariants held"),
        ({"start_p99": 6.01}, "start p99 <= 6 s"),
        ({"stop_p99": 4.5}, "stop p99 <= 4 s"),
        ({"settle": 5.2}, "settle <= 5 s"),
        ({"settle": None}, "settle <= 5 s"),  # in flight at the clear and never settled
        ({"start_p99": None}, "start p99 <= 6 s"),  # 40 launches and none reached running
    ],
)
def test_each_missed_target_fails_the_run_latencies_included(changes, missed):
    checks = fault_checks(good_figures(**changes), TARGET)

    assert [check.what for check in checks if not check.passed] == [missed]
    assert not verdict(checks)


def test_nothing_in_flight_at_the_clear_is_no_settle_time_not_a_zero():
    items = [launch(0.0, 3.0), stop(0.0, 1.0)]

    assert settle_after(items, cleared=4.0) == (0, None)
    figures = fault_figures("beat", "beat down", items, injected=0.5, cleared=4.0)
    settle = next(c for c in fault_checks(figures, TARGET, min_in_flight=2) if c.what.startswith("settle"))
    assert settle.passed and settle.detail == "nothing in flight when it cleared"
    assert fault_table([(figures, TARGET, [])])[1].split()[-2] == "-"


def test_settle_runs_from_the_clear_to_the_last_session_caught_in_flight():
    items = [launch(0.0, 6.5), launch(0.0, 3.0), stop(2.0, 5.0)]

    assert settle_after(items, cleared=4.0) == (2, pytest.approx(2.5))
    assert settle_after([*items, launch(3.0, None)], cleared=4.0) == (3, None)


def test_in_flight_counts_what_was_pressed_and_not_yet_running_or_ended():
    items = [launch(0.0, 3.0), stop(0.0, 0.4), launch(2.0, 5.0), launch(0.0, None, statuses=(400,), session=False)]
    items[-1].refused = "You already have 1 of 1 sessions open."

    assert in_flight_at(items, 1.0) == 1  # the stop ended, the refusal was answered, the third not pressed yet
    assert in_flight_at(items, 2.5) == 2
    assert in_flight_at(items, 5.5) == 0


def test_a_5xx_counts_as_committed_only_when_the_commit_fell_inside_that_press():
    behind = launch(0.0, 4.0, statuses=(500, 400), committed=0.1)  # created, answered 500, then "already open"
    retried = launch(0.0, 4.0, statuses=(500, 201), committed=1.1)  # nothing committed; the second press did it

    assert committed_behind_500([behind]) == 1
    assert committed_behind_500([retried]) == 0
    assert committed_behind_500([stop(0.0, 1.0, statuses=(502, 409))]) == 1


def test_a_launch_without_a_session_fails_unless_the_fault_meant_it():
    gave_up = launch(0.0, None, statuses=(500,) * 3, session=False)
    failed_to_start = Item("launch", 1, [Press(0.0, 0.2, 201)], session_id="x", done_at=4.0, ended=True)
    meant = Item("launch", 2, [Press(0.0, 0.2, 201)], session_id="y", done_at=4.0, ended=True, expected_failure=True)

    assert failed([gave_up, failed_to_start, meant, launch(0.0, 3.0)]) == [gave_up, failed_to_start]


def test_latency_during_a_fault_is_the_p99_of_what_was_measured():
    items = [launch(0.0, 1.0 + i / 10) for i in range(50)] + [launch(0.0, 30.0, student=99)]
    items[-1].node = "n1"

    everything = fault_figures("agent-pause", "", items, injected=0.5, cleared=10.0)
    healthy = fault_figures("agent-pause", "", items, injected=0.5, cleared=10.0, measured=lambda i: i.node != "n1")

    assert everything.start_p99 > 10  # the one lab on the paused node
    assert healthy.start_p99 == pytest.approx(5.851)


def test_the_table_marks_a_missed_latency_and_the_row_fails():
    figures = good_figures(start_p99=9.0)
    checks = fault_checks(figures, TARGET)

    header, row = fault_table([(figures, TARGET, checks)])

    assert "start p99/target s" in header
    assert "9.00!/6" in row and row.rstrip().endswith("FAIL")


def test_an_empty_verdict_is_no_pass():
    assert not verdict([])


def test_every_fault_has_its_targets_in_the_one_table():
    assert set(TARGETS) == set(FAULT_NAMES)


def test_only_picks_faults_by_name_and_refuses_an_unknown_one(capsys):
    assert [f.name for f in parse_args(["--only", "storm,redis"]).faults] == ["redis", "storm"]
    with pytest.raises(SystemExit):
        parse_args(["--only", "redis,meteor"])
    assert "unknown fault(s) meteor" in capsys.readouterr().err


def test_quick_shortens_the_outages_but_keeps_what_was_asked():
    quick = parse_args(["--quick"])
    assert (quick.down, quick.agent_down) == (2.0, 6.0)
    assert parse_args(["--quick", "--down", "4"]).down == 4.0
