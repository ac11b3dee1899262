"""Class reservations, the pure part: a booking's slots, and how many of a slot's sessions the
cluster can hold beside the other bookings and guarantees."""

from __future__ import annotations

from datetime import date, datetime, time
from zoneinfo import ZoneInfo

import pytest

from labs.domain.placement import CardCapacity, Instance, NodeCapacity
from labs.domain.quota import Resources
from labs.domain.reservations import MAX_SLOTS, Booked, Demand, Held, SlotCheck, room_now, slot_check, slot_room, slot_times
from labs.domain.units import Scenario

SHANGHAI = ZoneInfo("Asia/Shanghai")
BERLIN = ZoneInfo("Europe/Berlin")
CARD = 64 * 1024


def server(cards: int = 8, *, available: bool = True) -> NodeCapacity:
    return NodeCapacity("n1", tuple(CardCapacity(i, i, CARD) for i in range(cards)), available)


def test_weekly_slots_fall_on_the_chosen_weekdays_between_the_first_and_last_date():
    slots = slot_times(
        start=time(14, 0), minutes=90, zone=SHANGHAI, weekdays=[1, 3], first=date(2026, 3, 2), last=date(2026, 3, 15)
    )
    assert [s.date().isoformat() for s, _ in slots] == ["2026-03-03", "2026-03-05", "2026-03-10", "2026-03-12"]
    start, end = slots[0]
    assert start == datetime(2026, 3, 3, 14, 0, tzinfo=SHANGHAI) and (end - start).total_seconds() == 90 * 60


def test_single_dates_and_weekdays_merge_without_repeats():
    slots = slot_times(
        start=time(9, 0),
        minutes=60,
        zone=SHANGHAI,
        dates=[date(2026, 3, 3), date(2026, 3, 20)],
        weekdays=[1],
        first=date(2026, 3, 1),
        last=date(2026, 3, 10),
    )
    assert [s.date().day for s, _ in slots] == [3, 10, 20]


def test_a_class_keeps_its_wall_clock_time_across_a_daylight_saving_change():
    slots = slot_times(start=time(14, 0), minutes=60, zone=BERLIN, dates=[date(2026, 3, 27), date(2026, 3, 30)])
    assert [s.utcoffset().total_seconds() / 3600 for s, _ in slots] == [1, 2]
    assert {(s.hour, s.minute) for s, _ in slots} == {(14, 0)}


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"minutes": 0, "dates": [date(2026, 3, 3)]}, "minutes"),
        ({"minutes": 60, "weekdays": [7], "first": date(2026, 3, 1), "last": date(2026, 3, 9)}, "weekdays"),
        ({"minutes": 60, "weekdays": [1], "first": date(2026, 3, 1)}, "first and a last"),
        ({"minutes": 60, "weekdays": [1], "first": date(2026, 3, 9), "last": date(2026, 3, 1)}, "before the first"),
        ({"minutes": 60, "weekdays": list(range(7)), "first": date(2026, 1, 1), "last": date(2027, 12, 31)}, "more than"),
    ],
)
def test_a_booking_that_makes_no_sense_is_refused_with_the_reason(kwargs, message):
    with pytest.raises(ValueError, match=message):
        slot_times(start=time(9, 0), zone=SHANGHAI, **kwargs)
    assert MAX_SLOTS >= 200


def test_an_empty_server_holds_what_card_memory_allows():
    # 25 % / 16 GiB: four per 64 GiB card, 32 on eight cards.
    assert slot_room([server()], Demand(25, 16384, 32)) == 32
    assert slot_room([server()], Demand(25, 16384, 40)) == 32
    assert slot_room([server(4)], Demand(25, 16384, 32)) == 16


def test_what_runs_now_is_not_counted_a_slot_is_in_the_future():
    busy = NodeCapacity("n1", (CardCapacity(0, 0, CARD, instances=(Instance(100, CARD, Scenario.DEVELOPMENT, "x"),)),))
    assert slot_room([busy], Demand(25, 16384, 4)) == 4


def test_overlapping_bookings_are_placed_first():
    assert slot_room([server()], Demand(25, 16384, 32), others=[Demand(25, 16384, 12)]) == 20
    # a different shape packs differently: 8 x 50 % / 40 GiB leave 24 GiB on each card: one more each
    assert slot_room([server()], Demand(25, 16384, 32), others=[Demand(50, 40960, 8)]) == 8


def test_other_courses_guarantees_are_held_as_totals():
    held = Resources(300, 3 * CARD, 10)
    assert slot_room([server()], Demand(25, 16384, 32), held_elsewhere=held) == 20
    assert slot_room([server()], Demand(25, 16384, 32), held_elsewhere=Resources(0, 0, 128 - 4)) == 4


