"""The idle rule: idle only when every signal is, for the whole timeout; always warned first, for
the whole warning time; used again, the warning goes."""

from hypothesis import given
from hypothesis import strategies as st

from labs.domain.idle import Activity, Verdict, idle_verdict

HOUR = 3600.0
WARNING = 600.0


def verdict(last_active, activity, now, cull_at=None):
    return idle_verdict(
        last_active=last_active, activity=activity, now=now, timeout_seconds=HOUR, warning_seconds=WARNING, cull_at=cull_at
    )


def test_a_computing_kernel_is_not_idle_with_no_browser_and_no_request_for_hours():
    decision = verdict(0.0, Activity(busy_now=True, last_seen=10.0), now=5 * HOUR)
    assert decision.verdict == Verdict.NONE and decision.last_active == 5 * HOUR


def test_idle_for_less_than_timeout_minus_warning_is_left_alone():
    assert verdict(0.0, Activity(last_seen=0.0), now=HOUR - WARNING - 1).verdict == Verdict.NONE


def test_the_warning_comes_ahead_and_names_the_stop_time():
    decision = verdict(0.0, Activity(last_seen=0.0), now=HOUR - 300)
    assert (decision.verdict, decision.cull_at) == (Verdict.WARN, HOUR + 300)  # the whole warning time
    assert verdict(0.0, Activity(), now=HOUR - WARNING).cull_at == HOUR
    assert verdict(0.0, Activity(), now=HOUR, cull_at=HOUR + 300).verdict == Verdict.NONE  # warned once


def test_a_lab_found_long_past_due_is_warned_not_stopped():
    decision = verdict(0.0, Activity(), now=5 * HOUR)
    assert (decision.verdict, decision.cull_at) == (Verdict.WARN, 5 * HOUR + WARNING)


def test_use_after_the_warning_withdraws_it():
    decision = verdict(0.0, Activity(last_seen=HOUR - 100), now=HOUR - 50, cull_at=HOUR)
    assert (decision.verdict, decision.last_active) == (Verdict.CLEAR, HOUR - 100)
    assert verdict(0.0, Activity(busy_now=True), now=HOUR + 1, cull_at=HOUR).verdict == Verdict.CLEAR


def test_still_unused_at_the_warned_time_it_is_culled():
    assert verdict(0.0, Activity(), now=HOUR, cull_at=HOUR).verdict == Verdict.CULL


def test_a_lab_clock_ahead_of_ours_earns_no_time():
    decision = verdict(0.0, Activity(last_seen=10 * HOUR), now=HOUR - 300)
    assert decision.last_active == HOUR - 300 and decision.verdict == Verdict.NONE


@given(
    st.floats(0, 1e6),
    st.booleans(),
    st.one_of(st.none(), st.floats(0, 2e6)),
    st.floats(0, 2e6),
    st.one_of(st.none(), st.floats(0, 3e6)),
)
def test_never_culled_while_busy_unwarned_or_before_the_warned_time(last_active, busy, seen, now, cull_at):
    now = max(now, last_active)
    decision = verdict(last_active, Activity(busy_now=busy, last_seen=seen), now, cull_at)
    if decision.verdict == Verdict.CULL:
        assert not busy and cull_at is not None and now >= cull_at
    if decision.verdict == Verdict.WARN:
        assert decision.cull_at >= now + WARNING - 1e-6 or decision.cull_at == decision.last_active + HOUR
    assert decision.last_active >= last_active
