"""What a student's stop POST, through the ASGI application, costs PostgreSQL in transactions
(issue 32: every lab of a class start is stopped again, and each transaction is work for the
database): one, the stop's own, which holds the session's and the user's reads and the check that
the session is the student's as well (the view opens it); and one more, in autocommit, after the
commit: the session's new state read for its pages (``session_changes_publish``)."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from labs.models import LabSession
from labs.services.sessions import session_launch
from tests.asgi_client import AsgiClient
from tests.served import POSTGRESQL_ONLY
from tests.views.test_launch_commits import measured

pytestmark = [POSTGRESQL_ONLY, pytest.mark.django_db(transaction=True)]


@pytest.mark.parametrize("accept", ["text/html", "application/json"])
@pytest.mark.parametrize("state", ["queued", "running"])
def test_a_stop_post_costs_one_transaction_and_its_pages_read_one_more(world, accept, state):
    sessions, responses = [], []

    def prepare(attempt: int) -> Callable[[], object]:
        student = world["students"][attempt]
        session = session_launch(student=student, course=world["course"], template=world["small"])
        LabSession.objects.filter(pk=session.pk).update(state=state)
        sessions.append(session)
        client = AsgiClient(user=student)
        client.get("/")  # the CSRF cookie
        return lambda: responses.append(client.post(f"/sessions/{session.pk}/stop/", data={}, headers={"Accept": accept}))

    _, idle, commits = measured(prepare)

    assert responses[-1].status_code == (200 if accept == "application/json" else 302), responses[-1].text[:500]
    assert LabSession.objects.get(pk=sessions[-1].pk).state == ("stopped" if state == "queued" else "stopping")
    assert commits - idle == 2, (commits, idle)