def test_unavailable_nodes_and_unhealthy_cards_hold_nothing():
    assert slot_room([server(available=False)], Demand(25, 16384, 4)) == 0
    sick = NodeCapacity("n1", (CardCapacity(0, 0, CARD, healthy=False), CardCapacity(1, 1, CARD)))
    assert slot_room([sick], Demand(25, 16384, 8)) == 4


def test_a_demand_s_charge_is_count_times_one_instance():
    assert Demand(25, 16384, 3).charge == Resources(75, 3 * 16384, 3)
    with pytest.raises(ValueError):
        Demand(0, 16384, 3)


def test_room_now_counts_what_the_placeable_nodes_hold_beside_what_runs_there_in_order():
    running = tuple(Instance(50, 32 * 1024, Scenario.DEVELOPMENT, f"r{i}", 1, 0.0) for i in range(1))
    elsewhere = NodeCapacity("n2", (CardCapacity(10, 0, CARD, True, running),), True)
    emptied = NodeCapacity("n1", tuple(CardCapacity(i, i, CARD) for i in range(8)), False)  # drained: takes nothing
    # One card with half its core and memory taken: two 25 % / 16 GiB labs fit, the rest of the demands do not.
    assert room_now([emptied, elsewhere], [Demand(25, 16 * 1024, 3), Demand(25, 16 * 1024, 2)]) == [2, 0]


def test_a_weekly_booking_whose_first_date_is_past_starts_at_the_next_meeting():
    # Tuesdays and Thursdays at 14:00 from Tue 3 March; booked on Thu 12 March at 15:00, after
    # that day's class began: the first meeting is Tue 17 March.
    now = datetime(2026, 3, 12, 15, 0, tzinfo=SHANGHAI)
    slots = slot_times(
        start=time(14, 0), minutes=90, zone=SHANGHAI, weekdays=[1, 3], first=date(2026, 3, 3), last=date(2026, 3, 26), after=now
    )
    assert [s.date().isoformat() for s, _ in slots] == ["2026-03-17", "2026-03-19", "2026-03-24", "2026-03-26"]
    # At 13:59 the same day's class is still to come: it is the first meeting.
    earlier = slot_times(
        start=time(14, 0),
        minutes=90,
        zone=SHANGHAI,
        weekdays=[3],
        first=date(2026, 3, 5),
        last=date(2026, 3, 19),
        after=datetime(2026, 3, 12, 13, 59, tzinfo=SHANGHAI),
    )
    assert [s.date().isoformat() for s, _ in earlier] == ["2026-03-12", "2026-03-19"]


def test_single_dates_are_kept_whatever_their_time_for_the_caller_to_refuse():
    now = datetime(2026, 3, 12, 15, 0, tzinfo=SHANGHAI)
    slots = slot_times(start=time(14, 0), minutes=90, zone=SHANGHAI, dates=[date(2026, 3, 10)], after=now)
    assert [s.date().isoformat() for s, _ in slots] == ["2026-03-10"]
    with pytest.raises(ValueError, match="aware"):
        slot_times(start=time(14, 0), minutes=90, zone=SHANGHAI, dates=[date(2026, 3, 10)], after=datetime(2026, 3, 12))


def test_the_check_names_each_booking_and_guarantee_that_holds_the_cluster_and_how_much():
    lab = Demand(25, 16384, 32)
    booked = Booked(7, Demand(25, 16384, 12), key="AI101 Tue")
    # Course 7 is guaranteed 400 %: its booking's 300 % is inside it, 100 % more is held beyond.
    # Course 9's 300 % guarantee has no booking then: all of it is held.
    check = slot_check(
        [server()],
        lab,
        bookings=[booked],
        guarantees={7: Resources(400, 4 * CARD, 16), 9: Resources(300, 3 * CARD, 10), 11: Resources()},
    )
    assert check.room == 4 and check.alone == 32  # 800 % less 300 % booked, 300 % and 100 % held: 100 % left
    assert check.held == (
        Held(7, Resources(300, 12 * 16384, 12), booked),
        Held(9, Resources(300, 3 * CARD, 10)),
        Held(7, Resources(100, CARD, 4)),
    )  # the largest first; course 11 guarantees nothing and is not named


def test_on_an_idle_cluster_the_check_says_the_guarantees_hold_it_all():
    check = slot_check([server()], Demand(25, 16384, 4), guarantees={3: Resources(800, 8 * CARD, 128)})
    assert (check.room, check.alone) == (0, 4)
    assert check.held == (Held(3, Resources(800, 8 * CARD, 128)),)
    # A cluster too small for the class on its own says so too.
    assert slot_check([server(1)], Demand(25, 16384, 8)) == SlotCheck(4, 4, ())
