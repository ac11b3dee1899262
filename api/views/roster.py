"""The LMS API's course roster: read it, and make it equal to a list."""

from __future__ import annotations

from drf_spectacular.utils import OpenApiExample, extend_schema
from rest_framework import exceptions
from rest_framework.response import Response
from rest_framework.views import APIView

from api import selectors, services
from api.serializers import (
    RosterPutSerializer,
    RosterSerializer,
    RosterSyncSerializer,
)
from api.views.common import (
    AUTH_ERRORS,
    COURSE_ID,
    INVALID,
    NOT_FOUND,
    PRECONDITIONS,
    _course_or_404,
)
from labs.services.roster import RosterError


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
            "(accounts are made for unknown usernames) or get their role; a member's name and e-mail follow the body (an "
            "e-mail another account of the institution has is refused). Each row comes back as added, updated (with what "
            "changed), unchanged, removed or rejected with a reason; a rejected row changes nothing and keeps the member "
            "it names. "
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
