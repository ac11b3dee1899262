"""A student whose lab waits while every NPU server is drained for maintenance reads that the
servers are closed for maintenance, in their language, through the ASGI application."""

from __future__ import annotations

import pytest

from labs.models import LabSession
from labs.services.allocation import allocation_pass
from labs.services.operations import node_drain
from labs.services.sessions import session_launch
from tests.asgi_client import AsgiClient
from tests.factories import UserFactory, node_with_cards

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def waiting(world):
    second = node_with_cards("n2")
    operator = UserFactory(username="platform")
    for node in (world["node"], second):
        node_drain(node=node, by=operator, reason="firmware upgrade")
    session = session_launch(student=world["students"][0], course=world["course"], template=world["small"])
    allocation_pass()
    return LabSession.objects.get(pk=session.pk)


def test_the_waiting_labs_reason_is_the_maintenance(world, waiting):
    assert waiting.state == "queued"
    assert waiting.reason_code == "capacity.maintenance"
    assert waiting.reason == "the NPU servers are closed for maintenance"


@pytest.mark.parametrize(
    ("language", "words", "not_words"),
    [
        ("en", "the NPU servers are closed for maintenance", "no healthy NPU card"),
        ("zh-hans", "NPU 服务器正在维护，暂不开放", "没有可用的健康 NPU 卡"),
    ],
)
def test_the_student_reads_it_in_their_language(world, waiting, language, words, not_words):
    page = AsgiClient(user=world["students"][0], language=language).get("/")

    assert page.status_code == 200
    assert words in page.text and not_words not in page.text
