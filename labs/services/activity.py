"""Idle culling: look at each running lab's own signals, warn before stopping an idle one, stop it.

Signals (``labs.domain.idle`` judges them): JupyterLab's ``/api/status`` (``last_activity``:
kernels, terminals, requests) and ``/api/kernels`` (a kernel ``busy`` is computing, browser or
not); vLLM's ``/metrics`` (requests running, requests finished since the last look); the NPU,
from the node agent's last reading (AI Core in use). A lab that does not answer reports no
activity, so a broken lab is stopped like an idle one, after the same warning.

A look is never its own activity. Jupyter Server counts every authenticated API request as
activity except those that carry ``no_track_activity`` (``/api/status`` never counts), so each
request the check makes carries it; vLLM counts only inference requests, not ``/metrics``; the
NPU reading is the agent's, taken whether anyone looks or not.

``activity_check`` runs on beat every ``LAB_IDLE_CHECK_SECONDS``; the look at each lab is an HTTP
request from the portal with the session's own token, never logged.
"""

from __future__ import annotations

import json
import logging
import re
import urllib.parse
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

from django.conf import settings
from django.core.exceptions import ValidationError
from django.db import transaction
from django.db.models import F, Q
from django.utils import timezone
from django.utils.dateparse import parse_datetime
from django.utils.translation import gettext as _

from labs.domain.idle import Activity, Verdict, idle_verdict
from labs.domain.reasons import Reason
from labs.domain.states import SessionState
from labs.models import InstanceSample, LabSession, LabTemplate
from labs.services.events import events_batch, session_changes_publish, session_events_record
from labs.services.sessions import reason_fields, session_stop

logger = logging.getLogger(__name__)
PROBE_THREADS = 16
_VLLM_SAMPLE = re.compile(r"^(vllm:num_requests_running|vllm:request_success_total)(?:\{[^}]*\})?\s+([0-9.eE+-]+)", re.M)


class ProbeError(Exception):
    pass


def _get(url: str, headers: dict[str, str], timeout: float) -> bytes:
    # No proxy: an HTTP(S)_PROXY in the portal's environment must not see the session's token.
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    try:
        with opener.open(urllib.request.Request(url, headers=headers), timeout=timeout) as response:
            return response.read(1_000_000)
    except (OSError, ValueError) as exc:  # HTTPError and URLError are OSErrors
        raise ProbeError(f"{urllib.parse.urlsplit(url).path}: {exc.__class__.__name__}") from None


def lab_base_url(access_url: str) -> str:
    """The lab server's root from the URL a student opens (JupyterLab's ``.../lab?token=`` or a vLLM API root)."""
    parts = urllib.parse.urlsplit(access_url)
    path = parts.path
    if path.endswith("/lab"):
        path = path[: -len("lab")]
    if not path.endswith("/"):
        path += "/"
    return urllib.parse.urlunsplit((parts.scheme, parts.netloc, path, "", ""))


# Jupyter Server's query parameter for "this request is not the user's activity".
UNTRACKED = "?no_track_activity=1"


def jupyter_activity(base_url: str, token: str, timeout: float) -> Activity:
    headers = {"Authorization": f"token {token}"}
    status = json.loads(_get(base_url + "api/status" + UNTRACKED, headers, timeout))
    kernels = json.loads(_get(base_url + "api/kernels" + UNTRACKED, headers, timeout))
    last = parse_datetime(status.get("last_activity") or "")
    busy = any(k.get("execution_state") == "busy" for k in kernels if isinstance(k, dict))
    return Activity(busy_now=busy, last_seen=last.timestamp() if last else None)


def vllm_activity(base_url: str, token: str, timeout: float, previous_finished: float | None) -> tuple[Activity, float]:
    """(activity, finished requests so far): busy while a request runs or more finished since the last look."""
    text = _get(base_url + "metrics", {"Authorization": f"Bearer {token}"}, timeout).decode("utf-8", "replace")
    running = finished = 0.0
    for name, value in _VLLM_SAMPLE.findall(text):
        if name == "vllm:num_requests_running":
            running += float(value)
        else:
            finished += float(value)
    moved = previous_finished is not None and finished > previous_finished
    return Activity(busy_now=running > 0 or moved), finished


@dataclass
class Look:
    session: LabSession
    activity: Activity
    state: dict = field(default_factory=dict)
    error: str = ""


def _look(session: LabSession, npu_busy: bool) -> Look:
    timeout = settings.LAB_IDLE_PROBE_TIMEOUT_SECONDS
    state = dict(session.activity or {})
    base = lab_base_url(session.access_url)
    try:
        if session.template.kind == LabTemplate.Kind.VLLM:
            activity, finished = vllm_activity(base, session.secret, timeout, state.get("vllm_finished"))
            state["vllm_finished"] = finished
        else:
            activity = jupyter_activity(base, session.secret, timeout)
    except (ProbeError, json.JSONDecodeError, TypeError, AttributeError) as exc:
        return Look(session, Activity(busy_now=npu_busy), state, str(exc))
    return Look(session, Activity(busy_now=activity.busy_now or npu_busy, last_seen=activity.last_seen), state)


