"""The LMS API's lab templates: a course's offer and the institution's catalogue."""

from __future__ import annotations

from django.urls import reverse
from django.utils.translation import gettext as _
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import exceptions, generics, status
from rest_framework.response import Response

from api import selectors, services
from api.exceptions import Conflict
from api.serializers import (
    TemplateOfferSerializer,
    TemplateSerializer,
)
from api.views.common import (
    AUTH_ERRORS,
    BAD_PAGE,
    COURSE_ID,
    INVALID,
    LOCATION,
    NOT_FOUND,
    PAST_THE_END,
    PRECONDITIONS,
    _course_or_404,
    _institution,
    error_response,
)
from labs.models import LabTemplate

OFFER_REFUSED = {
    409: error_response("The course is archived, or the template is another course's own (`conflict`); nothing was changed.")
}
TEMPLATE_REF = OpenApiParameter(
    "template", str, OpenApiParameter.PATH, description="The template's slug or id, as `slug` and `id` in a listing."
)


class CourseTemplates(generics.ListAPIView):
    required_scopes = {"GET": "templates:read", "POST": "courses:write"}
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

    @extend_schema(
        summary="Offer a catalogue template in a course",
        description=(
            'What the console\'s "Offer it" does: students of the course can launch the template. `template` is a '
            "template of the token's institution, by slug or id. Idempotent: 201 when it is offered now, 200 when it "
            "was offered already."
        ),
        parameters=[COURSE_ID, LOCATION],
        request=TemplateOfferSerializer,
        responses={
            200: TemplateSerializer,
            201: TemplateSerializer,
            **INVALID,
            **AUTH_ERRORS,
            **NOT_FOUND,
            **OFFER_REFUSED,
            415: PRECONDITIONS[415],
        },
    )
    def post(self, request, course_id):
        serializer = TemplateOfferSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        course = _course_or_404(request, course_id)
        template = selectors.template_of(institution=course.institution, ref=serializer.validated_data["template"])
        if template is None:
            raise exceptions.ValidationError({"template": [_("No such template in your institution.")]})
        try:
            added = services.course_template_offer(course=course, template=template, by=request.user)
        except services.OfferRefused as exc:
            raise Conflict(str(exc)) from None
        data = TemplateSerializer(template).data
        if not added:
            return Response(data, status=status.HTTP_200_OK)
        # Where the offer now is: GET there reads it, DELETE withdraws it.
        location = request.build_absolute_uri(reverse("api:course-template", args=[course.pk, template.slug]))
        return Response(data, status=status.HTTP_201_CREATED, headers={"Location": location})


class CourseTemplate(generics.GenericAPIView):
    required_scopes = {"GET": "templates:read", "DELETE": "courses:write"}
    serializer_class = TemplateSerializer
    queryset = LabTemplate.objects.none()

    @extend_schema(
        summary="A template the course offers",
        description="404 when the course does not offer it (or it is not a template of the token's institution).",
        parameters=[COURSE_ID, TEMPLATE_REF],
        responses={200: TemplateSerializer, **AUTH_ERRORS, **NOT_FOUND},
    )
    def get(self, request, course_id, template):
        course = _course_or_404(request, course_id)
        found = selectors.template_of(institution=course.institution, ref=template)
        if found is None or not selectors.templates_of_course(course=course).filter(pk=found.pk).exists():
            raise exceptions.NotFound(_("The course does not offer this template."))
        return Response(TemplateSerializer(found).data)

    @extend_schema(
        summary="Stop offering a template in a course",
        description=(
            'What the console\'s "Stop offering" does; sessions already running it go on. Idempotent: 204 also when '
            "the course did not offer it."
        ),
        parameters=[COURSE_ID, TEMPLATE_REF],
        responses={204: None, **AUTH_ERRORS, **NOT_FOUND, **OFFER_REFUSED},
    )
    def delete(self, request, course_id, template):
        course = _course_or_404(request, course_id)
        found = selectors.template_of(institution=course.institution, ref=template)
        if found is None:
            raise exceptions.NotFound(_("No such template."))
        try:
            services.course_template_withdraw(course=course, template=found, by=request.user)
        except services.OfferRefused as exc:
            raise Conflict(str(exc)) from None
        return Response(status=status.HTTP_204_NO_CONTENT)


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
