"""The LMS API, /api/v1/ (README "REST API"). Thin: authenticate (a token), check its scope,
validate, one service or selector call, render. Every object is looked up through the token's
institution, so another institution's course or session is a 404, never a 403.
"""

from __future__ import annotations

import asyncio
import json
import time
from datetime import UTC
from decimal import Decimal

from asgiref.sync import sync_to_async
from django import forms
from django.conf import settings
from django.core.exceptions import ValidationError
from django.db import transaction
from django.http import HttpResponse, StreamingHttpResponse
from django.urls import reverse
from django_filters import rest_framework as filters
from django_filters.fields import IsoDateTimeField
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiExample, OpenApiParameter, OpenApiResponse, extend_schema
from rest_framework import exceptions, generics, status
from rest_framework.renderers import BaseRenderer, JSONRenderer
from rest_framework.response import Response
from rest_framework.views import APIView

from api import selectors, services
from api.exceptions import Conflict, PreconditionFailed, PreconditionRequired, Refused
from api.serializers import (
    BLANK_PARAMETER,
    CoursePatchSerializer,
    CourseSerializer,
    ErrorSerializer,
    LaunchSerializer,
    ProgressStreamEventSerializer,
    QuotaResponseSerializer,
    QuotaSerializer,
    RosterPutSerializer,
    RosterSerializer,
    RosterSyncSerializer,
    SessionSerializer,
    TemplateSerializer,
    UsageQuerySerializer,
    UsageSerializer,
)
from labs.forms import CourseForm, QuotaForm
from labs.models import Course, LabSession, LabTemplate
from labs.selectors.console import cluster_facts, institution_allotment
from labs.selectors.courses import course_quota_use
from labs.services import courses as course_services
from labs.services.courses import QUOTA_FIELDS
from labs.services.roster import RosterError
from labs.services.sessions import LaunchRefused


def error_response(description: str) -> OpenApiResponse:
    return OpenApiResponse(ErrorSerializer, description=description)


AUTH_ERRORS = {
    401: error_response("No token, or an unknown, revoked or expired one (`not_authenticated`, `authentication_failed`)."),
    403: error_response("The token lacks the scope this needs (`permission_denied`)."),
    429: error_response("Too many requests with this token (`throttled`); Retry-After says when to try again."),
}
NOT_FOUND = {404: error_response("No such object in the token's institution (`not_found`).")}
PAST_THE_END = {404: error_response("A page past the last one (`not_found`).")}
BAD_PAGE = {400: error_response("`page` or `page_size` is not a whole number in its range (`invalid`): `fields` says which.")}
INVALID = {400: error_response("Invalid input (`invalid`, `parse_error`): `fields` says which and why; nothing was changed.")}
PRECONDITIONS = {
    412: error_response("If-Match does not match the current ETag (`precondition_failed`): GET it again; nothing was changed."),
    428: error_response("If-Match is missing (`precondition_required`); nothing was changed."),
    415: error_response("The body is not JSON (`unsupported_media_type`)."),
}
IF_MATCH = OpenApiParameter(
    "If-Match",
    OpenApiTypes.STR,
    OpenApiParameter.HEADER,
    required=True,
    description="The ETag from the last GET. Missing: 428; stale: 412.",
)
# Ids are bigint primary keys: 1 to 2^63 - 1. Any other value names no object (404).
ID_SCHEMA = {"type": "integer", "minimum": 1, "maximum": selectors.MAX_ID}
LOCATION = OpenApiParameter(
    "Location",
    {"type": "string", "format": "uri"},
    OpenApiParameter.HEADER,
    required=True,
    response=[201],
    description="The URL of what was created.",
)
COURSE_ID = OpenApiParameter("course_id", ID_SCHEMA, OpenApiParameter.PATH, description="The course's id.")
SESSION_ID = OpenApiParameter("session_id", OpenApiTypes.UUID, OpenApiParameter.PATH, description="The session's id.")
ERROR_EXAMPLE = OpenApiExample(
    "Invalid input",
    value={
        "error": {
            "code": "invalid",
            "message": "Invalid input: This field is required.",
            "fields": {"title": ["This field is required."]},
        }
    },
    response_only=True,
    status_codes=["400"],
)


