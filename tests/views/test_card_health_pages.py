"""The operator sees each card's temperature, power and HBM use on the heatmap (and live, in its
JSON), and the node's driver, firmware and npu-smi versions."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import Permission
from django.test import Client

from labs.models import Card, Node
from tests.factories import UserFactory

GIB = 1024


@pytest.fixture
def operator(world):
    user = UserFactory(username="platform")
    user.user_permissions.add(Permission.objects.get(codename="operate_platform"))
    client = Client()
    client.force_login(user)
    return client


@pytest.fixture
def reported(world):
    node = world["node"]
    Card.objects.filter(node=node, index=1).update(temperature_celsius=37, power_milliwatts=251_700, memory_used_mib=36211)
    Card.objects.filter(node=node, index=6).update(temperature_celsius=38)  # npu-smi printed NA for its power
    Node.objects.filter(pk=node.pk).update(driver_version="24.1.rc3", firmware_version="7.5.0.1.129", npu_smi_version="24.1.rc3")
    return node


def cell(page: str, card: Card) -> str:
    return page.split(f'data-card="{card.pk}"', 1)[1].split("</a>", 1)[0]


def test_each_card_on_the_heatmap_shows_its_temperature_and_power_and_says_its_hbm_use(world, reported, operator):
    page = operator.get("/ops/").content.decode()

    card1 = Card.objects.get(node=reported, index=1)
    assert '<span data-field="temperature">37</span> °C · <span data-field="power">251.7</span> W' in cell(page, card1)
    tooltip = "Temperature: 37 °C · Power: 251.7 W · HBM in use: 35.362 GiB of 64 GiB"
    assert f'title="{tooltip}"' in cell(page, card1)
    card6 = Card.objects.get(node=reported, index=6)
    assert '<span data-field="power">–</span> W' in cell(page, card6)
    assert "Power: not reported · HBM in use: not reported" in page


def test_the_cluster_json_carries_the_readings_for_the_live_heatmap(world, reported, operator):
    cards = {c["index"]: c for c in operator.get("/ops/cluster.json").json()["nodes"][0]["cards"]}

    assert (cards[1]["temperature_celsius"], cards[1]["power_watts"], cards[1]["memory_used_mib"]) == (37, 251.7, 36211)
    assert (cards[6]["temperature_celsius"], cards[6]["power_watts"], cards[6]["memory_used_mib"]) == (38, None, None)


def test_the_node_shows_its_driver_firmware_and_npu_smi_versions(world, reported, operator):
    old = Node.objects.create(name="old-agent-node")

    page = operator.get("/ops/").content.decode()

    mine = page.split(f'data-node="{reported.name}"', 1)[1].split("</article>", 1)[0]
    assert "NPU driver 24.1.rc3 · firmware 7.5.0.1.129 · npu-smi 24.1.rc3" in mine
    theirs = page.split(f'data-node="{old.name}"', 1)[1].split("</article>", 1)[0]
    assert "NPU driver, firmware and npu-smi versions not reported" in theirs
    card = operator.get(f"/ops/cards/{Card.objects.get(node=reported, index=1).pk}/").content.decode()
    assert "NPU driver 24.1.rc3 · firmware 7.5.0.1.129 · npu-smi 24.1.rc3" in card
    assert "Temperature: 37 °C · Power: 251.7 W · HBM in use: 35.362 GiB of 64 GiB" in card
