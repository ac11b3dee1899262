"""The term capacity planner's rules: known hours give known figures, fragmentation counts, the
usual use is the 90th percentile of past weeks, and a what-if class gets one of three verdicts
with the bookings it collides with named."""

from __future__ import annotations

from datetime import datetime, timedelta
from zoneinfo import ZoneInfo

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from labs.domain.placement import CardCapacity, NodeCapacity
from labs.domain.planner import (
    Booking,
    PastSpan,
    UsualNeed,
    Verdict,
    hourly_peaks,
    lab_shape,
    percentile_ceil,
    plan_hours,
    usual_use,
    what_if,
)
from labs.domain.quota import CourseQuota, Resources

ZONE = ZoneInfo("Asia/Shanghai")
MONDAY = datetime(2027, 3, 1, tzinfo=ZONE)
TUESDAY_10 = MONDAY + timedelta(days=1, hours=10)
GIB = 1024
SMALL = lab_shape(5, 4 * GIB)
MEDIUM = lab_shape(10, 8 * GIB)
BIG = lab_shape(40, 40 * GIB)


def node(name: str = "n1", cards: int = 2, memory_mib: int = 64 * GIB, chip_type: str = "Ascend910B") -> NodeCapacity:
    return NodeCapacity(name, tuple(CardCapacity(i, i, memory_mib, chip_type=chip_type) for i in range(cards)))


def booking(course: int, start: datetime, shape, count: int, hours: int = 2, key: str = "b") -> Booking:
    return Booking(course, start, start + timedelta(hours=hours), shape, count, key)


def test_an_hour_has_the_figures_its_bookings_usual_use_and_guarantees_make():
    plan = plan_hours(
        [node(), node("n2", cards=1, memory_mib=48 * GIB, chip_type="Ascend310P")],
        [TUESDAY_10, TUESDAY_10 + timedelta(hours=2)],
        bookings=[booking(1, TUESDAY_10, MEDIUM, 3)],
        usual={(1, 10): [UsualNeed(2, SMALL, 2)]},
        guarantees={1: Resources(20, 16 * GIB, 2), 3: Resources(50, 20 * GIB, 5)},
    )
    ten, noon = plan.hours
    assert ten.capacity == Resources(300, 176 * GIB, 48)
    assert ten.booked == Resources(30, 24 * GIB, 3)
    assert ten.usual == Resources(10, 8 * GIB, 2)
    # Course 1's guarantee is used up by its booking; course 3's is held whole.
    assert ten.guaranteed == Resources(50, 20 * GIB, 5)
    assert ten.by_course == {1: Resources(30, 24 * GIB, 3), 2: Resources(10, 8 * GIB, 2)}
    assert ten.bookings == ("b",)
    # Binpack puts everything on the first 910B card; the 310P holds nothing.
    assert {t.chip_type: t.booked + t.usual for t in ten.card_types} == {
        "Ascend310P": Resources(),
        "Ascend910B": Resources(40, 32 * GIB, 5),
    }
    assert ten.load_percent == (40 + 50) * 100 // 300  # core is the largest share
    assert ten.fits
    assert noon.booked == Resources() and noon.usual == Resources()
    assert noon.guaranteed == Resources(70, 36 * GIB, 7)


def test_fragmentation_leaves_an_instance_out_that_totals_alone_would_hold():
    # Two cards of 64 GiB hold 128 GiB: three instances of 40 GiB (120 GiB, 120 %) add up to
    # less, but only one fits on each card.
    plan = plan_hours([node()], [TUESDAY_10], bookings=[booking(1, TUESDAY_10, BIG, 3)])
    (hour,) = plan.hours
    assert BIG.charge(3).fits_in(hour.capacity)
    assert hour.booked == Resources(80, 80 * GIB, 2)
    assert hour.unplaced_booked == Resources(40, 40 * GIB, 1)
    assert not hour.fits


