"""The LMS API's courses: list, create, read, replace, change and archive."""

from __future__ import annotations

from django.db import transaction
from drf_spectacular.utils import OpenApiExample, extend_schema
from rest_framework import generics
from rest_framework.response import Response
from rest_framework.views import APIView

from api import selectors, services
from api.serializers import (
    CoursePatchSerializer,
    CourseSerializer,
)
from api.views.common import (
    AUTH_ERRORS,
    BAD_PAGE,
    COURSE_ID,
    ERROR_EXAMPLE,
    IF_MATCH,
    INVALID,
    LOCATION,
    NOT_FOUND,
    PAST_THE_END,
    PRECONDITIONS,
    _check_if_match,
    _course_or_404,
    _institution,
    created,
    form_errors,
)
from labs.forms import CourseForm
from labs.models import Course
from labs.services import courses as course_services


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