def _check_if_match(request, etag: str) -> None:
    given = request.headers.get("If-Match")
    if not given:
        raise PreconditionRequired()
    tags = {t.strip().removeprefix("W/") for t in given.split(",")}
    if "*" not in tags and etag not in tags:
        raise PreconditionFailed()


def _institution(request):
    return request.user.institution


def _course_or_404(request, course_id, *, lock: bool = False) -> Course:
    course = selectors.course_of(institution=_institution(request), course_id=course_id, lock=lock)
    if course is None:
        raise exceptions.NotFound("No such course.")
    return course


def created(request, data: dict, url_name: str, pk, headers: dict | None = None) -> Response:
    """A 201 with ``Location``: the URL of the object made (RFC 9110, 15.3.2)."""
    location = request.build_absolute_uri(reverse(url_name, args=[pk]))
    return Response(data, status=status.HTTP_201_CREATED, headers={"Location": location, **(headers or {})})


def form_errors(form) -> exceptions.ValidationError:
    fields = {name: [str(e) for e in errors] for name, errors in form.errors.items()}
    if "__all__" in fields:
        fields["non_field_errors"] = fields.pop("__all__")
    return exceptions.ValidationError(fields)


# --- courses -------------------------------------------------------------------------------------


def _course_json(course: Course) -> dict:
    return CourseSerializer(course).data


class CourseList(generics.ListAPIView):
    required_scopes = {"GET": "courses:read", "POST": "courses:write"}
    serializer_class = CourseSerializer
    queryset = Course.objects.none()  # for the schema; get_queryset scopes to the token's institution

    def get_queryset(self):
        if getattr(self, "swagger_fake_view", False):
            return Course.objects.none()
        return selectors.courses_of(institution=_institution(self.request))

    @extend_schema(
        summary="List the institution's courses",
        responses={200: CourseSerializer(many=True), **BAD_PAGE, **AUTH_ERRORS, **PAST_THE_END},
    )
    def get(self, request, *args, **kwargs):
        return self.list(request, *args, **kwargs)

    @extend_schema(
        summary="Create a course",
        description="No instructor is enrolled: PUT the roster with one. A code is unique per term in the institution.",
        parameters=[LOCATION],
        responses={201: CourseSerializer, **INVALID, **AUTH_ERRORS, 415: PRECONDITIONS[415]},
        examples=[
            OpenApiExample("A course", value={"code": "AI101", "title": "AI Practice", "term": "2026 Autumn"}, request_only=True),
            ERROR_EXAMPLE,
        ],
    )
    def post(self, request):
        serializer = CourseSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        institution = _institution(request)
        form = CourseForm(serializer.validated_data, institution=institution)
        if not form.is_valid():
            raise form_errors(form)
        course = services.course_create(institution=institution, by=request.user, **form.cleaned_data)
        data = _course_json(course)
        return created(request, data, "api:course", course.pk, headers={"ETag": selectors.etag_of(data)})


