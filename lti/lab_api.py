"""The lab's own score (``POST /lti/sessions/<id>/score/``): a machine request from the lab,
authenticated by the session's secret, never by a cookie (``lti.grading.lab_score_report``)."""

from __future__ import annotations

import json
import uuid

from django.http import HttpRequest, JsonResponse
from django.utils.translation import gettext as _
from django.views.decorators.csrf import csrf_exempt
from django.views.decorators.http import require_POST

from lti.grading import LabScoreRefused, lab_score_report


@csrf_exempt  # a machine report, authenticated by the session's own secret, never by a cookie
@require_POST
def session_score(request: HttpRequest, session_id: uuid.UUID) -> JsonResponse:
    """``Authorization: Bearer <the session's secret>`` (the lab's ``JUPYTER_TOKEN`` or vLLM API
    key; ``token <secret>`` as Jupyter writes it is taken too); body ``{"scoreGiven": number}``,
    from 0 to the activity's ``scoreMaximum``. 200 ``{"scoreGiven", "scoreMaximum"}``: posted to
    the LMS when the session ends. 400 bad JSON or value, 401 no secret, 404 unknown session or
    another secret, 409 a session not running or an activity that takes no score from its lab."""
    scheme, _sep, token = request.headers.get("Authorization", "").partition(" ")
    if scheme.lower() not in ("bearer", "token") or not token.strip():
        return JsonResponse({"error": _("Send the session's token as Authorization: Bearer <token>.")}, status=401)
    try:
        body = json.loads(request.body or b"")
    except (ValueError, UnicodeDecodeError):
        return JsonResponse({"error": _("The body is not JSON.")}, status=400)
    if not isinstance(body, dict) or "scoreGiven" not in body:
        return JsonResponse({"error": _('The body must be a JSON object with "scoreGiven".')}, status=400)
    try:
        given, maximum = lab_score_report(session_id=session_id, token=token.strip(), value=body["scoreGiven"])
    except LabScoreRefused as exc:
        return JsonResponse({"error": str(exc)}, status=exc.status)
    return JsonResponse({"scoreGiven": given, "scoreMaximum": maximum})
