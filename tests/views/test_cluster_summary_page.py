"""The operator's cluster page, through the ASGI application as Daphne serves it, counts drained
and unready nodes and does not call the cluster whole when it is not, in English and Chinese."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import Permission

from labs.domain.reasons import Reason
from labs.models import Node
from tests.asgi_client import AsgiClient
from tests.factories import UserFactory, node_with_cards

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def platform(db):
    user = UserFactory(username="platform")
    user.user_permissions.add(Permission.objects.get(codename="operate_platform"))
    return user


@pytest.fixture
def eight_nodes(db):
    nodes = [node_with_cards(f"n{i}", cards=2) for i in range(8)]
    Node.objects.filter(pk__in=[nodes[0].pk, nodes[1].pk]).update(drained=True, drain_reason="firmware upgrade")
    reason = Reason.of("readiness.driver_too_old", version="24.1.rc3", profile="FlexNPU", minimum="25.2.0")
    Node.objects.filter(pk=nodes[2].pk).update(readiness_code=reason.code, readiness_params=reason.to_json()["params"])
    return nodes


def test_the_page_counts_drained_and_unready_nodes_in_english(platform, eight_nodes):
    page = AsgiClient(user=platform, language="en").get("/ops/")

    assert page.status_code == 200
    assert "2 of 8 nodes drained, 1 not ready, 0 not answering: they take no new labs." in page.text
    assert "16 cards: 0 full, 6 not taking sessions." in page.text
    assert "Nothing is stranded: every card" not in page.text
    assert "Nothing is stranded on the nodes that take labs" in page.text


def test_the_page_counts_drained_and_unready_nodes_in_chinese(platform, eight_nodes):
    page = AsgiClient(user=platform, language="zh-hans").get("/ops/")

    assert page.status_code == 200
    assert "8 个节点中 2 个已排空，1 个未就绪，0 个无响应：它们不接受新的实验。" in page.text
    assert "共 16 张卡：0 张已满，6 张不接受会话。" in page.text
    assert "没有碎片：每张尚有空闲资源的卡都还能容纳实例。" not in page.text


def test_the_live_state_carries_the_counts_in_the_readers_language(platform, eight_nodes):
    english = AsgiClient(user=platform, language="en").get("/ops/cluster.json").json()["summary"]
    chinese = AsgiClient(user=platform, language="zh-hans").get("/ops/cluster.json").json()["summary"]

    assert (english["drained"], english["unready"], english["cards_not_taking"]) == (2, 1, 6)
    assert english["nodes_text"].startswith("2 of 8 nodes drained, 1 not ready")
    assert chinese["nodes_text"].startswith("8 个节点中 2 个已排空")


def test_a_whole_cluster_says_every_node_takes_labs(platform):
    node_with_cards("n1", cards=2)

    page = AsgiClient(user=platform, language="en").get("/ops/")

    assert "1 node, taking labs." in page.text
    assert "Nothing is stranded: every card with free capacity can still take an instance." in page.text