class CourseDetail(APIView):
    required_scopes = {"GET": "courses:read", "PUT": "courses:write", "PATCH": "courses:write", "DELETE": "courses:write"}

    @extend_schema(summary="A course", parameters=[COURSE_ID], responses={200: CourseSerializer, **AUTH_ERRORS, **NOT_FOUND})
    def get(self, request, course_id):
        data = _course_json(_course_or_404(request, course_id))
        return Response(data, headers={"ETag": selectors.etag_of(data)})

    def _update(self, request, course_id, *, partial: bool):
        serializer = (CoursePatchSerializer if partial else CourseSerializer)(data=request.data, partial=partial)
        serializer.is_valid(raise_exception=True)
        with transaction.atomic():
            # Locked before the ETag is compared: a change committed meanwhile is seen, and waits for us.
            course = _course_or_404(request, course_id, lock=True)
            _check_if_match(request, selectors.etag_of(_course_json(course)))
            values = {name: getattr(course, name) for name in CourseForm.Meta.fields}
            if not partial:
                values.update(starts_on=None, ends_on=None)
            values.update(serializer.validated_data)
            form = CourseForm(values, instance=course)
            if not form.is_valid():
                raise form_errors(form)
            course_services.course_update(
                course=course, by=request.user, **{f: form.cleaned_data[f] for f in CourseForm.Meta.fields}
            )
        data = _course_json(course)
        return Response(data, headers={"ETag": selectors.etag_of(data)})

    @extend_schema(
        summary="Replace a course's fields",
        parameters=[COURSE_ID, IF_MATCH],
        request=CourseSerializer,
        responses={200: CourseSerializer, **INVALID, **AUTH_ERRORS, **NOT_FOUND, **PRECONDITIONS},
    )
    def put(self, request, course_id):
        return self._update(request, course_id, partial=False)

    @extend_schema(
        summary="Change some of a course's fields",
        parameters=[COURSE_ID, IF_MATCH],
        request=CoursePatchSerializer,
        responses={200: CourseSerializer, **INVALID, **AUTH_ERRORS, **NOT_FOUND, **PRECONDITIONS},
    )
    def patch(self, request, course_id):
        return self._update(request, course_id, partial=True)

    @extend_schema(
        summary="Archive a course",
        description="Open sessions stop, nothing new launches, history is kept. Archiving twice changes nothing.",
        parameters=[COURSE_ID],
        responses={200: CourseSerializer, **AUTH_ERRORS, **NOT_FOUND},
    )
    def delete(self, request, course_id):
        course = _course_or_404(request, course_id)
        course_services.course_archive(course=course, by=request.user)
        return Response(_course_json(course))


# --- quota ---------------------------------------------------------------------------------------


def _quota_json(quota) -> dict:
    if quota is None:
        return {}
    return {name: getattr(quota, name) for name in QUOTA_FIELDS}


class CourseQuotaView(APIView):
    required_scopes = {"GET": "courses:read", "PUT": "courses:write"}

    @extend_schema(
        summary="A course's quota",
        description="404 (`not_found`) until a quota is set.",
        parameters=[COURSE_ID],
        responses={200: QuotaSerializer, **AUTH_ERRORS, **NOT_FOUND},
    )
    def get(self, request, course_id):
        course = _course_or_404(request, course_id)
        quota = selectors.quota_of(course=course)
        data = _quota_json(quota)
        if quota is None:
            raise exceptions.NotFound("This course has no quota yet.")
        return Response(data, headers={"ETag": selectors.etag_of(data)})

    @extend_schema(
        summary="Set a course's quota",
        description=(
            "Checked as the instructor console checks it: against the cluster's healthy cards and the institution's "
            "allotment. If-Match: the ETag of the GET; `*` when the course has no quota yet."
        ),
        parameters=[COURSE_ID, IF_MATCH],
        request=QuotaSerializer,
        responses={200: QuotaResponseSerializer, **INVALID, **AUTH_ERRORS, **NOT_FOUND, **PRECONDITIONS},
        examples=[
            OpenApiExample(
                "A class of 40",
                value={
                    "instance_count": 40,
                    "core_percent": 400,
                    "memory_mib": 163840,
                    "sessions_per_student": 1,
                    "max_session_minutes": 180,
                },
                request_only=True,
            )
        ],
    )
    def put(self, request, course_id):
        serializer = QuotaSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        values = dict(serializer.validated_data)
        for name in ("memory_mib", "borrow_memory_mib", "lend_memory_mib"):
            if values.get(name) is not None:
                # The form takes GiB to 3 places, which hold every 128 MiB step exactly; a value off the
                # step stays off it when rounded, and is refused for the step, not for its decimals.
                values[name] = str((Decimal(values[name]) / 1024).quantize(Decimal("0.001")))
        with transaction.atomic():
            # Locked before the ETag is compared: a change committed meanwhile is seen, and waits for us.
            course = _course_or_404(request, course_id, lock=True)
            _check_if_match(request, selectors.etag_of(_quota_json(selectors.quota_of(course=course))))
            form = QuotaForm(
                values,
                facts=cluster_facts(),
                allotment=institution_allotment(institution=course.institution, excluding=course),
                scenarios=set(course.templates.values_list("scenario", flat=True)),
                institution_id=course.institution_id,
            )
            if not form.is_valid():
                raise form_errors(form)
            change = course_services.quota_set(
                course=course, values=form.cleaned_data, in_use=course_quota_use(course=course), by=request.user
            )
        data = _quota_json(change.quota)
        return Response({**data, "below_use": list(change.below_use)}, headers={"ETag": selectors.etag_of(data)})


