"""The LMS API's lab templates: a course's offer and the institution's catalogue."""

from __future__ import annotations

from drf_spectacular.utils import extend_schema
from rest_framework import generics

from api import selectors
from api.serializers import (
    TemplateSerializer,
)
from api.views.common import (
    AUTH_ERRORS,
    BAD_PAGE,
    COURSE_ID,
    NOT_FOUND,
    PAST_THE_END,
    _course_or_404,
    _institution,
)
from labs.models import LabTemplate


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
