"""Driving a session's instance through the cluster driver: start, watch, stop, sweep.

Called by Celery tasks with a session id. Each function re-reads the session, acts only if the
session is still in the state it handles, and can run twice (a redelivered task) without
changing the outcome: ``create`` and ``delete`` are idempotent in every driver, and every state
change is a conditional UPDATE.
"""

from __future__ import annotations

import logging
from datetime import timedelta
from enum import StrEnum
from urllib.parse import urlencode, urlsplit, urlunsplit

from django.conf import settings
from django.db import transaction
from django.utils import timezone
from django.utils.translation import gettext as _

from labs.domain.states import SessionState
from labs.drivers import DriverError, LaunchSpec, PollStatus, get_driver
from labs.drivers.base import CardBinding
from labs.models import Allocation, LabSession
from labs.services.agents import instance_register, instance_unregister
from labs.services.sessions import session_begin_stop, session_note, session_stop, session_transition

logger = logging.getLogger(__name__)


class Next(StrEnum):
    """What the calling task should do after a step."""

    DONE = "done"
    POLL = "poll"


def _launch_spec(session: LabSession) -> LaunchSpec:
    card = session.allocation.card
    template = session.template
    return LaunchSpec(
        session_id=str(session.pk),
        kind=template.kind,
        image=template.image,
        secret=session.secret,
        card=CardBinding(
            node=card.node.name,
            card_index=card.index,
            die_id=card.die_id,
            chip_type=card.chip_type,
            core_percent=session.allocation.core_percent,
            memory_mib=session.allocation.memory_mib,
            scenario=session.allocation.scenario,
            node_labels=tuple(sorted((str(k), str(v)) for k, v in (card.node.labels or {}).items())),
        ),
        course_code=session.course.code,
        student=session.student.get_username(),
        command=tuple(template.command or ()),
        args=tuple(template.args or ()),
    )


def session_start_instance(session_id) -> Next:
    """admitted -> starting, then ask the driver for the instance (once)."""
    session_transition(
        session_id, to=SessionState.STARTING, reason=_("requesting an NPU instance"), only_from={SessionState.ADMITTED}
    )
    session = (
        LabSession.objects.select_related("template", "course", "student", "allocation__card__node").filter(pk=session_id).first()
    )
    if session is None or session.state != SessionState.STARTING:
        return Next.DONE
    if session.driver_ref:
        return Next.POLL  # created by an earlier run of this task
    driver = get_driver()
    try:
        ref = driver.create(_launch_spec(session))
    except DriverError as exc:
        session_begin_stop(session_id, reason=_("could not start: %(error)s") % {"error": exc}, failed=True)
        return Next.DONE
    with transaction.atomic():
        bound = LabSession.objects.filter(pk=session_id, state=SessionState.STARTING).update(driver_ref=ref)
        Allocation.objects.filter(session_id=session_id, released_at__isnull=True).update(entity_id=ref)
    if not bound:
        # Stopped while the driver was creating: the stop may have run before the instance
        # existed, so remove it here rather than leave it running.
        driver.delete(str(session_id))
        return Next.DONE
    session.driver_ref = ref
    instance_register(session)
    return Next.POLL


def session_poll_instance(session_id) -> Next:
    """Watch a starting session until it runs, fails or overruns the spawn timeout."""
    session = (
        LabSession.objects.filter(pk=session_id)
        .select_related("template")
        .only("state", "driver_ref", "started_at", "secret", "template__kind")
        .first()
    )
    if session is None or session.state != SessionState.STARTING:
        return Next.DONE
    if _overdue(session.started_at, settings.LAB_SPAWN_TIMEOUT_SECONDS):
        session_begin_stop(
            session_id,
            reason=_("did not start within %(seconds)d s") % {"seconds": settings.LAB_SPAWN_TIMEOUT_SECONDS},
            failed=True,
        )
        return Next.DONE
    if not session.driver_ref:
        return Next.POLL  # the start task has not recorded the instance yet
    try:
        result = get_driver().poll(str(session_id))
    except DriverError as exc:
        # The cluster API did not answer (after the driver's own retries): keep watching; the
        # spawn timeout above still ends a session that never starts.
        session_note(session_id, reason=_("waiting for the cluster: %(error)s") % {"error": exc}, state=SessionState.STARTING)
        return Next.POLL
    if result.status == PollStatus.RUNNING:
        url = _with_jupyter_token(result.access_url, session)
        session_transition(session_id, to=SessionState.RUNNING, reason="", access_url=url[:500])
        return Next.DONE
    if result.status == PollStatus.PENDING:
        session_note(session_id, reason=result.message or _("starting"), state=SessionState.STARTING)
        return Next.POLL
    message = result.message or _("the instance disappeared before it started")
    session_begin_stop(session_id, reason=message, failed=True)
    return Next.DONE


