"""A lab posts its own score to the portal with its session's secret (through the ASGI application):
the score goes to the LMS when the session ends; a wrong secret, another session's, a value out of
range or not a number, or an activity that takes no score from its lab are refused and change nothing.
An activity scored on time on the NPU posts the minutes run against the instructor's target."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from labs.drivers import get_driver
from labs.models import LabSession
from lti.models import Score
from lti.outbox import score_attempt
from tests.asgi_client import AsgiClient
from tests.lti.grading import course_from_lms, end, progress, run, student_launch

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture(autouse=True)
def labs_deleted():
    yield
    driver = get_driver()
    for session_id in driver.list():
        driver.delete(session_id)


def post_score(session_id, body=None, *, token: str | None, raw: bytes | None = None):
    headers = {"Authorization": f"Bearer {token}"} if token is not None else {}
    if raw is not None:
        return AsgiClient().request("POST", f"/lti/sessions/{session_id}/score/", content=raw, headers=headers)
    return AsgiClient().request("POST", f"/lti/sessions/{session_id}/score/", json=body, headers=headers)


def test_a_score_the_lab_posts_with_its_token_reaches_the_lms_when_the_session_ends(browser, platform, catalogue):
    course_from_lms(browser)
    session = run(student_launch(browser, platform, catalogue[0], npu_score_source="lab"))

    first = post_score(session.pk, {"scoreGiven": 40}, token=session.secret)
    again = post_score(session.pk, {"scoreGiven": 87.5}, token=session.secret)  # the lab's last word counts

    assert first.status_code == 200 and again.status_code == 200, again.text
    assert again.json() == {"scoreGiven": 87.5, "scoreMaximum": 100}
    end(session)
    assert score_attempt(session_id=session.pk) is True
    assert progress(platform) == [
        ("Initialized", "NotReady"),
        ("Started", "NotReady"),
        ("InProgress", "NotReady"),  # a lab that reports is in use
        ("Completed", "FullyGraded"),
    ]
    completed = platform.scores[-1]
    assert (completed["scoreGiven"], completed["scoreMaximum"], completed["userId"]) == (87.5, 100, "student-1")
    assert all("scoreGiven" not in s for s in platform.scores[:3])
    assert set(Score.objects.values_list("state", flat=True)) == {"sent"}


def test_a_wrong_token_another_sessions_token_and_bad_values_are_refused_and_change_nothing(browser, platform, catalogue):
    course_from_lms(browser)
    mine = run(student_launch(browser, platform, catalogue[0], npu_score_source="lab"))
    theirs = run(student_launch(browser, platform, catalogue[0], sub="student-2", npu_score_source="lab"))
    assert post_score(mine.pk, {"scoreGiven": 30}, token=mine.secret).status_code == 200

    refusals = [
        (post_score(mine.pk, {"scoreGiven": 90}, token=None), 401, "Authorization: Bearer"),
        (post_score(mine.pk, {"scoreGiven": 90}, token="not-the-secret"), 404, "No lab session has this id and token."),
        (post_score(mine.pk, {"scoreGiven": 90}, token=theirs.secret), 404, "No lab session has this id and token."),
        (post_score(mine.pk, {"scoreGiven": 100.5}, token=mine.secret), 400, "scoreGiven must be between 0 and 100."),
        (post_score(mine.pk, {"scoreGiven": -1}, token=mine.secret), 400, "scoreGiven must be between 0 and 100."),
        (post_score(mine.pk, {"scoreGiven": "90"}, token=mine.secret), 400, "scoreGiven must be a number."),
        (post_score(mine.pk, {"scoreGiven": True}, token=mine.secret), 400, "scoreGiven must be a number."),
        (post_score(mine.pk, raw=b'{"scoreGiven": NaN}', token=mine.secret), 400, "scoreGiven must be a number."),
        (post_score(mine.pk, {"score": 90}, token=mine.secret), 400, '"scoreGiven"'),
        (post_score(mine.pk, raw=b"90", token=mine.secret), 400, '"scoreGiven"'),
    ]

    for response, status, words in refusals:
        assert (response.status_code, words in response.json()["error"]) == (status, True), response.text
    given = dict(Score.objects.filter(activity_progress="Completed").values_list("session_id", "score_given"))
    assert given == {mine.pk: 30.0, theirs.pk: None}
    end(mine)
    ended = post_score(mine.pk, {"scoreGiven": 90}, token=mine.secret)
    assert ended.status_code == 409 and "not running" in ended.json()["error"]


def test_an_activity_that_takes_no_score_from_its_lab_refuses_one(browser, platform, catalogue):
    course_from_lms(browser)
    session = run(student_launch(browser, platform, catalogue[0]))  # full marks at the end

    response = post_score(session.pk, {"scoreGiven": 1}, token=session.secret)

    assert response.status_code == 409
    assert response.json() == {"error": "This session's LMS activity does not take a score from the lab."}
    assert Score.objects.get(session=session, activity_progress="Completed").score_given is None


def test_a_lab_that_reported_nothing_leaves_the_grade_to_the_instructor(browser, platform, catalogue):
    course_from_lms(browser)
    session = run(student_launch(browser, platform, catalogue[0], npu_score_source="lab"))

    end(session)
    score_attempt(session_id=session.pk)

    assert progress(platform)[-1] == ("Completed", "PendingManual")
    assert "scoreGiven" not in platform.scores[-1]


def test_time_on_the_npu_scores_the_minutes_run_against_the_instructors_target(browser, platform, catalogue):
    course_from_lms(browser)
    session = run(student_launch(browser, platform, catalogue[0], npu_score_source="npu_time", npu_target_minutes="60"))
    LabSession.objects.filter(pk=session.pk).update(running_at=timezone.now() - timedelta(minutes=30))  # it ran 30 minutes

    end(session)
    score_attempt(session_id=session.pk)

    completed = platform.scores[-1]
    assert (completed["activityProgress"], completed["gradingProgress"], completed["scoreMaximum"]) == (
        "Completed",
        "FullyGraded",
        100,
    )
    assert 50 <= completed["scoreGiven"] < 51  # half the target: half the marks
