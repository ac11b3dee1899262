"""The LMS API's sessions: list and filter, launch for a student (idempotently), read, stop, and
watch one start as server-sent events."""

from __future__ import annotations

import asyncio
import json
import time
from datetime import UTC

from asgiref.sync import sync_to_async
from django import forms
from django.conf import settings
from django.core.exceptions import ValidationError
from django.http import StreamingHttpResponse
from django.utils.translation import gettext as _
from django_filters import rest_framework as filters
from django_filters.fields import IsoDateTimeField
from drf_spectacular.utils import OpenApiExample, OpenApiParameter, OpenApiResponse, extend_schema
from rest_framework import exceptions, generics
from rest_framework.renderers import BaseRenderer
from rest_framework.response import Response
from rest_framework.views import APIView

from api import selectors, services
from api.exceptions import Conflict, Refused
from api.renderers import JSONRenderer
from api.serializers import (
    BLANK_PARAMETER,
    LaunchSerializer,
    ProgressStreamEventSerializer,
    SessionSerializer,
    session_rows_data,
)
from api.views.common import (
    AUTH_ERRORS,
    ID_SCHEMA,
    INVALID,
    LOCATION,
    NOT_FOUND,
    PAST_THE_END,
    PRECONDITIONS,
    SESSION_ID,
    _institution,
    created,
    error_response,
)
from labs.models import LabSession
from labs.services.sessions import LaunchRefused


class UTCDateTimeField(IsoDateTimeField):
    """An ISO 8601 time, as UTC: PostgreSQL refuses offsets beyond ±15:59, which Python accepts."""

    def to_python(self, value):
        parsed = super().to_python(value)
        try:
            return parsed.astimezone(UTC) if parsed is not None and parsed.tzinfo is not None else parsed
        except OverflowError:
            raise ValidationError(_("The time is out of range."), code="invalid") from None


class UTCDateTimeFilter(filters.IsoDateTimeFilter):
    field_class = UTCDateTimeField


class IntegerFilter(filters.NumberFilter):
    field_class = forms.IntegerField


class SessionFilter(filters.FilterSet):
    course = IntegerFilter(field_name="course_id", min_value=1, max_value=selectors.MAX_ID)
    student = filters.CharFilter(field_name="student__username", max_length=150)
    state = filters.ChoiceFilter(choices=LabSession.State.choices)
    since = UTCDateTimeFilter(field_name="created_at", lookup_expr="gte")
    until = UTCDateTimeFilter(field_name="created_at", lookup_expr="lt")

    class Meta:
        model = LabSession
        fields = ["course", "student", "state", "since", "until"]

    def is_valid(self) -> bool:
        # django-filter reads ?until= as if it were not sent; the schema says what a time, a course or
        # a state is, and an empty string is none of them (an empty student is any student).
        valid = super().is_valid()
        for name, given in self.filters.items():
            if self.data.get(name) == "" and not isinstance(given, filters.CharFilter):
                self.form.add_error(name, BLANK_PARAMETER)
        return valid and not self.form.errors


IDEMPOTENCY_KEY_MAX_LENGTH = 255


class SessionList(generics.ListAPIView):
    required_scopes = {"GET": "sessions:read", "POST": "sessions:write"}
    serializer_class = SessionSerializer
    filterset_class = SessionFilter
    queryset = LabSession.objects.none()

    def get_queryset(self):
        if getattr(self, "swagger_fake_view", False):
            return LabSession.objects.none()
        return selectors.session_list_of(institution=_institution(self.request))

    def list(self, request, *args, **kwargs):
        # As ListAPIView lists, but each page read as rows and answered without a serializer per row.
        page = self.paginate_queryset(selectors.session_rows(self.filter_queryset(self.get_queryset())))
        return self.get_paginated_response(session_rows_data(page))

    @extend_schema(
        summary="The institution's sessions",
        parameters=[
            OpenApiParameter("course", ID_SCHEMA, description="Only this course's sessions."),
            OpenApiParameter("student", {"type": "string", "maxLength": 150}, description="Only this student's (username)."),
        ],
        responses={200: SessionSerializer(many=True), **INVALID, **AUTH_ERRORS, **PAST_THE_END},
    )
    def get(self, request, *args, **kwargs):
        return self.list(request, *args, **kwargs)

    @extend_schema(
        summary="Launch a session for a student",
        description=(
            "The student must be enrolled in the course, the template offered in it, and the course must have a quota "
            "(else 409 `refused`, with the reason). With an Idempotency-Key, sending the same body again returns the "
            "same session (200 instead of 201); the same key with another body is 409 `idempotency_conflict`."
        ),
        parameters=[
            LOCATION,
            OpenApiParameter(
                "Idempotency-Key",
                {"type": "string", "maxLength": IDEMPOTENCY_KEY_MAX_LENGTH},
                OpenApiParameter.HEADER,
                description="A unique key per intended launch.",
            ),
        ],
        request=LaunchSerializer,
        responses={
            201: SessionSerializer,
            200: OpenApiResponse(SessionSerializer, description="The session an earlier request with this key launched."),
            409: error_response(
                "The launch is refused (`refused`), or the key was used with another body (`idempotency_conflict`)."
            ),
            **INVALID,
            **AUTH_ERRORS,
            415: PRECONDITIONS[415],
        },
        examples=[OpenApiExample("Launch", value={"course": 12, "template": "small", "student": "s001"}, request_only=True)],
    )
    def post(self, request):
        serializer = LaunchSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        data = serializer.validated_data
        key = request.headers.get("Idempotency-Key", "").strip()
        if len(key) > IDEMPOTENCY_KEY_MAX_LENGTH:
            raise exceptions.ValidationError({"Idempotency-Key": [_("At most 255 characters.")]})
        institution = _institution(request)
        course = selectors.course_of(institution=institution, course_id=data["course"])
        template = selectors.template_of(institution=institution, ref=data["template"])
        student = selectors.member_of(course=course, username=data["student"]) if course is not None else None
        problems = {}
        if course is None:
            problems["course"] = [_("No such course.")]
        if template is None:
            problems["template"] = [_("No such template.")]
        if course is not None and student is None:
            problems["student"] = [_("No such student in this course.")]
        if problems:
            raise exceptions.ValidationError(problems)
        try:
            session, launched = services.session_launch_for(
                by=request.user, course=course, template=template, student=student, idempotency_key=key, request=dict(data)
            )
        except LaunchRefused as exc:
            raise Refused(" ".join(exc.messages)) from None
        except services.IdempotencyConflict:
            raise Conflict(_("This Idempotency-Key was used with another request."), code="idempotency_conflict") from None
        # The service's own row, with its course, template and student: nothing is read after the
        # commit, so a launch that committed is answered as one even if the database went away since.
        data = SessionSerializer(session).data
        if launched:
            return created(request, data, "api:session", session.pk)
        return Response(data, headers={"Idempotent-Replayed": "true"})