# --- templates -----------------------------------------------------------------------------------


class CourseTemplates(generics.ListAPIView):
    required_scopes = {"GET": "templates:read"}
    serializer_class = TemplateSerializer
    queryset = LabTemplate.objects.none()

    def get_queryset(self):
        if getattr(self, "swagger_fake_view", False):
            return LabTemplate.objects.none()
        return selectors.templates_of_course(course=_course_or_404(self.request, self.kwargs["course_id"]))

    @extend_schema(
        summary="The templates a course offers",
        parameters=[COURSE_ID],
        responses={200: TemplateSerializer(many=True), **BAD_PAGE, **AUTH_ERRORS, **NOT_FOUND},
    )
    def get(self, request, *args, **kwargs):
        return self.list(request, *args, **kwargs)


class Catalogue(generics.ListAPIView):
    required_scopes = {"GET": "templates:read"}
    serializer_class = TemplateSerializer
    queryset = LabTemplate.objects.none()

    def get_queryset(self):
        if getattr(self, "swagger_fake_view", False):
            return LabTemplate.objects.none()
        return selectors.catalogue_of(institution=_institution(self.request))

    @extend_schema(
        summary="The institution's template catalogue",
        responses={200: TemplateSerializer(many=True), **BAD_PAGE, **AUTH_ERRORS, **PAST_THE_END},
    )
    def get(self, request, *args, **kwargs):
        return self.list(request, *args, **kwargs)


# --- roster --------------------------------------------------------------------------------------


class CourseRoster(APIView):
    required_scopes = {"GET": "roster:read", "PUT": "roster:write"}

    @extend_schema(
        summary="A course's roster", parameters=[COURSE_ID], responses={200: RosterSerializer, **AUTH_ERRORS, **NOT_FOUND}
    )
    def get(self, request, course_id):
        course = _course_or_404(request, course_id)
        return Response(RosterSerializer({"members": selectors.roster_of(course=course)}).data)

    @extend_schema(
        summary="Make the roster equal to the body",
        description=(
            "Idempotent: members not listed are removed (but never the course's last instructor), listed ones are added "
            "(accounts are made for unknown usernames) or get their role. Each row comes back as added, updated, "
            "unchanged, removed or rejected with a reason; a rejected row changes nothing and keeps the member it names. "
            "One transaction; at most 5,000 rows."
        ),
        parameters=[COURSE_ID],
        request=RosterPutSerializer,
        responses={200: RosterSyncSerializer, **INVALID, **AUTH_ERRORS, **NOT_FOUND, 415: PRECONDITIONS[415]},
        examples=[
            OpenApiExample(
                "Two students and the instructor",
                value={
                    "members": [
                        {"username": "teacher", "role": "instructor"},
                        {"username": "s001", "email": "s001@uni.example", "first_name": "Li", "last_name": "Wei"},
                        {"username": "s002"},
                    ]
                },
                request_only=True,
            )
        ],
    )
    def put(self, request, course_id):
        serializer = RosterPutSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        course = _course_or_404(request, course_id)
        try:
            result = services.roster_sync(course=course, members=serializer.validated_data["members"], by=request.user)
        except RosterError as exc:
            raise exceptions.ValidationError({"members": [str(exc)]}) from None
        counts = {name: result.count(name) for name in ("added", "updated", "unchanged", "removed", "rejected")}
        return Response(RosterSyncSerializer({**counts, "rows": result.rows}).data)


