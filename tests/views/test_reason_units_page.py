"""A refusal that names memory or host CPU reads in GiB and cores on the student's page and in the
API, in either language, through the ASGI application, also for a reason stored in MiB and
millicores by an earlier release; the API's machine-readable code stays as it was."""

from __future__ import annotations

import pytest

from labs.domain.states import SessionState
from labs.models import LabSession
from tests.asgi_client import AsgiClient

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def waiting(world):
    # As a reason was stored before amounts were converted when shown: params in MiB and millicores.
    return LabSession.objects.create(
        course=world["course"],
        template=world["small"],
        student=world["students"][0],
        state=SessionState.QUEUED,
        reason_code="quota.host_cpu",
        reason_params={"used": 188500, "limit": 190000, "need": 2500},
    )


@pytest.mark.parametrize(
    ("language", "words"),
    [
        ("en", "course quota: host CPU: 188.5 cores of 190 cores in use; needs 2.5 cores more"),
        ("zh-hans", "课程配额：主机 CPU 已用 188.5 核 / 190 核；还需要 2.5 核"),
    ],
)
def test_the_student_reads_cores_not_millicores(world, waiting, language, words):
    client = AsgiClient(user=world["students"][0], language=language)

    page = client.get("/")
    detail = client.get(f"/sessions/{waiting.pk}/", headers={"Accept": "application/json"})

    assert page.status_code == 200 and words in page.text
    assert "millicores" not in page.text and "毫核" not in page.text and "188500" not in page.text
    assert detail.json()["session"]["reason"] == words
