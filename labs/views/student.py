"""The student's pages: the home page (their courses, budgets and sessions), launching, stopping,
extending and keeping a lab, a session's card as JSON; and the lab's own self-test report.

Thin: authenticate, validate, one service or selector call, render.
"""

from __future__ import annotations

import dataclasses
import json
import uuid

from django.conf import settings
from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import ValidationError
from django.db import transaction
from django.http import Http404, HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import redirect, render
from django.utils.translation import gettext as _
from django.views.decorators.csrf import csrf_exempt
from django.views.decorators.http import require_GET, require_POST

from labs.domain.reasons import Reason
from labs.forms import LaunchForm
from labs.models import Enrollment, LabSession
from labs.selectors.console import is_teacher
from labs.selectors.courses import enrollments_of_user
from labs.selectors.gateway import courses_with_endpoint
from labs.selectors.sessions import (
    session_event_payload,
    session_for_user,
    session_launched_payload,
    session_of_user_exists,
    sessions_of_student,
)
from labs.selectors.usage import student_budgets
from labs.services.activity import session_keep_running as keep_service
from labs.services.selftest import SelftestRejected, selftest_record
from labs.services.sessions import LaunchRefused
from labs.services.sessions import session_extend as extend_service
from labs.services.sessions import session_launch_of as launch_service
from labs.services.sessions import session_stop_joined as stop_service
from labs.services.smaller_lab import session_switch_smaller as switch_service


def _wants_json(request: HttpRequest) -> bool:
    return "application/json" in request.headers.get("Accept", "")


@login_required
@require_GET
def home(request: HttpRequest) -> HttpResponse:
    enrollments = enrollments_of_user(user=request.user)
    if not any(e.role == Enrollment.Role.STUDENT for e in enrollments) and is_teacher(user=request.user):
        return redirect("labs:console")  # an instructor lands on the courses they teach
    studies = [e for e in enrollments if e.role == Enrollment.Role.STUDENT]
    budgets = student_budgets(
        pairs=[(e.course_id, request.user.pk) for e in studies],
        quotas={e.course_id: getattr(e.course, "quota", None) for e in studies},  # read with the enrolments
    )
    for e in studies:
        e.budget = budgets.get((e.course_id, request.user.pk))
    return render(
        request,
        "labs/home.html",
        {
            "student_enrollments": studies,
            "budget_warning_percent": settings.LAB_BUDGET_WARNING_PERCENT,
            "staff_enrollments": [e for e in enrollments if e.role in Enrollment.STAFF_ROLES],
            "sessions": sessions_of_student(user=request.user),
            "endpoint_courses": courses_with_endpoint(user=request.user) if studies else set(),
        },
    )


def session_launch(request: HttpRequest) -> HttpResponse:
    # The request's reads (the session's and the user's, by login_required) go in the launch's
    # transaction: a launch costs PostgreSQL one commit, and a class start is a burst of them. The
    # launched session's place in the queue is read after the commit (session_launched_payload).
    with transaction.atomic():
        outcome = _launch_signed_in(request)
    if isinstance(outcome, LabSession):  # launched, and the page's script asked for JSON
        return JsonResponse({"session": session_launched_payload(outcome)}, status=201)
    return outcome


@login_required
@require_POST
def _launch_signed_in(request: HttpRequest) -> HttpResponse | LabSession:
    """The launch in the request's transaction: the answer, or the launched session when the
    page's script asked for JSON (answered after the commit)."""
    form = LaunchForm(request.POST)
    error = None
    session = None
    if not form.is_valid():
        error = _("Choose a course and a template to launch.")
    else:
        # The service reads the course through the user's enrolment and the template among the
        # course's institution's: nothing of another tenant can be named by guessing ids.
        try:
            session = launch_service(
                student=request.user, course_id=form.cleaned_data["course"], template_id=form.cleaned_data["template"]
            )
        except LaunchRefused as exc:
            error = " ".join(exc.messages)
    if _wants_json(request):
        if error:
            return JsonResponse({"error": error}, status=400)
        return session
    if error:
        messages.error(request, error)
    else:
        messages.success(
            request, _("Launched %(template)s; it starts as soon as an NPU share is free.") % {"template": session.template.name}
        )
    return redirect("labs:home")


def session_stop(request: HttpRequest, session_id) -> HttpResponse:
    # The request's reads (the session's and the user's, by login_required) and the check that the
    # session is the student's go in the stop's transaction: a stop costs PostgreSQL one commit
    # (and its pages' read after it), not one for each read.
    with transaction.atomic():
        return _stop_signed_in(request, session_id)


