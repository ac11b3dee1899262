"""The simulated driver: an 8 x 910B node that enforces the FlexNPU limits and shares AI Core."""

from __future__ import annotations

import threading

import pytest

from nodeagent.cards.base import DuplicateInstance, UnknownInstance
from nodeagent.cards.simulated import SimulatedDriver


@pytest.fixture
def driver():
    return SimulatedDriver(node_name="node-a")


def test_a_default_node_has_eight_healthy_64_gib_910b_cards_with_stable_die_ids(driver):
    cards = driver.inventory()

    assert [c.index for c in cards] == list(range(8))
    assert {(c.chip_type, c.memory_total_mib, c.memory_used_mib, c.aicore_percent, c.healthy) for c in cards} == {
        ("Ascend910B", 65536, 0, 0, True)
    }
    assert len({c.die_id for c in cards}) == 8
    assert [c.die_id for c in cards] == [c.die_id for c in SimulatedDriver(node_name="node-a").inventory()]
    assert cards[0].die_id.count("-") == 4


def test_a_registered_instance_is_listed_idle(driver):
    instance = driver.register("pod-1", card_index=2, core_percent=25, memory_mib=8192)

    assert driver.instances() == [instance]
    assert (instance.flexnpu_id, instance.card_index, instance.core_percent, instance.memory_mib) == ("1", 2, 25, 8192)
    assert (instance.aicore_percent, instance.demand_percent, instance.memory_used_mib) == (0, 0, 0)


def test_the_vendor_example_a_small_floor_borrows_alone_and_is_held_to_it_under_contention(driver):
    driver.register("A", card_index=0, core_percent=25, memory_mib=8192)
    driver.register("B", card_index=0, core_percent=75, memory_mib=8192)

    driver.set_demand("A", 100)
    assert {i.entity_id: i.aicore_percent for i in driver.instances()} == {"A": 100, "B": 0}
    assert driver.inventory()[0].aicore_percent == 100

    driver.set_demand("B", 100)
    assert {i.entity_id: i.aicore_percent for i in driver.instances()} == {"A": 25, "B": 75}
    assert driver.inventory()[0].aicore_percent == 100


def test_fixed_share_stays_at_its_floor_and_best_effort_takes_the_rest(driver):
    driver.register("F", card_index=0, core_percent=30, memory_mib=1024, policy="fixed-share")
    driver.register("X", card_index=0, core_percent=0, memory_mib=1024, policy="best-effort")
    driver.set_demand("F", 100)
    driver.set_demand("X", 100)

    assert {i.entity_id: i.aicore_percent for i in driver.instances()} == {"F": 30, "X": 70}


def test_cards_share_independently(driver):
    driver.register("A", card_index=0, core_percent=10, memory_mib=1024)
    driver.register("B", card_index=1, core_percent=10, memory_mib=1024)
    driver.set_demand("A", 100)
    driver.set_demand("B", 40)

    assert [c.aicore_percent for c in driver.inventory()[:3]] == [100, 40, 0]


def test_memory_in_use_is_reported_per_instance_and_per_card(driver):
    driver.register("A", card_index=3, core_percent=10, memory_mib=8192)
    driver.register("B", card_index=3, core_percent=10, memory_mib=8192)

    instance = driver.set_demand("A", 0, memory_used_mib=4096)
    driver.set_demand("B", 0, memory_used_mib=1024)

    assert instance.memory_used_mib == 4096
    assert driver.inventory()[3].memory_used_mib == 5120


@pytest.mark.parametrize(
    "options, message",
    [
        ({"card_index": 8}, "card 8 does not exist: this node has cards 0..7"),
        ({"card_index": -1}, "card -1 does not exist"),
        ({"core_percent": 0}, "core_percent must be 1..100 with the elastic policy, got 0"),
        ({"core_percent": 101}, "core_percent must be 1..100"),
        ({"core_percent": 101, "policy": "best-effort"}, "core_percent must be 0..100 with the best-effort policy, got 101"),
        ({"memory_mib": 1000}, "memory_mib must be a positive multiple of 128 MiB, got 1000"),
        ({"memory_mib": 0}, "memory_mib must be a positive multiple of 128 MiB"),
        ({"memory_mib": 65536 + 128}, "card 0 has 65536 MiB of memory free, the instance needs 65664 MiB"),
        ({"scenario": "training"}, "scenario must be one of development, inference, got 'training'"),
        ({"policy": "greedy"}, "policy must be one of fixed-share, elastic, best-effort, got 'greedy'"),
        ({"entity_id": ""}, "entity_id must be 1 to 128 letters"),
        ({"entity_id": "a b"}, "entity_id must be 1 to 128 letters"),
        ({"card_index": "0"}, "card_index must be an integer, got '0'"),
        ({"core_percent": True}, "core_percent must be an integer, got True"),
    ],
)
def test_register_refuses_what_a_real_node_would_with_a_reason(driver, options, message):
    fields = {"entity_id": "pod-1", "card_index": 0, "core_percent": 10, "memory_mib": 1024, **options}

    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(".", r"\.")):
        driver.register(**fields)
    assert driver.instances() == []


