"""A score owed to the LMS goes out once: a sweep leaves a score that waits for its retry alone,
two workers racing for one score post it once, and a score whose session ended in a process that
died right after its commit is posted, once, by a real worker that beat's sweep hands it to."""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor

import pytest
from django.db import connection
from django.utils import timezone

from labs.domain.reasons import Reason
from labs.models import CourseQuota, LabSession
from labs.services.sessions import session_stop
from lti.models import Context, Score
from lti.outbox import score_attempt
from lti.tasks import score_post_task, scores_pending_task
from tests.conftest import wait_for
from tests.crash_after_commit import commit_then_die
from tests.lti.platform import AGS_SCOPES, CLAIM, INSTRUCTOR, LEARNER

pytestmark = pytest.mark.django_db(transaction=True)
AGS = "https://purl.imsglobal.org/spec/lti-ags/claim/endpoint"


def scored_session(browser, platform, template) -> LabSession:
    """A student's session launched from a link that posts a score when it ends (queued: no worker runs)."""
    browser.launch(sub="teacher-1", roles=INSTRUCTOR)  # makes the course
    course = Context.objects.get().course
    CourseQuota.objects.create(course=course, core_percent=800, memory_mib=8 * 65536, instance_count=64)
    student = type(browser)(browser.tool_url, platform)
    landing = student.launch(
        sub="student-1",
        roles=LEARNER,
        **{
            CLAIM + "resource_link": {"id": "link-9"},
            CLAIM + "custom": {"npu_template": str(template.pk), "npu_score_on_end": "1"},
            AGS: {"scope": AGS_SCOPES, "lineitem": platform.url + "/lineitems/3"},
        },
    )
    assert landing.status_code == 302, landing.text
    session = LabSession.objects.get()
    assert Score.objects.filter(session=session, state=Score.State.PENDING, activity_progress="Completed").exists()
    assert score_attempt(session_id=session.pk) is True  # the launch's progress (Initialized) goes first
    assert [s["activityProgress"] for s in platform.scores] == ["Initialized"]
    platform.scores.clear()
    return session


def completed() -> Score:
    return Score.objects.get(activity_progress="Completed")


def end(session: LabSession) -> None:
    assert session_stop(session_id=session.pk, reason=Reason.of("session.stopped_by", who="student-1"))


def test_a_score_waiting_for_its_retry_is_not_posted_again_by_the_sweep(browser, platform, catalogue):
    session = scored_session(browser, platform, catalogue[0])
    end(session)
    platform.scores_status = 503

    assert score_post_task.apply(args=[str(session.pk)]).get() is False  # one attempt, refused
    score = completed()
    assert (score.state, score.attempts, score.lease_until) == ("pending", 1, None)
    assert score.next_attempt_at > timezone.now()  # the retry waits its backoff

    platform.scores_status = 200
    assert scores_pending_task.apply().get() == 0  # the sweep leaves it to its retry
    assert score_post_task.apply(args=[str(session.pk)]).get() is False  # a second task too
    assert platform.scores == []

    Score.objects.filter(activity_progress="Completed").update(next_attempt_at=timezone.now())  # its time comes
    assert scores_pending_task.apply().get() == 1
    assert score_post_task.apply(args=[str(session.pk)]).get() is True
    assert len(platform.scores) == 1 and completed().state == "sent"


def test_two_workers_racing_for_one_score_post_it_once(browser, platform, catalogue):
    session = scored_session(browser, platform, catalogue[0])
    end(session)
    platform.scores_delay = 1.0  # the winner's post takes a while: the other tries meanwhile

    def attempt(_):
        try:
            return score_attempt(session_id=session.pk)
        finally:
            connection.close()

    with ThreadPoolExecutor(2) as pool:
        outcomes = list(pool.map(attempt, range(2)))

    assert sorted(outcomes, key=str) == [None, True]
    assert len(platform.scores) == 1
    score = completed()
    assert (score.state, score.attempts) == ("sent", 1)


@pytest.mark.slow
def test_a_score_whose_session_ended_in_a_process_that_died_after_the_commit_is_posted_once(
    browser, platform, catalogue, start_worker
):
    session = scored_session(browser, platform, catalogue[0])

    commit_then_die("stop", str(session.pk))

    assert LabSession.objects.get().state == "stopped"  # the end committed; its send never went
    worker = start_worker(concurrency=2, beat=True, LTI_SCORE_SWEEP_SECONDS="0.5")
    wait_for(
        lambda: platform.scores,
        timeout=60,
        message=lambda: f"a score; scores: {list(Score.objects.values())}; worker log:\n{worker.output()[-4000:]}",
    )
    wait_for(lambda: completed().state == "sent", timeout=10, message="the score marked sent")
    time.sleep(2)  # four more sweeps: none posts it again
    (posted,) = platform.scores
    assert (posted["userId"], posted["scoreGiven"], posted["_lineitem"]) == ("student-1", 1.0, "/lineitems/3")
    assert completed().attempts == 1
