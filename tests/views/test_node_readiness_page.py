"""The operator console shows each node that is not ready for its device profile, and why, on the
heatmap and in its live JSON."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import Permission
from django.test import Client

from labs.domain.reasons import Reason
from labs.models import Node
from tests.factories import UserFactory


@pytest.fixture
def operator(world):
    user = UserFactory(username="platform")
    user.user_permissions.add(Permission.objects.get(codename="operate_platform"))
    client = Client()
    client.force_login(user)
    return client


@pytest.fixture
def unready(world):
    reason = Reason.of("readiness.driver_too_old", version="24.1.rc3", profile="FlexNPU", minimum="25.2.0")
    Node.objects.filter(pk=world["node"].pk).update(readiness_code=reason.code, readiness_params=reason.to_json()["params"])
    return world["node"]


def test_an_unready_node_is_marked_on_the_heatmap_with_its_reason(world, unready, operator):
    ready = Node.objects.create(name="ready-node")

    page = operator.get("/ops/").content.decode()

    article = page.split(f'data-node="{unready.name}"', 1)[1].split("</article>", 1)[0]
    assert '<span class="badge">not ready</span>' in article
    assert "Takes no new labs: not ready for FlexNPU: the NPU driver (HDK) is 24.1.rc3; 25.2.0 or newer is needed" in article
    other = page.split(f'data-node="{ready.name}"', 1)[1].split("</article>", 1)[0]
    assert "not ready" not in other and "data-node-readiness" not in other


def test_the_cluster_json_carries_the_reason(world, unready, operator):
    nodes = {n["name"]: n for n in operator.get("/ops/cluster.json").json()["nodes"]}

    assert nodes[unready.name]["unready_reason"].startswith("not ready for FlexNPU: the NPU driver (HDK) is 24.1.rc3")
