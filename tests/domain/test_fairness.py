"""Fair order: decayed usage pushes a launch back in its course's queue, boundedly; inside a cohort
the course using less of its guarantee goes first."""

import pytest
from hypothesis import given
from hypothesis import strategies as st

from labs.domain.fairness import Waiting, cohort_fair_order, decayed, dominant_share, queue_delay_seconds


def test_usage_halves_every_half_life():
    assert decayed(100, 0, 3600) == 100
    assert decayed(100, 3600, 3600) == pytest.approx(50)
    assert decayed(100, 7200, 3600) == pytest.approx(25)
    assert decayed(100, 10, 0) == 0


def test_the_delay_grows_with_usage_and_is_capped():
    rule = {"seconds_per_percent_hour": 30, "max_seconds": 1800}
    assert queue_delay_seconds(0, **rule) == 0
    assert queue_delay_seconds(10, **rule) == 300
    assert queue_delay_seconds(10_000, **rule) == 1800


def test_the_dominant_share_is_the_scarcest_resource():
    assert dominant_share((50, 4096, 1), (100, 16384, 4)) == 0.5
    assert dominant_share((0, 0, 0), (100, 16384, 4)) == 0
    assert dominant_share((10, 0, 1), (0, 16384, 4)) == float("inf")


def test_inside_a_cohort_the_course_using_less_of_its_guarantee_goes_first():
    waiting = [
        Waiting("a1", 1, "dept"),
        Waiting("x1", 9, ""),
        Waiting("b1", 2, "dept"),
        Waiting("a2", 1, "dept"),
        Waiting("b2", 2, "dept"),
    ]
    order = cohort_fair_order(waiting, {1: 1.5, 2: 0.25})
    assert order == ["b1", "x1", "b2", "a1", "a2"]  # x1 keeps its place; a course's own order is kept


@given(
    st.lists(st.tuples(st.integers(1, 4), st.sampled_from(["", "c1", "c2"])), max_size=30),
    st.dictionaries(st.integers(1, 4), st.floats(0, 5)),
)
def test_the_order_is_a_permutation_that_keeps_each_course_s_own_order(entries, shares):
    # A course is in one cohort: the first entry of a course decides it.
    cohort_of = {}
    waiting = [Waiting(f"k{i}", c, cohort_of.setdefault(c, h)) for i, (c, h) in enumerate(entries)]
    order = cohort_fair_order(waiting, shares)
    assert sorted(order) == sorted(w.key for w in waiting)
    for course in {w.course_id for w in waiting}:
        mine = [w.key for w in waiting if w.course_id == course]
        assert [k for k in order if k in mine] == mine
    for i, w in enumerate(waiting):
        if not w.cohort:
            assert order[i] == w.key