@login_required
@require_POST
def _stop_signed_in(request: HttpRequest, session_id) -> HttpResponse:
    if not session_of_user_exists(user=request.user, session_id=session_id):
        raise Http404(_("No such session."))
    reason = Reason.of("session.stopped_by", who=request.user.get_username())
    stopped = stop_service(session_id=session_id, reason=reason)
    if _wants_json(request):
        if not stopped:
            return JsonResponse({"error": _("This session is already ending.")}, status=409)
        return JsonResponse({"ok": True})
    if not stopped:
        messages.info(request, _("This session is already ending."))
    next_url = request.POST.get("next", "")
    if next_url.startswith("/") and not next_url.startswith("//"):
        return redirect(next_url)
    return redirect("labs:home")


def _own_session_action(request: HttpRequest, session_id, act, done: str) -> HttpResponse:
    """A student's action on their own session (``act`` raises ``ValidationError`` with the
    reason when it cannot be done): JSON for the page's script, else back to the page with a message."""
    if not LabSession.objects.filter(pk=session_id, student=request.user).exists():
        raise Http404(_("No such session."))  # only its student does this
    try:
        answer = act()
    except ValidationError as exc:
        error = " ".join(exc.messages)
        if _wants_json(request):
            return JsonResponse({"error": error}, status=409)
        messages.error(request, error)
        return redirect("labs:home")
    if _wants_json(request):
        return JsonResponse({"ok": True, **answer})
    messages.success(request, done)
    return redirect("labs:home")


@login_required
@require_POST
def session_extend(request: HttpRequest, session_id) -> HttpResponse:
    def extend():
        return {"extensions_left": extend_service(session_id=session_id, student=request.user)}

    return _own_session_action(request, session_id, extend, _("Extended."))


@login_required
@require_POST
def session_keep(request: HttpRequest, session_id) -> HttpResponse:
    def keep():
        keep_service(session_id=session_id, student=request.user)
        return {}

    return _own_session_action(request, session_id, keep, _("It keeps running."))


@login_required
@require_POST
def session_switch_smaller(request: HttpRequest, session_id) -> HttpResponse:
    """Take the smaller lab the card offers instead of the queued one (``labs.services.smaller_lab``)."""

    def switch():
        try:
            template_id = int(request.POST.get("template", ""))
        except ValueError:
            raise ValidationError(_("Choose the smaller lab to switch to.")) from None
        switched = switch_service(session_id=session_id, student=request.user, template_id=template_id)
        started, withdrawn = (session_for_user(user=request.user, session_id=s.pk) for s in switched)
        return {
            "session": session_event_payload(started, for_owner=True),
            "withdrawn": session_event_payload(withdrawn, for_owner=True),
        }

    return _own_session_action(request, session_id, switch, _("Switched: the smaller lab is starting."))


@login_required
@require_GET
def session_detail(request: HttpRequest, session_id) -> HttpResponse:
    session = session_for_user(user=request.user, session_id=session_id)
    if session is None:
        raise Http404(_("No such session."))
    return JsonResponse({"session": session_event_payload(session, for_owner=session.student_id == request.user.pk)})


@csrf_exempt  # a machine report, authenticated by the session's own secret, never by a cookie
@require_POST
def session_selftest(request: HttpRequest, session_id: uuid.UUID) -> JsonResponse:
    """``POST /sessions/<id>/selftest`` from the lab itself (``python -m nodeagent selftest``).

    ``Authorization: Bearer <the session's secret>``; body ``{"visible_mib": int, "probe_exceeded":
    true|false|null}``. 200 with the verdict; 400 bad JSON or values, 401 no bearer secret,
    404 unknown session or wrong secret, 409 ended session: nothing changes on an error.
    """
    scheme, _sep, secret = request.headers.get("Authorization", "").partition(" ")
    if scheme.lower() != "bearer" or not secret.strip():
        return JsonResponse({"error": "send the session's secret as Authorization: Bearer <secret>"}, status=401)
    try:
        body = json.loads(request.body or b"")
    except (ValueError, UnicodeDecodeError):
        return JsonResponse({"error": "the body is not JSON"}, status=400)
    if not isinstance(body, dict) or "visible_mib" not in body:
        return JsonResponse({"error": 'the body must be a JSON object with "visible_mib"'}, status=400)
    try:
        verdict = selftest_record(
            session_id=str(session_id),
            secret=secret.strip(),
            visible_mib=body["visible_mib"],
            probe_exceeded=body.get("probe_exceeded"),
        )
    except SelftestRejected as exc:
        return JsonResponse({"error": exc.message}, status=exc.status)
    return JsonResponse(dataclasses.asdict(verdict))
