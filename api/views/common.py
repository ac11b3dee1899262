"""What every resource of the LMS API shares: the error responses and parameters its schema
names, the If-Match check, and finding the token's institution and a course in it."""

from __future__ import annotations

from django.urls import reverse
from django.utils.translation import gettext as _
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiExample, OpenApiParameter, OpenApiResponse
from rest_framework import exceptions, status
from rest_framework.response import Response

from api import selectors
from api.exceptions import PreconditionFailed, PreconditionRequired
from api.serializers import (
    ErrorSerializer,
)
from labs.models import Course


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
        raise exceptions.NotFound(_("No such course."))
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
