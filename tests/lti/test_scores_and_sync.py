"""Scores that cannot be posted, tenant-scoped deep links, and the periodic roster sync."""

from __future__ import annotations

import logging
import time
from datetime import timedelta

import pytest
import redis
from django.conf import settings
from django.utils import timezone

from labs.domain.reasons import Reason
from labs.models import CourseQuota, Enrollment, LabSession
from labs.services.sessions import session_stop
from lti.models import Context, LaunchData, Score
from lti.outbox import score_attempt
from lti.tasks import launch_data_prune_task, roster_sync_all_task, roster_sync_task, scores_prune_task
from tests.factories import InstitutionFactory, TemplateFactory
from tests.lti.platform import AGS_SCOPES, CLAIM, INSTRUCTOR, LEARNER

pytestmark = pytest.mark.django_db(transaction=True)
AGS = "https://purl.imsglobal.org/spec/lti-ags/claim/endpoint"


def _student_launch(browser, platform, template_id, *, score: bool = True):
    browser.launch(sub="teacher-1", roles=INSTRUCTOR)  # makes the course
    course = Context.objects.get().course
    CourseQuota.objects.create(course=course, core_percent=800, memory_mib=8 * 65536, instance_count=64)
    student = type(browser)(browser.tool_url, platform)
    custom = {"npu_template": str(template_id), **({"npu_score_on_end": "1"} if score else {})}
    landing = student.launch(
        sub="student-1",
        roles=LEARNER,
        **{
            CLAIM + "resource_link": {"id": "link-9"},
            CLAIM + "custom": custom,
            AGS: {"scope": AGS_SCOPES, "lineitem": platform.url + "/lineitems/3"},
        },
    )
    for session in LabSession.objects.all():
        score_attempt(session_id=session.pk)  # the launch's progress (Initialized): these tests are about the score
    platform.scores.clear()
    return course, landing


def test_a_score_the_platform_refuses_is_retried_then_given_up_without_logging_secrets(
    browser, platform, catalogue, caplog, settings
):
    settings.LTI_SCORE_RETRY_BASE_SECONDS = 0.05
    _course, landing = _student_launch(browser, platform, catalogue[0].pk)
    assert landing.status_code == 302
    session = LabSession.objects.get()
    session_stop(session_id=session.pk, reason=Reason.of("session.stopped_by", who="student-1"))
    platform.scores_status = 503

    outcomes = []
    with caplog.at_level(logging.INFO):
        deadline = time.monotonic() + 30
        while Score.objects.filter(session=session, state=Score.State.PENDING).exists() and time.monotonic() < deadline:
            outcome = score_attempt(session_id=session.pk)  # None until the retry is due
            if outcome is not None:
                outcomes.append(outcome)

    assert outcomes == [False] * 6
    score = Score.objects.get(session=session, activity_progress="Completed")
    assert score.state == Score.State.FAILED
    assert score.attempts == 6
    assert "HTTP 503" in score.last_error
    assert platform.scores == []
    for token in platform.tokens_issued:
        assert token not in caplog.text and token not in score.last_error
    assert "BEGIN" not in caplog.text  # no key material


def test_a_session_without_a_scored_link_owes_no_score(browser, platform, catalogue):
    _student_launch(browser, platform, catalogue[0].pk, score=False)
    broker = redis.Redis.from_url(settings.CELERY_BROKER_URL)
    broker.delete("celery")

    session_stop(session_id=LabSession.objects.get().pk, reason=Reason.of("session.stopped_by", who="student-1"))

    assert not Score.objects.exists()
    assert not any(b"lti.tasks.score_post" in m for m in broker.lrange("celery", 0, -1))


def test_a_link_naming_another_institutions_template_launches_nothing(browser, platform, catalogue):
    foreign = TemplateFactory(institution=InstitutionFactory(slug="elsewhere"), name="Foreign lab")

    course, landing = _student_launch(browser, platform, foreign.pk)

    assert landing.status_code == 302 and landing.headers["Location"] == "/"
    assert not LabSession.objects.exists()
    assert not course.templates.filter(pk=foreign.pk).exists()


