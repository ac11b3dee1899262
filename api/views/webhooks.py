"""The webhooks part of the LMS API (/api/v1/webhooks/, docs/lms.md "Webhooks"). As the rest of the API:
a token's scope, its institution's objects only (another's are 404), one error shape, and the
rules in ``webhooks.forms.SubscriptionForm``, which the console uses too."""

from __future__ import annotations

from django.utils.translation import gettext as _
from drf_spectacular.utils import OpenApiExample, OpenApiParameter, extend_schema
from rest_framework import exceptions, generics, serializers, status
from rest_framework.response import Response
from rest_framework.views import APIView

from api.exceptions import Conflict
from api.fields import StrictBooleanField, StrictCharField, StrictIntegerField
from api.serializers import INT8_MAX
from api.views.common import (
    AUTH_ERRORS,
    BAD_PAGE,
    ERROR_EXAMPLE,
    ID_SCHEMA,
    INVALID,
    LOCATION,
    NOT_FOUND,
    PAST_THE_END,
    PRECONDITIONS,
    created,
    error_response,
    form_errors,
)
from webhooks import selectors, services
from webhooks.catalogue import EVENT_TYPE_CHOICES, EVENT_TYPES
from webhooks.forms import SubscriptionForm
from webhooks.models import Delivery, Subscription

# --- representations -----------------------------------------------------------------------------


class WebhookSerializer(serializers.Serializer):
    id = serializers.IntegerField(read_only=True)
    url = StrictCharField(max_length=500, help_text="https://..., without a user name or password.")
    description = StrictCharField(max_length=200, required=False, allow_blank=True, default="")
    event_types = serializers.ListField(
        child=serializers.ChoiceField(choices=EVENT_TYPE_CHOICES), min_length=1, max_length=len(EVENT_TYPES)
    )
    courses = serializers.ListField(
        child=StrictIntegerField(min_value=1, max_value=INT8_MAX),
        required=False,
        default=list,
        max_length=1000,
        help_text="Course ids; empty: every course of the institution.",
    )
    active = StrictBooleanField(required=False, default=True, help_text="false: paused, nothing is sent.")
    created_at = serializers.DateTimeField(read_only=True)
    secret_rotated_at = serializers.DateTimeField(read_only=True, allow_null=True)


class WebhookPatchSerializer(WebhookSerializer):
    url = StrictCharField(max_length=500, required=False)
    description = StrictCharField(max_length=200, required=False, allow_blank=True)
    event_types = serializers.ListField(
        child=serializers.ChoiceField(choices=EVENT_TYPE_CHOICES), min_length=1, max_length=len(EVENT_TYPES), required=False
    )
    courses = serializers.ListField(child=StrictIntegerField(min_value=1, max_value=INT8_MAX), required=False, max_length=1000)
    active = StrictBooleanField(required=False)


class WebhookCreatedSerializer(WebhookSerializer):
    secret = serializers.CharField(read_only=True, help_text="The signing secret (whsec_...): shown this once.")


class SecretSerializer(serializers.Serializer):
    secret = serializers.CharField(read_only=True, help_text="The new signing secret (whsec_...): shown this once.")


class AttemptSerializer(serializers.Serializer):
    at = serializers.DateTimeField()
    status_code = serializers.IntegerField(allow_null=True, help_text="The receiver's answer; null when there was none.")
    error = serializers.CharField(help_text="Why there was no answer (timeout, connection refused, ...); empty otherwise.")
    duration_ms = serializers.IntegerField()


class DeliverySerializer(serializers.Serializer):
    id = serializers.IntegerField()
    message_id = serializers.CharField(help_text="The webhook-id header: the same on retries and redeliveries.")
    event_type = serializers.ChoiceField(choices=EVENT_TYPE_CHOICES)
    state = serializers.ChoiceField(choices=Delivery.State.values)
    attempts = serializers.IntegerField()
    next_attempt_at = serializers.DateTimeField(allow_null=True)
    last_status_code = serializers.IntegerField(allow_null=True)
    created_at = serializers.DateTimeField()
    completed_at = serializers.DateTimeField(allow_null=True)
    payload = serializers.JSONField(help_text="The body that is posted.")
    log = AttemptSerializer(many=True, source="attempt_log.all")


def _json(subscription: Subscription, secret: str | None = None) -> dict:
    data = {
        "id": subscription.pk,
        "url": subscription.url,
        "description": subscription.description,
        "event_types": list(subscription.event_types),
        "courses": sorted(c.pk for c in subscription.courses.all()),
        "active": subscription.active,
        "created_at": subscription.created_at,
        "secret_rotated_at": subscription.secret_rotated_at,
    }
    if secret is not None:
        return WebhookCreatedSerializer({**data, "secret": secret}).data
    return WebhookSerializer(data).data