def test_a_guarantee_the_cluster_cannot_cover_leaves_the_hour_short():
    plan = plan_hours(
        [node(cards=1)],
        [TUESDAY_10],
        bookings=[booking(1, TUESDAY_10, MEDIUM, 5)],
        guarantees={2: Resources(60, 8 * GIB, 1)},
    )
    (hour,) = plan.hours
    assert hour.short == Resources(10, 0, 0)
    assert not hour.fits


def test_the_same_needs_in_another_week_are_placed_once():
    hours = [TUESDAY_10 + timedelta(weeks=w) for w in range(15)]
    bookings = [booking(1, h, MEDIUM, 3, key=f"w{n}") for n, h in enumerate(hours)]
    plan = plan_hours([node()], hours, bookings=bookings)
    assert plan.evaluated == 1
    assert [h.start for h in plan.hours] == hours
    assert [h.bookings for h in plan.hours] == [(f"w{n}",) for n in range(15)]
    # A repeated hour has the figures of that hour placed on its own.
    (alone,) = plan_hours([node()], hours[-1:], bookings=bookings[-1:]).hours
    assert plan.hours[-1] == alone


def test_an_hour_counts_the_most_instances_live_at_once_in_it():
    at = TUESDAY_10
    intervals = [
        (at, at + timedelta(minutes=30)),
        (at + timedelta(minutes=30), at + timedelta(minutes=50)),  # after the first: one at a time
        (at + timedelta(minutes=40), at + timedelta(hours=2)),  # beside the second
    ]
    assert hourly_peaks(intervals, [at, at + timedelta(hours=1), at + timedelta(hours=2)]) == [2, 1, 0]


def test_the_percentile_is_linear_between_ranks_and_rounded_up():
    assert percentile_ceil([0, 1, 1, 1, 2, 2, 3, 3, 4, 10], 90) == 5  # 4 + 0.1 x 6 = 4.6
    assert percentile_ceil([3] * 8, 90) == 3
    assert percentile_ceil([], 90) == 0


def test_the_usual_use_of_an_hour_is_its_90th_percentile_over_past_weeks():
    weeks = [MONDAY - timedelta(weeks=w) for w in range(10, 0, -1)]
    per_week = [0, 1, 1, 1, 2, 2, 3, 3, 4, 10]
    spans = []
    for week, count in zip(weeks, per_week, strict=True):
        at = week + timedelta(days=1, hours=10, minutes=5)
        spans += [PastSpan(7, at, at + timedelta(minutes=30), SMALL)] * count
    spans.append(PastSpan(7, weeks[0] + timedelta(hours=3), weeks[0] + timedelta(hours=4), MEDIUM))  # once in ten weeks
    usual = usual_use(spans, weeks=weeks)
    assert usual == {(1, 10): (UsualNeed(7, SMALL, 5),), (0, 3): (UsualNeed(7, MEDIUM, 1),)}
    assert usual_use(spans, weeks=weeks, percent=50) == {(1, 10): (UsualNeed(7, SMALL, 2),)}


def test_a_class_within_its_guarantee_on_room_enough_fits():
    quotas = {1: CourseQuota(Resources(200, 160 * GIB, 20))}
    answer = what_if([node()], [booking(1, TUESDAY_10, MEDIUM, 10, key="new")], quotas=quotas)
    assert answer.verdict == Verdict.FITS
    assert [h.start for h in answer.hours] == [TUESDAY_10, TUESDAY_10 + timedelta(hours=1)]
    assert all(h.placed == 10 and h.reason is None for h in answer.hours)


def test_a_class_beyond_its_guarantee_fits_by_borrowing_what_its_cohort_leaves_idle():
    quotas = {
        1: CourseQuota(Resources(50, 40 * GIB, 5), cohort="cs"),
        2: CourseQuota(Resources(100, 80 * GIB, 10), cohort="cs"),
    }
    answer = what_if([node()], [booking(1, TUESDAY_10, MEDIUM, 10)], quotas=quotas)
    assert answer.verdict == Verdict.BORROWING


def test_a_class_beyond_its_guarantee_outside_any_cohort_does_not_fit():
    quotas = {1: CourseQuota(Resources(50, 40 * GIB, 5))}
    answer = what_if([node()], [booking(1, TUESDAY_10, MEDIUM, 10)], quotas=quotas)
    assert answer.verdict == Verdict.NO
    assert answer.hours[0].reason.code == "quota.instances"


