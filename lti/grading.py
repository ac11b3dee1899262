"""Grades beyond a fixed 1.0 (LTI Assignment and Grade Services 2.0): the progress a session
reaches, the score of its end, and the line item the tool makes itself.

Every post is a row of the outbox (``lti.models.Score``) written in the transaction of the
change it tells of, so it commits with the change or not at all; ``lti.outbox.score_attempt``
posts the rows of a session in the order they happened, each at most once.

* ``Initialized``: a student's first launch of the resource link (a later session of the same
  link posts no progress: the platform would take a newer ``Initialized`` over the grade).
* ``Started``: the lab runs (the ``session.running`` event).
* ``InProgress``: the lab is used: the idle check saw activity (``session.active``), or the lab
  reported a score.
* ``Completed``: the session stopped; its score is worked out then (``score_on_end``), from the
  link's ``score_source``: full marks, minutes of running lab against the instructor's target
  (over the student's sessions of the link), or the last value the lab reported (none:
  ``PendingManual``, the instructor grades).
"""

from __future__ import annotations

import hmac
import math
from collections.abc import Sequence
from datetime import timedelta

from django.db import transaction
from django.utils import timezone
from django.utils.translation import gettext as _

from labs import dispatch
from labs.domain.states import SessionState
from labs.models import LabSession
from labs.services.events import SessionEvent
from lti.models import ActivityProgress, ResourceLink, Score, ScoreSource
from lti.selectors import completed_score_waits
from lti.tool import service_connector

SCORE_TASK = "lti.tasks.score_post"
SCORE_SCOPE = "https://purl.imsglobal.org/spec/lti-ags/scope/score"
LINEITEM_SCOPE = "https://purl.imsglobal.org/spec/lti-ags/scope/lineitem"
# The tag of the line items the tool makes (one per resource link, found again by its id).
LINEITEM_TAG = "npu-lab"
# Custom parameters a deep link puts on the resource link it creates (besides lti.services').
SOURCE_PARAM = "npu_score_source"
TARGET_PARAM = "npu_target_minutes"
MAXIMUM_PARAM = "npu_score_maximum"
DEFAULT_TARGET_MINUTES = 60
MAX_TARGET_MINUTES = 10_000
MAX_SCORE_MAXIMUM = 1000
_PROGRESS_OF_EVENT = {"session.running": ActivityProgress.STARTED, "session.active": ActivityProgress.IN_PROGRESS}


def link_settings(custom: dict) -> dict[str, object]:
    """The grading fields of a resource link from its launch's custom parameters (the deep
    link's): ``score_source``, ``score_maximum`` and ``target_minutes``. An unknown source or a
    number out of range falls back to the default (a launch is not refused for it)."""
    source = str(custom.get(SOURCE_PARAM) or "")
    if source not in ScoreSource.values:
        source = ScoreSource.COMPLETION
    maximum = _bounded(custom.get(MAXIMUM_PARAM), 1, MAX_SCORE_MAXIMUM)
    if maximum is None:
        maximum = 1 if source == ScoreSource.COMPLETION else 100
    target = _bounded(custom.get(TARGET_PARAM), 1, MAX_TARGET_MINUTES)
    if source != ScoreSource.NPU_TIME:
        target = None
    elif target is None:
        target = DEFAULT_TARGET_MINUTES
    return {"score_source": source, "score_maximum": maximum, "target_minutes": target}


def deep_link_custom(*, source: str, target_minutes: str) -> dict[str, str]:
    """The custom parameters an instructor's choice on the deep-linking page puts on the link:
    none for an ungraded activity (``source`` empty), else the source (``"1"``, the page's old
    checkbox, is full marks) and, for time on the NPU, the target in minutes. ``ValueError``
    with the message for the instructor on a choice the page does not offer."""
    source = ScoreSource.COMPLETION if source == "1" else source
    if not source:
        return {}
    if source not in ScoreSource.values:
        raise ValueError(_("Choose how the activity is graded."))
    custom = {SOURCE_PARAM: source}
    if source == ScoreSource.NPU_TIME:
        if _bounded(target_minutes.strip(), 1, MAX_TARGET_MINUTES) is None:
            raise ValueError(_("The target is a whole number of minutes from 1 to %(most)d.") % {"most": MAX_TARGET_MINUTES})
        custom[TARGET_PARAM] = target_minutes.strip()
    return custom


def _bounded(value: object, low: int, high: int) -> int | None:
    text = str(value or "")
    if not text.isdecimal() or not low <= int(text) <= high:  # not isdigit(): "²" is a digit int() refuses
        return None
    return int(text)