WEBHOOK_ID = OpenApiParameter("webhook_id", ID_SCHEMA, OpenApiParameter.PATH, description="The subscription's id.")
DELIVERY_ID = OpenApiParameter("delivery_id", ID_SCHEMA, OpenApiParameter.PATH, description="The delivery's id.")
EXAMPLE = OpenApiExample(
    "Session ends and usage of two courses",
    value={
        "url": "https://lms.example.edu/webhooks/npu-lab",
        "description": "Moodle production",
        "event_types": ["session.ended", "usage.recorded"],
        "courses": [12, 14],
    },
    request_only=True,
)
BAD_URL_EXAMPLE = OpenApiExample(
    "A plain http URL",
    value={
        "error": {
            "code": "invalid",
            "message": "Invalid input: url: The URL must use https: deliveries carry student data.",
            "fields": {"url": ["The URL must use https: deliveries carry student data."]},
        }
    },
    response_only=True,
    status_codes=["400"],
)


def _institution(request):
    return request.user.institution


def _subscription_or_404(request, webhook_id) -> Subscription:
    subscription = selectors.subscription_of(institution=_institution(request), subscription_id=webhook_id)
    if subscription is None:
        raise exceptions.NotFound(_("No such webhook subscription."))
    return subscription


def _validated(request, values: dict) -> dict:
    institution = _institution(request)
    form = SubscriptionForm(values, institutions=None, institution=institution)
    if not form.is_valid():
        raise form_errors(form)
    return form.cleaned_data


def _no_store(response: Response) -> Response:
    response["Cache-Control"] = "no-store"  # a secret must not stay in a cache
    return response


# --- views ---------------------------------------------------------------------------------------


class WebhookList(generics.ListAPIView):
    required_scopes = {"GET": "webhooks:read", "POST": "webhooks:write"}
    serializer_class = WebhookSerializer
    queryset = Subscription.objects.none()

    def get_queryset(self):
        if getattr(self, "swagger_fake_view", False):
            return Subscription.objects.none()
        return selectors.subscriptions_of(institution=_institution(self.request))

    def list(self, request, *args, **kwargs):
        page = self.paginate_queryset(self.get_queryset())
        return self.get_paginated_response([_json(s) for s in page])

    @extend_schema(
        summary="The institution's webhook subscriptions",
        responses={200: WebhookSerializer(many=True), **BAD_PAGE, **AUTH_ERRORS, **PAST_THE_END},
    )
    def get(self, request, *args, **kwargs):
        return self.list(request, *args, **kwargs)

    @extend_schema(
        summary="Subscribe to events",
        description=(
            "Events: " + ", ".join(f"`{name}`" for name in EVENT_TYPES) + ". The answer carries the signing secret "
            '(`secret`, whsec_...), this once: deliveries are signed with it (docs/lms.md "Webhooks").'
        ),
        parameters=[LOCATION],
        request=WebhookSerializer,
        responses={201: WebhookCreatedSerializer, **INVALID, **AUTH_ERRORS, 415: PRECONDITIONS[415]},
        examples=[EXAMPLE, BAD_URL_EXAMPLE, ERROR_EXAMPLE],
    )
    def post(self, request):
        serializer = WebhookSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        data = _validated(request, serializer.validated_data)
        subscription, secret = services.subscription_create(
            institution=_institution(request),
            url=data["url"],
            description=data["description"],
            event_types=data["event_types"],
            courses=list(data["courses"]),
            active=serializer.validated_data["active"],
            by=request.user,
        )
        return _no_store(created(request, _json(subscription, secret), "api:webhook", subscription.pk))