def test_a_class_the_cards_cannot_hold_does_not_fit_however_large_its_guarantee():
    quotas = {1: CourseQuota(Resources(1000, 1000 * GIB, 100))}
    answer = what_if([node()], [booking(1, TUESDAY_10, BIG, 3)], quotas=quotas)
    assert answer.verdict == Verdict.NO
    assert answer.hours[0].placed == 2
    assert answer.hours[0].reason is None


def test_the_bookings_a_class_collides_with_are_named_hour_by_hour():
    quotas = {1: CourseQuota(Resources(1000, 1000 * GIB, 100)), 2: CourseQuota(Resources())}
    others = [
        booking(2, TUESDAY_10 + timedelta(hours=1), BIG, 1, hours=1, key="lab-2"),
        booking(2, TUESDAY_10 + timedelta(days=1), BIG, 1, key="wednesday"),
    ]
    answer = what_if([node()], [booking(1, TUESDAY_10, BIG, 2, key="new")], bookings=others, quotas=quotas)
    assert answer.collisions == ((TUESDAY_10 + timedelta(hours=1), ("lab-2",)),)
    first, second = answer.hours
    assert first.verdict == Verdict.FITS
    assert second.verdict == Verdict.NO and second.placed == 1
    assert answer.verdict == Verdict.NO


def test_bad_input_is_refused_with_a_message():
    with pytest.raises(ValueError, match="count"):
        booking(1, TUESDAY_10, SMALL, 0)
    with pytest.raises(ValueError, match="ends_at"):
        Booking(1, TUESDAY_10, TUESDAY_10, SMALL, 1)
    with pytest.raises(ValueError, match="core_percent"):
        lab_shape(101, GIB)
    with pytest.raises(ValueError, match="no quota"):
        what_if([node()], [booking(1, TUESDAY_10, SMALL, 1)], quotas={})
    with pytest.raises(ValueError, match="aware"):
        plan_hours([node()], [datetime(2027, 3, 2, 10)])


SHAPES = [SMALL, MEDIUM, BIG, lab_shape(25, 16 * GIB)]


@settings(max_examples=60, deadline=None)
@given(
    bookings=st.lists(
        st.tuples(st.integers(0, 5), st.integers(0, 3), st.integers(1, 3), st.integers(1, 40), st.sampled_from(SHAPES)),
        max_size=6,
    ),
    usual=st.lists(st.tuples(st.integers(0, 5), st.sampled_from(SHAPES), st.integers(1, 30)), max_size=4),
    cards=st.integers(1, 8),
)
def test_every_instance_asked_for_is_placed_or_counted_unplaced_and_no_card_type_holds_more_than_it_has(bookings, usual, cards):
    hours = [MONDAY + timedelta(hours=h) for h in range(6)]
    booked = [
        Booking(course, MONDAY + timedelta(hours=start), MONDAY + timedelta(hours=start + length), shape, count, n)
        for n, (start, course, length, count, shape) in enumerate(bookings)
    ]
    needs = {(0, h): [UsualNeed(9, shape, count) for h2, shape, count in usual if h2 == h] for h in range(6)}
    plan = plan_hours(
        [node(cards=cards), node("n2", cards=2, memory_mib=48 * GIB, chip_type="Ascend310P")], hours, bookings=booked, usual=needs
    )
    for hour in plan.hours:
        present = [b for b in booked if b.starts_at < hour.start + timedelta(hours=1) and b.ends_at > hour.start]
        asked = sum((b.shape.charge(b.count) for b in present), Resources())
        assert hour.booked + hour.unplaced_booked == asked
        wanted = sum((u.shape.charge(u.count) for u in needs[(0, hour.start.hour)]), Resources())
        assert hour.usual + hour.unplaced_usual == wanted
        for t in hour.card_types:
            assert (t.booked + t.usual).fits_in(t.capacity)
        assert sorted(hour.bookings) == sorted(b.key for b in present)
