"""The outbox of what the tool owes platforms through Assignment and Grade Services (``lti.Score``
rows, written by ``lti.grading``): each row claimed by one worker, posted in its session's order,
retried with backoff, swept by beat when its send was lost, pruned once sent."""

from __future__ import annotations

import logging
from datetime import UTC, datetime, timedelta

from django.conf import settings
from django.db.models import Exists, F, OuterRef, Q
from django.utils import timezone

from labs import dispatch
from lti import grading
from lti.models import ActivityProgress, Score
from lti.services import _safe_error
from lti.tool import service_connector

logger = logging.getLogger(__name__)

SCORE_TASK = grading.SCORE_TASK


def _score_due(now) -> Q:
    """Pending, due and held by no worker: every condition on the score's own row, so an UPDATE
    that waited for another worker's claim re-checks the lease that worker wrote, and finds it taken."""
    return Q(state=Score.State.PENDING, next_attempt_at__lte=now) & (Q(lease_until__isnull=True) | Q(lease_until__lte=now))


def _score_behind() -> Exists:
    """An earlier row of the same session is still to go: a session's rows go out in order."""
    return Exists(
        Score.objects.filter(
            session_id=OuterRef("session_id"),
            state=Score.State.PENDING,
            next_attempt_at__isnull=False,
            occurred_at__lt=OuterRef("occurred_at"),
        )
    )


def score_retry_seconds(attempt: int) -> float:
    """How long to wait after failed attempt number ``attempt`` (1, 2, ...): ``LTI_SCORE_RETRY_BASE_SECONDS``,
    doubling each time, at most ``LTI_SCORE_RETRY_MAX_SECONDS``."""
    return min(settings.LTI_SCORE_RETRY_MAX_SECONDS, settings.LTI_SCORE_RETRY_BASE_SECONDS * 2 ** min(attempt - 1, 30))


def score_attempt(*, session_id) -> bool | None:
    """Post what a session owes (its progress and its score, ``lti.grading``), each row that is
    due and held by no other worker, in the order they happened; stop at the first failure.

    The claim is a conditional UPDATE that counts the attempt and sets a lease (long enough for
    the access token and the post, each within ``LTI_HTTP_TIMEOUT_SECONDS``): a worker that dies
    while posting leaves a lease that runs out, and beat's sweep tries again. A failure is tried
    again ``score_retry_seconds`` later, until ``LTI_SCORE_MAX_ATTEMPTS``: then the score has
    failed. Returns ``True`` when a row went out (and none failed), ``False`` when an attempt
    failed, ``None`` when there was nothing to do (not due, sent, given up, or another worker has it).
    """
    outcome = None
    while (posted := _score_attempt_next(session_id)) is not None:
        if not posted:
            return False
        outcome = True
    return outcome


def _score_attempt_next(session_id) -> bool | None:
    """``score_attempt`` for the session's first row that is due."""
    now = timezone.now()
    lease = now + timedelta(seconds=6 * settings.LTI_HTTP_TIMEOUT_SECONDS + 1)  # line item, token, post
    first = (
        Score.objects.filter(_score_due(now), session_id=session_id)
        .exclude(_score_behind())
        .order_by("occurred_at", "pk")
        .values_list("pk", flat=True)
        .first()
    )
    if first is None:
        return None
    if Score.objects.filter(_score_due(now), pk=first).update(lease_until=lease, attempts=F("attempts") + 1) != 1:
        return None
    score = Score.objects.select_related("resource_link__context__registration").get(pk=first)
    try:
        _score_put(score)
    except Exception as exc:
        error = _safe_error(exc)
        mine = Score.objects.filter(pk=score.pk, state=Score.State.PENDING, lease_until=lease)
        if score.attempts >= settings.LTI_SCORE_MAX_ATTEMPTS:
            logger.warning("LTI score of session %s not posted, giving up: %s", session_id, error)
            mine.update(state=Score.State.FAILED, last_error=error, lease_until=None, next_attempt_at=None)
        else:
            delay = score_retry_seconds(score.attempts)
            logger.info("LTI score of session %s not posted yet (%s); trying again in %.0f s", session_id, error, delay)
            if mine.update(last_error=error, lease_until=None, next_attempt_at=timezone.now() + timedelta(seconds=delay)):
                dispatch.send(SCORE_TASK, str(session_id), countdown=delay)
        return False
    # Whoever holds the lease now: the platform has the score, so it is sent.
    Score.objects.filter(pk=score.pk, state=Score.State.PENDING).update(
        state=Score.State.SENT, sent_at=timezone.now(), lease_until=None, next_attempt_at=None, last_error=""
    )
    return True


def _score_put(score: Score) -> None:
    """Post ``score`` (its progress, and its score when it has one) to the link's line item,
    made first if the tool manages it (``grading.lineitem_ensure``); raises on a platform error.
    The timestamp is when it happened: the platform keeps the latest, whatever arrives last."""
    from pylti1p3.assignments_grades import AssignmentsGradesService
    from pylti1p3.grade import Grade
    from pylti1p3.lineitem import LineItem

    link = score.resource_link
    lineitem_url = link.lineitem_url or grading.lineitem_ensure(link_id=link.pk)
    ags = AssignmentsGradesService(
        service_connector(link.context.registration), {"scope": link.ags_scopes, "lineitem": lineitem_url}
    )
    grade = (
        Grade()
        .set_timestamp((score.occurred_at or datetime.now(UTC)).isoformat())
        .set_activity_progress(score.activity_progress)
        .set_grading_progress(grading.grading_progress(score))
        .set_user_id(score.subject)
    )
    if score.score_given is not None:
        grade.set_score_given(score.score_given).set_score_maximum(link.score_maximum)
    ags.put_grade(grade, LineItem({"id": lineitem_url}))


def scores_due(*, limit: int = 500) -> list:
    """Sessions with a row due and held by no worker: its send was lost, or its retry's."""
    now = timezone.now()
    due = Score.objects.filter(_score_due(now)).order_by("next_attempt_at", "pk").values_list("session_id", flat=True)
    return list(dict.fromkeys(due[:limit]))


def scores_prune(*, now: datetime | None = None) -> int:
    """Delete the rows sent more than ``LTI_SCORE_RETENTION_DAYS`` ago (pending and failed ones
    stay, and ``Initialized`` ones: one per student and link, they say the student has begun it,
    so a later session posts no progress over the grade); returns how many."""
    cutoff = (now or timezone.now()) - timedelta(days=settings.LTI_SCORE_RETENTION_DAYS)
    sent = Score.objects.filter(state=Score.State.SENT, sent_at__lt=cutoff)
    deleted, _ = sent.exclude(activity_progress=ActivityProgress.INITIALIZED).delete()
    return deleted