def test_beat_syncs_every_linked_course_from_its_platform(browser, platform):
    browser.launch(sub="teacher-1", roles=INSTRUCTOR)
    context = Context.objects.get()
    platform.members = [
        {"user_id": "teacher-1", "roles": INSTRUCTOR, "status": "Active"},
        {"user_id": "s-9", "roles": LEARNER, "status": "Active"},
        {"user_id": "s-10", "roles": LEARNER, "status": "Inactive"},
    ]
    broker = redis.Redis.from_url(settings.CELERY_BROKER_URL)
    broker.delete("celery")

    assert roster_sync_all_task.apply().get() == 1
    assert any(b"lti.tasks.roster_sync" in m for m in broker.lrange("celery", 0, -1))
    assert roster_sync_task.apply(args=[context.pk]).get() == {"added": 1, "changed": 0, "removed": 0}

    subjects = set(Enrollment.objects.filter(course=context.course).values_list("user__lti_identities__subject", flat=True))
    assert subjects == {"teacher-1", "s-9"}
    assert "lti-roster-sync" in settings.CELERY_BEAT_SCHEDULE


def test_a_platform_that_hangs_costs_the_instructor_the_timeout_not_the_request(browser, platform, settings):
    settings.LTI_HTTP_TIMEOUT_SECONDS = 1
    platform.memberships_delay = 5
    browser.launch(sub="teacher-1", roles=INSTRUCTOR)
    course = Context.objects.get().course
    roster = browser.get(f"/courses/{course.pk}/roster/")

    started = time.monotonic()
    response = browser.post_form(f"/lti/courses/{course.pk}/roster-sync/", roster.text, {})

    assert time.monotonic() - started < 4
    assert response.status_code == 302
    assert "did not answer" in browser.get(f"/courses/{course.pk}/roster/").text


def test_expired_launch_data_is_pruned(browser, platform):
    browser.authenticate()  # leaves state and a nonce behind
    assert LaunchData.objects.exists()
    LaunchData.objects.update(expires_at=timezone.now() - timedelta(seconds=1))

    assert launch_data_prune_task.apply().get() >= 1
    assert not LaunchData.objects.exists()


def test_sent_scores_older_than_the_retention_are_pruned_and_pending_failed_young_and_initialized_ones_kept(
    browser, platform, catalogue
):
    course, _landing = _student_launch(browser, platform, catalogue[0].pk)
    initialized = Score.objects.get(activity_progress="Initialized", state="sent")
    first = Score.objects.get(activity_progress="Completed")
    others = LabSession.objects.bulk_create(
        LabSession(
            student=first.session.student,
            course=course,
            template=catalogue[0],
            state="stopped",
            ended_at=timezone.now(),
            secret="x",
        )
        for _ in range(3)
    )
    for session in others:
        Score.objects.create(session=session, resource_link=first.resource_link, subject=first.subject)
    old, young, failed, pending = Score.objects.filter(activity_progress="Completed").order_by("pk")
    long_ago = timezone.now() - timedelta(days=30, minutes=1)
    Score.objects.filter(pk=old.pk).update(state="sent", sent_at=long_ago)
    # Kept however old: the student has begun the link, so a later session posts no progress over the grade.
    Score.objects.filter(pk=initialized.pk).update(sent_at=long_ago)
    Score.objects.filter(pk=young.pk).update(state="sent", sent_at=timezone.now() - timedelta(days=29))
    Score.objects.filter(pk=failed.pk).update(state="failed", sent_at=None, last_error="HTTP 503")
    Score.objects.filter(pk=pending.pk).update(next_attempt_at=long_ago)

    assert scores_prune_task.apply().get() == 1

    assert set(Score.objects.values_list("pk", flat=True)) == {initialized.pk, young.pk, failed.pk, pending.pk}
    assert settings.CELERY_BEAT_SCHEDULE["lti-scores-prune"] == {"task": scores_prune_task.name, "schedule": 3600.0}