def _npu_busy(sessions: list[LabSession], since: datetime) -> set[str]:
    """Sessions whose instance the node agent saw using AI Core since ``since``."""
    refs = {s.driver_ref: str(s.pk) for s in sessions if s.driver_ref}
    busy = InstanceSample.objects.filter(entity_id__in=list(refs), taken_at__gte=since, delivered_percent__gt=0)
    return {refs[e] for e in busy.values_list("entity_id", flat=True).distinct()}


@dataclass
class ActivityReport:
    looked: int = 0
    unanswered: int = 0
    warned: list[str] = field(default_factory=list)
    cleared: list[str] = field(default_factory=list)
    culled: list[str] = field(default_factory=list)


def activity_check(*, now: datetime | None = None) -> ActivityReport:
    report = ActivityReport()
    now = now or timezone.now()
    # A lab pre-started for a class (labs.services.reservations) is idle by nature until a student
    # claims it; the reservation rule stops it if nobody does.
    sessions = list(
        LabSession.objects.filter(state=SessionState.RUNNING)
        .exclude(access_url="")
        .exclude(Q(reservation_slot__isnull=False) & Q(claimed_at__isnull=True))
        .select_related("template")
    )
    if not sessions:
        return report
    npu = _npu_busy(sessions, now - timedelta(seconds=2 * settings.LAB_IDLE_PROBE_TIMEOUT_SECONDS + 120))
    with ThreadPoolExecutor(min(PROBE_THREADS, len(sessions))) as pool:
        looks = list(pool.map(lambda s: _look(s, str(s.pk) in npu), sessions))
    report.looked = len(looks)
    with events_batch(), transaction.atomic():
        changed = []
        used = []  # labs whose activity this look found: the session.active event (an LMS's progress)
        for look in looks:
            s = look.session
            if look.error:
                report.unanswered += 1
                logger.info("idle check: session %s did not answer: %s", s.pk, look.error)
            timeout = s.template.idle_timeout_minutes * 60
            started = s.last_active_at or s.running_at or now
            decision = idle_verdict(
                last_active=started.timestamp(),
                activity=look.activity,
                now=now.timestamp(),
                timeout_seconds=timeout,
                warning_seconds=settings.LAB_IDLE_WARNING_SECONDS,
                cull_at=s.cull_at.timestamp() if s.cull_at else None,
            )
            last_active = datetime.fromtimestamp(decision.last_active, tz=UTC)
            if decision.last_active > started.timestamp():
                used.append(str(s.pk))
            minutes = s.template.idle_timeout_minutes
            current = LabSession.objects.filter(pk=s.pk, state=SessionState.RUNNING)
            if decision.verdict == Verdict.CULL:
                if session_stop(session_id=s.pk, reason=Reason.of("session.idle_culled", minutes=minutes)):
                    report.culled.append(str(s.pk))
                continue
            fields: dict = {"last_active_at": last_active, "activity": look.state}
            if decision.verdict == Verdict.WARN:
                cull_at = datetime.fromtimestamp(decision.cull_at, tz=UTC)
                words = (
                    {} if s.reclaim_at or s.budget_stop_at else reason_fields(Reason.of("session.idle_warning", minutes=minutes))
                )
                if current.update(cull_at=cull_at, version=F("version") + 1, **words, **fields):
                    report.warned.append(str(s.pk))
                    changed.append(str(s.pk))
            elif decision.verdict == Verdict.CLEAR:
                words = reason_fields(None) if s.reason_code == "session.idle_warning" else {}
                if current.update(cull_at=None, version=F("version") + 1, **words, **fields):
                    report.cleared.append(str(s.pk))
                    changed.append(str(s.pk))
            else:
                current.update(**fields)
        session_events_record("session.active", used)
        session_changes_publish(changed)
    return report


class KeepRefused(ValidationError):
    """The session has no idle warning to answer (not warned, not running, not the student's)."""


def session_keep_running(*, session_id, student) -> None:
    """The student says they are still there: the idle clock starts again and the warning goes."""
    with transaction.atomic():
        session = (
            LabSession.objects.select_for_update()
            .filter(pk=session_id, student=student, state=SessionState.RUNNING, cull_at__isnull=False)
            .first()
        )
        if session is None:
            raise KeepRefused(_("This session has no idle warning to answer."))
        words = reason_fields(None) if session.reason_code == "session.idle_warning" else {}
        LabSession.objects.filter(pk=session.pk).update(
            cull_at=None, last_active_at=timezone.now(), version=F("version") + 1, **words
        )
        session_changes_publish([str(session.pk)])
