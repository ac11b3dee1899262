"""When ``make chaos`` lands a fault on its burst (bench/chaos/plan.py ``Landing``).

The burst here: 80 presses at t = 0, ``--lead`` 0.5 s, 60 wanted in flight, 3 s at most.
"""

from __future__ import annotations

from bench.chaos.plan import Landing


def landing() -> Landing:
    return Landing(want=60, earliest=0.5, latest=3.0)


def test_it_lands_before_the_lead_once_half_the_presses_are_answered():
    at = landing()
    assert not at.lands(now=0.1, live=80, out=True, half_answered=False)
    assert at.lands(now=0.25, live=80, out=True, half_answered=True)


def test_without_half_answered_it_waits_for_the_lead():
    at = landing()
    assert not at.lands(now=0.2, live=80, out=True, half_answered=False)
    assert not at.lands(now=0.45, live=80, out=True, half_answered=False)
    assert at.lands(now=0.5, live=80, out=True, half_answered=False)


def test_it_waits_while_presses_are_still_going_out():
    at = landing()
    assert not at.lands(now=0.6, live=70, out=False, half_answered=False)
    assert at.lands(now=0.65, live=80, out=True, half_answered=False)


def test_it_lands_as_the_count_falls_past_its_peak_even_before_the_lead():
    """The portal ends the burst's stops in one step: land on the step rather than after it."""
    at = landing()
    assert not at.lands(now=0.1, live=80, out=True, half_answered=False)
    assert at.lands(now=0.12, live=54, out=True, half_answered=False)


def test_a_fall_from_below_the_wanted_count_waits_until_it_is_time():
    at = landing()
    assert not at.lands(now=0.1, live=50, out=True, half_answered=False)
    assert not at.lands(now=0.2, live=45, out=True, half_answered=False)
    # Falling and out at the lead: as many as there will be, so it lands (and the report judges it).
    assert at.lands(now=0.5, live=44, out=True, half_answered=False)


def test_too_few_in_flight_waits_until_the_latest():
    at = landing()
    for now in (0.5, 1.0, 2.9):
        assert not at.lands(now=now, live=40, out=True, half_answered=True)
    assert at.lands(now=3.0, live=40, out=True, half_answered=True)