def link_grades(link: ResourceLink) -> bool:
    """Whether the link posts grades: scored, with the score scope, and a line item to post to
    (the launch's, or a container the tool may make one in)."""
    if not link.score_on_end or SCORE_SCOPE not in link.ags_scopes:
        return False
    return bool(link.lineitem_url or (link.lineitems_url and LINEITEM_SCOPE in link.ags_scopes))


def scores_owe(*, session: LabSession, link: ResourceLink, subject: str) -> None:
    """In the launch's transaction: the rows the new ``session`` owes the platform. ``Initialized``
    (due now) on the student's first session of the link, and its ``Completed``, due at its end."""
    now = timezone.now()
    first = not Score.objects.filter(resource_link=link, subject=subject).exists()
    rows = [Score(session=session, resource_link=link, subject=subject, activity_progress=ActivityProgress.COMPLETED)]
    if first:
        rows.append(
            Score(
                session=session,
                resource_link=link,
                subject=subject,
                activity_progress=ActivityProgress.INITIALIZED,
                occurred_at=now,
                next_attempt_at=now,
            )
        )
        _send_on_commit(session.pk)
    Score.objects.bulk_create(rows)


def progress_record(session_ids: Sequence[str], progress: ActivityProgress, *, at=None) -> list[str]:
    """In the caller's transaction: owe ``progress`` (due now) for those of these sessions that
    post progress (they have an ``Initialized`` row) and do not owe it yet; returns them."""
    tracked = dict(
        Score.objects.filter(session_id__in=list(session_ids), activity_progress=ActivityProgress.INITIALIZED).values_list(
            "session_id", "pk"
        )
    )
    if not tracked:
        return []
    done = set(
        Score.objects.filter(session_id__in=list(tracked), activity_progress=progress).values_list("session_id", flat=True)
    )
    new = [sid for sid in tracked if sid not in done]
    if not new:
        return []
    at = at or timezone.now()
    first = {s.session_id: s for s in Score.objects.filter(pk__in=[tracked[sid] for sid in new])}
    # ignore_conflicts: a concurrent transaction owing the same progress wrote it first (the
    # unique row per session and progress), and that one is posted.
    Score.objects.bulk_create(
        [
            Score(
                session_id=sid,
                resource_link_id=first[sid].resource_link_id,
                subject=first[sid].subject,
                activity_progress=progress,
                occurred_at=at,
                next_attempt_at=at,
            )
            for sid in new
        ],
        ignore_conflicts=True,
    )
    for sid in new:
        _send_on_commit(sid)
    return [str(sid) for sid in new]


def session_events(events: Sequence[SessionEvent]) -> None:
    """``settings.LAB_SESSION_EVENT_HOOKS``: a lab running owes ``Started``, one in use ``InProgress``."""
    for kind, progress in _PROGRESS_OF_EVENT.items():
        ids = [e.session_id for e in events if e.kind == kind]
        if ids:
            progress_record(ids, progress, at=max(e.at for e in events if e.kind == kind))


def session_completed(session_id) -> None:
    """In the transaction that ended the session: a stopped session's ``Completed`` row gets its
    score and becomes due (sent to a worker on commit); a failed one owes none."""
    if not completed_score_waits(session_id):
        return  # most sessions: none (a written-out check; the locking read below is the ORM's)
    due = Score.objects.select_for_update().filter(
        session_id=session_id,
        activity_progress=ActivityProgress.COMPLETED,
        state=Score.State.PENDING,
        next_attempt_at__isnull=True,
    )
    score = due.select_related("resource_link", "session").first()
    if score is None:
        return
    if score.session.state != SessionState.STOPPED:
        due.delete()
        return
    now = timezone.now()
    Score.objects.filter(pk=score.pk).update(score_given=score_of(score), occurred_at=now, next_attempt_at=now)
    _send_on_commit(session_id)


def score_of(score: Score) -> float | None:
    """The score a ``Completed`` row posts, in ``0 .. score_maximum``; ``None``: none yet."""
    link = score.resource_link
    if link.score_source == ScoreSource.LAB:
        if score.score_given is not None:
            return score.score_given
        earlier = Score.objects.filter(
            resource_link=link,
            subject=score.subject,
            activity_progress=ActivityProgress.COMPLETED,
            score_given__isnull=False,
        ).exclude(pk=score.pk)
        return earlier.order_by("-occurred_at", "-pk").values_list("score_given", flat=True).first()
    if link.score_source == ScoreSource.NPU_TIME:
        sessions = LabSession.objects.filter(
            lti_scores__resource_link=link,
            lti_scores__subject=score.subject,
            lti_scores__activity_progress=ActivityProgress.COMPLETED,
            running_at__isnull=False,
            ended_at__isnull=False,
        )
        ran = sum(((s.ended_at - s.running_at) for s in sessions.only("running_at", "ended_at")), timedelta())
        target = link.target_minutes or DEFAULT_TARGET_MINUTES
        return round(min(1.0, ran.total_seconds() / 60 / target) * link.score_maximum, 2)
    return float(link.score_maximum)


