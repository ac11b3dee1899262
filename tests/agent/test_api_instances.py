"""Registering, listing, loading and removing instances over the API (simulated driver)."""

from __future__ import annotations

from tests.agent.helpers import NODE, call

POD = {"entity_id": "pod-1", "card_index": 0, "core_percent": 25, "memory_mib": 8192}


def test_inventory_lists_every_card(agent):
    response = call(agent, "GET", "/v1/inventory")

    assert response.status == 200
    body = response.json()
    assert body["node"] == NODE
    assert len(body["cards"]) == 8
    assert set(body["cards"][0]) == {
        "index",
        "die_id",
        "chip_type",
        "memory_total_mib",
        "memory_used_mib",
        "aicore_percent",
        "healthy",
        "power_milliwatts",
        "temperature_celsius",
    }
    assert body["cards"][7]["index"] == 7
    assert body["cards"][0]["memory_total_mib"] == 65536


def test_register_answers_201_with_the_instance(agent):
    response = call(agent, "POST", "/v1/instances", POD)

    assert response.status == 201
    assert response.json() == {
        "entity_id": "pod-1",
        "flexnpu_id": "1",
        "card_index": 0,
        "core_percent": 25,
        "memory_mib": 8192,
        "memory_used_mib": 0,
        "aicore_percent": 0,
        "demand_percent": 0,
    }
    assert call(agent, "GET", "/v1/instances").json() == {"instances": [response.json()]}


def test_scenario_and_policy_may_be_given(agent):
    body = {**POD, "scenario": "inference", "policy": "fixed-share"}

    assert call(agent, "POST", "/v1/instances", body).status == 201


def test_demand_changes_the_ai_core_an_instance_gets(agent):
    call(agent, "POST", "/v1/instances", {**POD, "entity_id": "A", "core_percent": 25})
    call(agent, "POST", "/v1/instances", {**POD, "entity_id": "B", "core_percent": 75})

    response = call(agent, "POST", "/v1/instances/A/demand", {"demand_percent": 100, "memory_used_mib": 2048})
    assert response.status == 200
    assert (response.json()["aicore_percent"], response.json()["memory_used_mib"]) == (100, 2048)

    call(agent, "POST", "/v1/instances/B/demand", {"demand_percent": 100})
    shares = {i["entity_id"]: i["aicore_percent"] for i in call(agent, "GET", "/v1/instances").json()["instances"]}
    assert shares == {"A": 25, "B": 75}


def test_delete_answers_204_then_404_and_touches_nothing_else(agent):
    call(agent, "POST", "/v1/instances", POD)
    call(agent, "POST", "/v1/instances", {**POD, "entity_id": "pod-2"})
    before = call(agent, "GET", "/v1/instances").json()["instances"]

    first = call(agent, "DELETE", "/v1/instances/pod-1")
    second = call(agent, "DELETE", "/v1/instances/pod-1")

    assert (first.status, first.body) == (204, b"")
    assert second.status == 404
    assert second.json() == {"error": "no instance pod-1 on this node"}
    assert call(agent, "GET", "/v1/instances").json()["instances"] == [i for i in before if i["entity_id"] != "pod-1"]


def test_an_entity_id_is_url_decoded(agent):
    call(agent, "POST", "/v1/instances", {**POD, "entity_id": "ns:pod.1"})

    assert call(agent, "DELETE", "/v1/instances/ns%3Apod.1").status == 204