def _session_or_404(request, session_id) -> LabSession:
    session = selectors.session_of(institution=_institution(request), session_id=session_id)
    if session is None:
        raise exceptions.NotFound(_("No such session."))
    return session


class SessionDetail(APIView):
    required_scopes = {"GET": "sessions:read"}

    @extend_schema(summary="A session", parameters=[SESSION_ID], responses={200: SessionSerializer, **AUTH_ERRORS, **NOT_FOUND})
    def get(self, request, session_id):
        return Response(SessionSerializer(_session_or_404(request, session_id)).data)


class SessionStop(APIView):
    required_scopes = {"POST": "sessions:write"}

    @extend_schema(
        summary="Stop a session",
        description="Stopping a session that is ending or ended already changes nothing (still 200).",
        parameters=[SESSION_ID],
        request=None,
        responses={200: SessionSerializer, **AUTH_ERRORS, **NOT_FOUND},
    )
    def post(self, request, session_id):
        session = services.session_stop_by(session=_session_or_404(request, session_id), by=request.user)
        return Response(SessionSerializer(session).data)


PROGRESS_OF = {"queued": 10, "admitted": 30, "starting": 60, "running": 100, "stopping": 100, "stopped": 100, "failed": 100}


def _progress_event(session: LabSession) -> dict:
    return {
        "progress": PROGRESS_OF[session.state],
        "state": session.state,
        "message": session.reason,
        "ready": session.state == LabSession.State.RUNNING,
        "failed": session.state == LabSession.State.FAILED,
        "url": session.access_url if session.state == LabSession.State.RUNNING else "",
    }


class EventStreamRenderer(BaseRenderer):
    """``text/event-stream``, so that content negotiation lets in what every EventSource sends
    (Accept: text/event-stream). The view streams the events itself; errors are JSON."""

    media_type = "text/event-stream"
    format = "event-stream"
    charset = "utf-8"

    def render(self, data, accepted_media_type=None, renderer_context=None):
        return json.dumps(data).encode()  # not reached: SessionProgress renders errors with JSONRenderer


def _as_json(responses: dict) -> dict:
    return {(code, "application/json"): response for code, response in responses.items()}


class SessionProgress(APIView):
    required_scopes = {"GET": "sessions:read"}
    renderer_classes = [EventStreamRenderer]

    @extend_schema(
        summary="Watch a session start (server-sent events)",
        description=(
            "Like JupyterHub's /progress, for an EventSource (Accept: text/event-stream or */*): one `progress` event "
            "per change, its `data` a ProgressEvent as JSON, until the session runs or ends (a last event with `ready` "
            "or `failed`), or the stream's time is up (API_PROGRESS_MAX_SECONDS; reconnect then). Errors are JSON."
        ),
        parameters=[SESSION_ID],
        responses={
            (200, "text/event-stream"): OpenApiResponse(
                ProgressStreamEventSerializer, description="Each event: `event: progress`, `data: {ProgressEvent}`."
            ),
            **_as_json(
                {
                    **AUTH_ERRORS,
                    **NOT_FOUND,
                    406: error_response("Accept allows neither text/event-stream nor */* (`not_acceptable`)."),
                }
            ),
        },
    )
    def get(self, request, session_id):
        session = _session_or_404(request, session_id)
        institution = _institution(request)
        response = StreamingHttpResponse(
            _progress_stream(institution, session.pk, settings.API_PROGRESS_MAX_SECONDS, settings.API_PROGRESS_POLL_SECONDS),
            content_type="text/event-stream",
        )
        response["Cache-Control"] = "no-cache"
        response["X-Accel-Buffering"] = "no"  # nginx: pass events on at once
        return response

    def finalize_response(self, request, response, *args, **kwargs):
        if isinstance(response, Response):  # an error: the same JSON body as everywhere in the API
            request.accepted_renderer, request.accepted_media_type = JSONRenderer(), JSONRenderer.media_type
        return super().finalize_response(request, response, *args, **kwargs)


async def _progress_stream(institution, session_id, max_seconds: float, poll_seconds: float):
    deadline = time.monotonic() + max_seconds
    read = sync_to_async(selectors.session_of)
    last = None
    while True:
        session = await read(institution=institution, session_id=session_id)
        if session is None:
            return
        if session.version != last:
            last = session.version
            yield f"event: progress\ndata: {json.dumps(_progress_event(session))}\n\n"
        if session.state == LabSession.State.RUNNING or session.is_terminal or time.monotonic() >= deadline:
            return
        await asyncio.sleep(poll_seconds)
