"""A read that answers after a newer message does not bring back what the message ended.

The course page lists open sessions. When its socket opens it reads again each session still on
its way (``sessions.js``, ``refreshShown``): a stop asked for just before the page loaded would
otherwise never show. That read can be answered after the socket has already told the page the
session stopped, and the page has taken its row away; an answer older than the message must not
put the row back, stuck at "stopping" for good (seen once on CI after a stop-all).
"""

import threading
import time

import pytest
from django.utils import timezone
from playwright.sync_api import expect

from labs.models import LabSession
from labs.services.events import session_changes_publish
from labs.services.sessions import session_launch
from tests.browser.test_student_launch import log_in

pytestmark = [pytest.mark.browser, pytest.mark.slow]


def test_a_stale_read_does_not_put_back_the_row_of_a_session_that_stopped(world, portal_server, browser_page):
    session = session_launch(student=world["students"][0], course=world["course"], template=world["small"])
    LabSession.objects.filter(pk=session.pk).update(state="stopping", stopping_at=timezone.now(), version=session.version + 1)
    path = f"/sessions/{session.pk}/"
    answered = []

    def answer_after_the_stop(route):
        response = route.fetch()  # read now: the session is still stopping
        body = response.text()
        assert '"stopping"' in body
        # The stop ends and its message reaches the page before this answer does (sent from a
        # thread of its own: Playwright's event loop runs in this one).
        LabSession.objects.filter(pk=session.pk).update(state="stopped", ended_at=timezone.now(), version=session.version + 2)
        publish = threading.Thread(target=session_changes_publish, args=([session.pk],))
        publish.start()
        publish.join()
        time.sleep(1.0)
        route.fulfill(response=response, body=body)
        answered.append(True)

    page = browser_page
    page.route("**" + path, answer_after_the_stop)
    messages = []  # the socket's messages that tell of the stop

    def heard(frame) -> None:
        if '"stopped"' in str(frame):
            messages.append(frame)

    page.on("websocket", lambda socket: socket.on("framereceived", heard))
    log_in(page, portal_server, world["instructor"].username, lands_on="Courses you teach")
    page.goto(f"{portal_server}/courses/{world['course'].pk}/")
    row = page.locator(f"tr[data-session-id='{session.pk}']")
    page.wait_for_function(
        "(path) => performance.getEntriesByType('resource').some((e) => e.name.endsWith(path))", arg=path, timeout=15_000
    )
    assert answered == [True]
    page.wait_for_timeout(300)  # the answer's JSON read and applied
    assert messages, "the stop's message did not reach the page"

    expect(row).to_have_count(0)
