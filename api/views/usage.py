"""The LMS API's course usage per student, as JSON or CSV."""

from __future__ import annotations

import json

from django.http import HttpResponse
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiResponse, extend_schema
from rest_framework.renderers import BaseRenderer
from rest_framework.response import Response
from rest_framework.views import APIView

from api import selectors
from api.renderers import JSONRenderer
from api.serializers import (
    UsageQuerySerializer,
    UsageSerializer,
)
from api.views.common import (
    AUTH_ERRORS,
    COURSE_ID,
    INVALID,
    NOT_FOUND,
    _course_or_404,
)


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