def grading_progress(score: Score) -> str:
    """AGS ``gradingProgress``: ``NotReady`` before the end, ``FullyGraded`` with a score, and
    ``PendingManual`` at an end without one (the lab reported nothing: the instructor grades)."""
    if score.activity_progress != ActivityProgress.COMPLETED:
        return "NotReady"
    return "FullyGraded" if score.score_given is not None else "PendingManual"


class LabScoreRefused(Exception):
    """A score the lab posted that the portal will not take; ``status`` the HTTP status saying so."""

    def __init__(self, message: str, *, status: int = 400) -> None:
        super().__init__(message)
        self.status = status


def lab_score_report(*, session_id, token: str, value: object) -> tuple[float, int]:
    """Take the score the lab of ``session_id`` reports, authenticated by its own secret ``token``
    (the Jupyter token or vLLM API key the lab was given); it is posted when the session ends.
    Returns ``(score_given, score_maximum)``. Refused (``LabScoreRefused``, nothing written)
    for a token that is not this session's (404, the same as for a session that does not exist),
    a session not running, a link that takes no score from its lab (409), or a value that is
    not a number from 0 to the link's maximum (400)."""
    with transaction.atomic():
        session = LabSession.objects.select_for_update().filter(pk=session_id).only("pk", "secret", "state").first()
        if session is None or not token or not hmac.compare_digest(session.secret.encode(), token.encode()):
            raise LabScoreRefused(_("No lab session has this id and token."), status=404)
        score = (
            Score.objects.select_related("resource_link")
            .filter(session=session, activity_progress=ActivityProgress.COMPLETED, resource_link__score_source=ScoreSource.LAB)
            .first()
        )
        if score is None:
            raise LabScoreRefused(_("This session's LMS activity does not take a score from the lab."), status=409)
        if session.state != SessionState.RUNNING or score.next_attempt_at is not None:
            raise LabScoreRefused(_("The session is not running: its score can no longer change."), status=409)
        maximum = score.resource_link.score_maximum
        given = _score_value(value, maximum)
        Score.objects.filter(pk=score.pk).update(score_given=given)
        progress_record([session.pk], ActivityProgress.IN_PROGRESS)
    return given, maximum


def _score_value(value: object, maximum: int) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise LabScoreRefused(_("scoreGiven must be a number."))
    if not 0 <= value <= maximum:
        raise LabScoreRefused(_("scoreGiven must be between 0 and %(maximum)s.") % {"maximum": maximum})
    return float(value)


def lineitem_ensure(*, link_id: int) -> str:
    """The URL of the link's line item: the launch's, or the one the tool made in the platform's
    container, made now if there is none (POST with the link's id, label, maximum and tag).

    Once per resource link: the link's row is locked while the platform is asked, so a second
    worker waits and finds the URL; a worker that died between the platform's answer and the
    commit left a line item the platform lists, found again by its resource link id."""
    from pylti1p3.assignments_grades import AssignmentsGradesService
    from pylti1p3.lineitem import LineItem

    with transaction.atomic():
        link = (
            ResourceLink.objects.select_for_update(of=("self",))
            .select_related("context__registration", "template")
            .get(pk=link_id)
        )
        if link.lineitem_url:
            return link.lineitem_url
        ags = AssignmentsGradesService(
            service_connector(link.context.registration), {"scope": link.ags_scopes, "lineitems": link.lineitems_url}
        )
        wanted = (
            LineItem()
            .set_label(link.template.name if link.template else link.resource_link_id)
            .set_score_maximum(link.score_maximum)
            .set_resource_link_id(link.resource_link_id)
            .set_tag(LINEITEM_TAG)
        )
        if link.template_id:
            wanted.set_resource_id(f"template-{link.template_id}")
        url = ags.find_or_create_lineitem(wanted, find_by="resource_link_id").get_id()
        if not url:
            raise ValueError("the platform's line item has no id")
        link.lineitem_url = url
        link.save(update_fields=["lineitem_url"])
    return url


def _send_on_commit(session_id) -> None:
    transaction.on_commit(lambda: dispatch.send(SCORE_TASK, str(session_id)), robust=True)