def _with_jupyter_token(url: str, session: LabSession) -> str:
    """The student's link opens JupyterLab logged in: add the session's token when the driver's
    URL does not carry it (a Kubernetes URL pattern knows nothing of the secret)."""
    if not url or "token=" in url or session.template.kind != "jupyter":
        return url
    parts = urlsplit(url)
    query = "&".join(filter(None, [parts.query, urlencode({"token": session.secret})]))
    return urlunsplit(parts._replace(query=query))


def session_stop_instance(session_id) -> Next:
    """stopping -> stopped/failed once the driver has deleted the instance."""
    session = LabSession.objects.filter(pk=session_id).select_related("allocation__card__node").first()
    if session is None or session.state != SessionState.STOPPING:
        return Next.DONE
    get_driver().delete(str(session_id))  # DriverError propagates: the task retries
    allocation = getattr(session, "allocation", None)
    if settings.LAB_AGENT_REGISTERS_INSTANCES and allocation is not None and session.driver_ref:
        # Unreachable agent: the reconciler unregisters the residual instance later.
        instance_unregister(allocation.card.node, session.driver_ref)
    end_state = SessionState(session.end_state or SessionState.STOPPED)
    with transaction.atomic():
        if session_transition(session_id, to=end_state, only_from={SessionState.STOPPING}):
            from labs.services.sessions import _queue_allocation_pass

            transaction.on_commit(_queue_allocation_pass)
    return Next.DONE


def _overdue(since, seconds: int) -> bool:
    return since is not None and timezone.now() - since > timedelta(seconds=seconds)


def sessions_sweep() -> dict[str, int]:
    """Find sessions a lost task left behind and put them back on track; end expired ones.

    Safe to run at any time and from any process: it only re-queues idempotent tasks and
    makes conditional state changes.
    """
    from labs import tasks

    now = timezone.now()
    counts = {"expired": 0, "restarted": 0, "repolled": 0, "restopped": 0}
    grace = timedelta(seconds=max(30, 10 * settings.LAB_POLL_INTERVAL_SECONDS))

    running = LabSession.objects.filter(state=SessionState.RUNNING).select_related("template", "course__quota")
    for session in running.iterator():
        minutes = session.template.max_lifetime_minutes
        quota = getattr(session.course, "quota", None)
        if quota is not None:
            minutes = min(minutes, quota.max_session_minutes)
        if session.running_at and now - session.running_at > timedelta(minutes=minutes):
            if session_stop(session_id=session.pk, reason=_("reached the %(minutes)d-minute limit") % {"minutes": minutes}):
                counts["expired"] += 1

    for session_id in LabSession.objects.filter(state=SessionState.ADMITTED, admitted_at__lt=now - grace).values_list(
        "pk", flat=True
    ):
        tasks.session_start.delay(str(session_id))
        counts["restarted"] += 1
    # A live poll chain re-queues itself, so only a session past its spawn timeout can have
    # lost it; one more poll then fails it with the reason. One never bound to an instance
    # gets its start task again.
    spawn_deadline = now - timedelta(seconds=settings.LAB_SPAWN_TIMEOUT_SECONDS)
    starting = LabSession.objects.filter(state=SessionState.STARTING, started_at__lt=now - grace)
    for session_id, ref, started_at in starting.values_list("pk", "driver_ref", "started_at"):
        if not ref:
            tasks.session_start.delay(str(session_id))
        elif started_at < spawn_deadline:
            tasks.session_poll.delay(str(session_id))
        else:
            continue
        counts["repolled"] += 1
    stopping = LabSession.objects.filter(state=SessionState.STOPPING, stopping_at__lt=now - grace)
    for session_id in stopping.values_list("pk", flat=True):
        tasks.session_stop.delay(str(session_id))
        counts["restopped"] += 1
    if any(counts.values()):
        logger.info("sweep: %s", counts)
    return counts


def sessions_shutdown(*, reason: str) -> int:
    """Stop every open session and wait for nothing: used when the embedded portal exits."""
    ended = 0
    for session_id in LabSession.objects.exclude(state__in=[SessionState.STOPPED, SessionState.FAILED]).values_list(
        "pk", flat=True
    ):
        if session_stop(session_id=session_id, reason=reason):
            ended += 1
        session_stop_instance(session_id)
    return ended


__all__ = [
    "Next",
    "session_poll_instance",
    "session_start_instance",
    "session_stop_instance",
    "sessions_shutdown",
    "sessions_sweep",
]