def test_floors_on_a_card_may_not_sum_over_100(driver):
    driver.register("A", card_index=0, core_percent=60, memory_mib=1024)

    with pytest.raises(ValueError, match="card 0 has 40 % of AI Core unguaranteed, the instance needs 41 %"):
        driver.register("B", card_index=0, core_percent=41, memory_mib=1024)
    driver.register("B", card_index=0, core_percent=40, memory_mib=1024)


def test_memory_caps_on_a_card_may_not_sum_over_its_memory(driver):
    driver.register("A", card_index=0, core_percent=10, memory_mib=65536 - 1024)

    with pytest.raises(ValueError, match="card 0 has 1024 MiB of memory free, the instance needs 1152 MiB"):
        driver.register("B", card_index=0, core_percent=10, memory_mib=1152)


def test_a_card_holds_at_most_16_development_instances(driver):
    for n in range(16):
        driver.register(f"dev-{n}", card_index=0, core_percent=1, memory_mib=128)

    with pytest.raises(ValueError, match=r"card 0 already holds 16 instance\(s\), at most 16"):
        driver.register("dev-16", card_index=0, core_percent=1, memory_mib=128)


def test_an_inference_instance_caps_its_card_at_8(driver):
    for n in range(8):
        driver.register(f"dev-{n}", card_index=0, core_percent=1, memory_mib=128)

    with pytest.raises(ValueError, match=r"card 0 already holds 8 instance\(s\), at most 8"):
        driver.register("vllm", card_index=0, core_percent=1, memory_mib=128, scenario="inference")
    driver.register("vllm", card_index=1, core_percent=1, memory_mib=128, scenario="inference")


def test_a_node_holds_at_most_64_instances_once_one_is_for_inference():
    driver = SimulatedDriver(cards=9)
    driver.register("vllm", card_index=8, core_percent=1, memory_mib=128, scenario="inference")
    for n in range(63):
        driver.register(f"dev-{n}", card_index=n % 8, core_percent=1, memory_mib=128)

    with pytest.raises(ValueError, match=r"the node already holds 64 instance\(s\), at most 64"):
        driver.register("dev-63", card_index=7, core_percent=1, memory_mib=128)


def test_a_duplicate_entity_id_is_refused(driver):
    driver.register("pod-1", card_index=0, core_percent=10, memory_mib=1024)

    with pytest.raises(DuplicateInstance, match=r"instance pod-1 is already registered \(card 0\)"):
        driver.register("pod-1", card_index=1, core_percent=10, memory_mib=1024)


def test_unregister_is_true_once_then_false(driver):
    driver.register("pod-1", card_index=0, core_percent=10, memory_mib=1024)
    driver.register("pod-2", card_index=0, core_percent=10, memory_mib=1024)

    assert driver.unregister("pod-1") is True
    assert driver.unregister("pod-1") is False
    assert [i.entity_id for i in driver.instances()] == ["pod-2"]


@pytest.mark.parametrize(
    "arguments, error, message",
    [
        (("nope", 50), UnknownInstance, "no instance nope"),
        (("pod-1", 101), ValueError, "demand_percent must be 0..100, got 101"),
        (("pod-1", 50, 2048), ValueError, r"memory_used_mib must be 0..1024 \(the instance's cap\), got 2048"),
        (("pod-1", 50.5), ValueError, "demand_percent must be an integer"),
    ],
)
def test_set_demand_refuses_bad_values(driver, arguments, error, message):
    driver.register("pod-1", card_index=0, core_percent=10, memory_mib=1024)

    with pytest.raises(error, match=message):
        driver.set_demand(*arguments)


def test_an_unhealthy_card_is_reported(driver):
    driver.set_card_health(4, False)

    assert [c.index for c in driver.inventory() if not c.healthy] == [4]


def test_concurrent_registrations_never_overfill_a_card(driver):
    errors = []

    def register(n: int) -> None:
        try:
            driver.register(f"pod-{n}", card_index=0, core_percent=5, memory_mib=128)
        except ValueError as exc:
            errors.append(str(exc))

    threads = [threading.Thread(target=register, args=(n,)) for n in range(40)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    assert len(driver.instances()) == 16
    assert len(errors) == 24
    assert len({i.flexnpu_id for i in driver.instances()}) == 16