class WebhookDetail(APIView):
    required_scopes = {"GET": "webhooks:read", "PATCH": "webhooks:write", "DELETE": "webhooks:write"}

    @extend_schema(
        summary="A webhook subscription", parameters=[WEBHOOK_ID], responses={200: WebhookSerializer, **AUTH_ERRORS, **NOT_FOUND}
    )
    def get(self, request, webhook_id):
        return Response(_json(_subscription_or_404(request, webhook_id)))

    @extend_schema(
        summary="Change a subscription, or pause and resume it",
        description='`{"active": false}` pauses it: nothing is sent, pending deliveries wait; `true` resumes.',
        parameters=[WEBHOOK_ID],
        request=WebhookPatchSerializer,
        responses={200: WebhookSerializer, **INVALID, **AUTH_ERRORS, **NOT_FOUND, 415: PRECONDITIONS[415]},
        examples=[OpenApiExample("Pause", value={"active": False}, request_only=True)],
    )
    def patch(self, request, webhook_id):
        serializer = WebhookPatchSerializer(data=request.data, partial=True)
        serializer.is_valid(raise_exception=True)
        subscription = _subscription_or_404(request, webhook_id)
        given = serializer.validated_data
        current = {
            "url": subscription.url,
            "description": subscription.description,
            "event_types": subscription.event_types,
            "courses": [c.pk for c in subscription.courses.all()],
        }
        data = _validated(request, {**current, **{k: v for k, v in given.items() if k != "active"}})
        changes = {k: data[k] for k in ("url", "description", "event_types", "courses") if k in given}
        if "courses" in changes:
            changes["courses"] = list(changes["courses"])
        if "active" in given:
            changes["active"] = given["active"]
        services.subscription_update(subscription=subscription, by=request.user, **changes)
        return Response(_json(_subscription_or_404(request, webhook_id)))

    @extend_schema(
        summary="Delete a subscription",
        description="With its deliveries and their log.",
        parameters=[WEBHOOK_ID],
        request=None,
        responses={204: None, **AUTH_ERRORS, **NOT_FOUND},
    )
    def delete(self, request, webhook_id):
        services.subscription_delete(subscription=_subscription_or_404(request, webhook_id), by=request.user)
        return Response(status=status.HTTP_204_NO_CONTENT)


class WebhookSecret(APIView):
    required_scopes = {"POST": "webhooks:write"}

    @extend_schema(
        summary="Rotate the signing secret",
        description="Every attempt from now on is signed with the new secret, shown this once.",
        parameters=[WEBHOOK_ID],
        request=None,
        responses={200: SecretSerializer, **AUTH_ERRORS, **NOT_FOUND},
    )
    def post(self, request, webhook_id):
        secret = services.subscription_rotate_secret(subscription=_subscription_or_404(request, webhook_id), by=request.user)
        return _no_store(Response(SecretSerializer({"secret": secret}).data))


class WebhookDeliveries(generics.ListAPIView):
    required_scopes = {"GET": "webhooks:read"}
    serializer_class = DeliverySerializer
    queryset = Delivery.objects.none()

    def get_queryset(self):
        if getattr(self, "swagger_fake_view", False):
            return Delivery.objects.none()
        return selectors.deliveries_of(subscription=_subscription_or_404(self.request, self.kwargs["webhook_id"]))

    @extend_schema(
        summary="A subscription's delivery log",
        description="Newest first; each delivery with every attempt: its time, the status code or the error, how long it took.",
        parameters=[WEBHOOK_ID],
        responses={200: DeliverySerializer(many=True), **BAD_PAGE, **AUTH_ERRORS, **NOT_FOUND},
    )
    def get(self, request, *args, **kwargs):
        return self.list(request, *args, **kwargs)


class DeliveryRedeliver(APIView):
    required_scopes = {"POST": "webhooks:write"}

    @extend_schema(
        summary="Send a delivery again",
        description=(
            "A new delivery with the same body and `webhook-id`, sent now. 409 `conflict` while the delivery "
            "is still being tried."
        ),
        parameters=[WEBHOOK_ID, DELIVERY_ID],
        request=None,
        responses={
            202: DeliverySerializer,
            409: error_response("The delivery is still pending (`conflict`)."),
            **AUTH_ERRORS,
            **NOT_FOUND,
        },
    )
    def post(self, request, webhook_id, delivery_id):
        subscription = _subscription_or_404(request, webhook_id)
        delivery = _delivery_or_404(subscription, delivery_id)
        try:
            again = services.delivery_redeliver(delivery=delivery, by=request.user)
        except services.RedeliverRefused:
            raise Conflict(_("This delivery is still being tried; redeliver it once it is delivered or failed.")) from None
        again = selectors.deliveries_of(subscription=subscription).get(pk=again.pk)
        return Response(DeliverySerializer(again).data, status=status.HTTP_202_ACCEPTED)


def _delivery_or_404(subscription: Subscription, delivery_id) -> Delivery:
    try:
        pk = int(delivery_id)
    except (TypeError, ValueError):
        pk = 0
    delivery = (
        Delivery.objects.select_related("subscription__institution").filter(subscription=subscription, pk=pk).first()
        if 0 < pk < 2**63
        else None
    )
    if delivery is None:
        raise exceptions.NotFound(_("No such delivery of this subscription."))
    return delivery