# --- sessions ------------------------------------------------------------------------------------


class UTCDateTimeField(IsoDateTimeField):
    """An ISO 8601 time, as UTC: PostgreSQL refuses offsets beyond ±15:59, which Python accepts."""

    def to_python(self, value):
        parsed = super().to_python(value)
        try:
            return parsed.astimezone(UTC) if parsed is not None and parsed.tzinfo is not None else parsed
        except OverflowError:
            raise ValidationError("The time is out of range.", code="invalid") from None


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
        return selectors.sessions_of(institution=_institution(self.request))

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
            )
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
            raise exceptions.ValidationError({"Idempotency-Key": ["At most 255 characters."]})
        institution = _institution(request)
        course = selectors.course_of(institution=institution, course_id=data["course"])
        template = selectors.template_of(institution=institution, ref=data["template"])
        student = selectors.member_of(course=course, username=data["student"]) if course is not None else None
        problems = {}
        if course is None:
            problems["course"] = ["No such course."]
        if template is None:
            problems["template"] = ["No such template."]
        if course is not None and student is None:
            problems["student"] = ["No such student in this course."]
        if problems:
            raise exceptions.ValidationError(problems)
        try:
            session, launched = services.session_launch_for(
                by=request.user, course=course, template=template, student=student, idempotency_key=key, request=dict(data)
            )
        except LaunchRefused as exc:
            raise Refused(" ".join(exc.messages)) from None
        except services.IdempotencyConflict:
            raise Conflict("This Idempotency-Key was used with another request.", code="idempotency_conflict") from None
        # The service's own row, with its course, template and student: nothing is read after the
        # commit, so a launch that committed is answered as one even if the database went away since.
        data = SessionSerializer(session).data
        if launched:
            return created(request, data, "api:session", session.pk)
        return Response(data, headers={"Idempotent-Replayed": "true"})


def _session_or_404(request, session_id) -> LabSession:
    session = selectors.session_of(institution=_institution(request), session_id=session_id)
    if session is None:
        raise exceptions.NotFound("No such session.")
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


# --- usage ---------------------------------------------------------------------------------------


class CSVRenderer(BaseRenderer):
    """``text/csv`` for the usage view (``format=csv`` or Accept); errors still come as JSON text."""

    media_type = "text/csv"
    format = "csv"
    charset = "utf-8"

    def render(self, data, accepted_media_type=None, renderer_context=None):
        return data if isinstance(data, str | bytes) else json.dumps(data)


class CourseUsage(APIView):
    required_scopes = {"GET": "usage:read"}
    renderer_classes = [JSONRenderer, CSVRenderer]

    @extend_schema(
        summary="A course's usage per student",
        description=(
            "Sessions launched and NPU time held in [since, until) (default: the term so far), per student, as "
            "AI-Core-% × hours and GiB × hours. `format=csv` (or Accept: text/csv) gives the same as CSV."
        ),
        parameters=[
            COURSE_ID,
            UsageQuerySerializer,
        ],
        responses={
            (200, "application/json"): UsageSerializer,
            (200, "text/csv"): OpenApiResponse(OpenApiTypes.STR),
            **INVALID,
            **AUTH_ERRORS,
            **NOT_FOUND,
        },
    )
    def get(self, request, course_id):
        query = UsageQuerySerializer(data=request.query_params)
        query.is_valid(raise_exception=True)
        course = _course_or_404(request, course_id)
        usage = selectors.course_usage_between(course=course, **query.validated_data)
        if request.accepted_renderer.format == "csv":
            response = HttpResponse(selectors.usage_csv(usage), content_type="text/csv; charset=utf-8")
            response["Content-Disposition"] = f'attachment; filename="usage-{course.pk}.csv"'
            return response
        return Response(
            UsageSerializer({"course": course.pk, "since": usage.since, "until": usage.until, "rows": usage.rows}).data
        )
