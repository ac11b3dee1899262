import doctest

import pytest
from hypothesis import given
from hypothesis import strategies as st

from labs.domain import shares
from labs.domain.shares import ShareDemand, delivered_shares


def elastic(key, floor, demand):
    return ShareDemand(key, floor, demand, "elastic")


def test_the_docstring_examples_hold():
    assert doctest.testmod(shares).failed == 0


def test_a_small_floor_alone_busy_gets_the_whole_card():
    assert delivered_shares([elastic("A", 25, 100), elastic("B", 75, 0)]) == {"A": 100, "B": 0}


def test_both_busy_each_gets_exactly_its_floor():
    assert delivered_shares([elastic("A", 25, 100), elastic("B", 75, 100)]) == {"A": 25, "B": 75}


def test_an_instance_gets_no_more_than_it_asks_for():
    assert delivered_shares([elastic("A", 25, 40), elastic("B", 75, 0)]) == {"A": 40, "B": 0}


def test_idle_compute_is_lent_in_proportion_to_floors():
    # C is idle: its 40 % is lent to A and B in the ratio 10 : 50.
    result = delivered_shares([elastic("A", 10, 100), elastic("B", 50, 100), elastic("C", 40, 0)])
    assert result == {"A": 10 + 7, "B": 50 + 33, "C": 0}


def test_what_a_capped_borrower_does_not_take_goes_to_the_others():
    # Idle 60 %: A's proportional part would be 30, but it only wants 5 more; B takes the rest.
    result = delivered_shares([elastic("A", 20, 25), elastic("B", 20, 100), elastic("C", 60, 0)])
    assert result == {"A": 25, "B": 75, "C": 0}


def test_fixed_share_is_capped_at_its_floor_even_on_an_idle_card():
    assert delivered_shares([ShareDemand("A", 30, 100, "fixed-share")]) == {"A": 30}


def test_fixed_share_beside_elastic_lends_but_never_borrows():
    result = delivered_shares([ShareDemand("F", 30, 100, "fixed-share"), elastic("E", 20, 100)])
    assert result == {"F": 30, "E": 70}


def test_best_effort_gets_only_what_elastic_leaves():
    busy = delivered_shares([elastic("E", 40, 100), ShareDemand("X", 0, 100, "best-effort")])
    assert busy == {"E": 100, "X": 0}
    modest = delivered_shares([elastic("E", 40, 70), ShareDemand("X", 0, 100, "best-effort")])
    assert modest == {"E": 70, "X": 30}


def test_best_effort_instances_split_the_leftovers_equally():
    result = delivered_shares(
        [
            ShareDemand("F", 50, 100, "fixed-share"),
            ShareDemand("X", 0, 100, "best-effort"),
            ShareDemand("Y", 0, 100, "best-effort"),
            ShareDemand("Z", 0, 10, "best-effort"),
        ]
    )
    assert result == {"F": 50, "X": 20, "Y": 20, "Z": 10}


def test_a_unit_that_does_not_split_goes_by_key_order():
    result = delivered_shares([ShareDemand(k, 0, 100, "best-effort") for k in ("c", "a", "b")])
    assert result == {"c": 33, "a": 34, "b": 33}


def test_overcommitted_floors_shrink_in_proportion_and_never_exceed_the_card():
    result = delivered_shares([elastic("A", 100, 100), elastic("B", 100, 100)])
    assert result == {"A": 50, "B": 50}


def test_an_empty_card_delivers_nothing():
    assert delivered_shares([]) == {}


@pytest.mark.parametrize(
    "instance, message",
    [
        (ShareDemand("A", 0, 10, "elastic"), "floor 0 % is outside 1..100"),
        (ShareDemand("A", 10, 101, "elastic"), "demand 101 %"),
        (ShareDemand("A", 10, 10, "greedy"), "unknown policy"),  # type: ignore[arg-type]
    ],
)
def test_bad_input_is_refused_with_a_reason(instance, message):
    with pytest.raises(ValueError, match=message):
        delivered_shares([instance])


def test_a_duplicate_key_is_refused():
    with pytest.raises(ValueError, match="listed twice"):
        delivered_shares([elastic("A", 10, 10), elastic("A", 20, 20)])


@st.composite
def cards(draw):
    count = draw(st.integers(0, 16))
    instances = []
    for n in range(count):
        policy = draw(st.sampled_from(["fixed-share", "elastic", "best-effort"]))
        floor = draw(st.integers(0, 100)) if policy == "best-effort" else draw(st.integers(1, 100))
        instances.append(ShareDemand(f"i{n:02d}", floor, draw(st.integers(0, 100)), policy))
    return draw(st.permutations(instances))


@given(cards())
def test_shares_respect_capacity_demand_and_floors(instances):
    result = delivered_shares(instances)
    assert list(result) == [i.key for i in instances]
    assert sum(result.values()) <= 100
    for i in instances:
        assert 0 <= result[i.key] <= i.demand_percent
        if i.policy == "fixed-share":
            assert result[i.key] <= i.floor_percent
    if sum(i.floor_percent for i in instances if i.policy != "best-effort") <= 100:
        for i in instances:
            if i.policy != "best-effort":
                assert result[i.key] >= min(i.demand_percent, i.floor_percent)
    if sum(result.values()) < 100:
        # Idle compute is never withheld from an instance that may borrow and wants more.
        for i in instances:
            if i.policy != "fixed-share":
                assert result[i.key] == i.demand_percent


@given(cards())
def test_shares_do_not_depend_on_the_order_instances_are_listed_in(instances):
    assert delivered_shares(instances) == delivered_shares(sorted(instances))
