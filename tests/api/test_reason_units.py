"""The API keeps a reason's code as stored and words it in GiB and cores, in the language asked for."""

from __future__ import annotations

import pytest

from labs.domain.states import SessionState
from labs.models import LabSession


@pytest.mark.parametrize(
    ("language", "words"),
    [
        ("en", "node memory: needs 8 GiB; the largest node has 6.5 GiB for lab sessions"),
        ("zh-hans", "节点内存：需要 8 GiB；最大的节点只有 6.5 GiB 可供实验会话使用"),
    ],
)
def test_a_session_reason_keeps_its_code_and_speaks_gib(world, api, language, words):
    session = LabSession.objects.create(
        course=world["course"],
        template=world["small"],
        student=world["students"][0],
        state=SessionState.QUEUED,
        reason_code="node.host_memory_too_small",
        reason_params={"need_mib": 8192, "largest_mib": 6656},
    )

    detail = api.call("GET", f"/api/v1/sessions/{session.pk}/", headers={"Accept-Language": language}).json()

    assert detail["reason_code"] == "node.host_memory_too_small"
    assert detail["reason"] == words
