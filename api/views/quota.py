"""The LMS API's course quota: read it, and set it with the current ETag."""

from __future__ import annotations

from django.db import transaction
from django.utils.translation import gettext as _
from drf_spectacular.utils import OpenApiExample, extend_schema
from rest_framework import exceptions
from rest_framework.response import Response
from rest_framework.views import APIView

from api import selectors
from api.serializers import (
    QuotaResponseSerializer,
    QuotaSerializer,
)
from api.views.common import (
    AUTH_ERRORS,
    COURSE_ID,
    IF_MATCH,
    INVALID,
    NOT_FOUND,
    PRECONDITIONS,
    _check_if_match,
    _course_or_404,
)
from labs.forms import quota_messages
from labs.selectors.courses import course_quota_use
from labs.services import courses as course_services
from labs.services.courses import QUOTA_FIELDS, QuotaRefused


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
            raise exceptions.NotFound(_("This course has no quota yet."))
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
        with transaction.atomic():
            # Locked before the ETag is compared: a change committed meanwhile is seen, and waits for us.
            course = _course_or_404(request, course_id, lock=True)
            _check_if_match(request, selectors.etag_of(_quota_json(selectors.quota_of(course=course))))
            try:
                change = course_services.quota_set(
                    course=course, values=serializer.validated_data, in_use=course_quota_use(course=course), by=request.user
                )
            except QuotaRefused as refused:
                raise exceptions.ValidationError(quota_messages(refused.errors)) from None
        data = _quota_json(change.quota)
        return Response({**data, "below_use": list(change.below_use)}, headers={"ETag": selectors.etag_of(data)})
