"""The operator console's webhooks page (/ops/webhooks/): an institution's operators (and platform
operators) subscribe their LMS to events, pause, rotate the secret, delete, and read the delivery
log with a redeliver button. The secret is shown once, on the page that answers its making."""

from __future__ import annotations

from django.contrib import messages
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.utils.translation import gettext as _
from django.views.decorators.http import require_http_methods

from labs.selectors.operations import institutions_for
from labs.views.operator import operator_view
from webhooks import selectors, services
from webhooks.forms import SubscriptionForm
from webhooks.models import Delivery

LOG_LENGTH = 100


@operator_view()
@require_http_methods(["GET", "POST"])
def webhooks(request: HttpRequest) -> HttpResponse:
    institutions = institutions_for(scope=request.operator_scope)
    form = SubscriptionForm(request.POST or None, institutions=institutions)
    created = secret = None
    if request.method == "POST" and form.is_valid():
        data = form.cleaned_data
        created, secret = services.subscription_create(
            institution=data["institution"],
            url=data["url"],
            description=data["description"],
            event_types=data["event_types"],
            courses=list(data["courses"]),
            by=request.user,
        )
        form = SubscriptionForm(institutions=institutions)
    response = render(
        request,
        "webhooks/ops_webhooks.html",
        {
            "form": form,
            "subscriptions": selectors.subscriptions_for(scope=request.operator_scope),
            "created": created,
            "secret": secret,
        },
    )
    if secret:
        response["Cache-Control"] = "no-store"  # a secret must not stay in a cache
    return response


@operator_view()
@require_http_methods(["GET", "POST"])
def webhook_detail(request: HttpRequest, subscription_id: int) -> HttpResponse:
    subscription = selectors.subscriptions_for(scope=request.operator_scope).filter(pk=subscription_id).first()
    if subscription is None:
        raise Http404(_("No such webhook subscription."))
    secret = None
    if request.method == "POST":
        action = request.POST.get("action", "")
        if action in ("pause", "resume"):
            services.subscription_update(subscription=subscription, active=action == "resume", by=request.user)
            if action == "pause":
                messages.success(request, _("The subscription is paused: nothing is sent until it is resumed."))
            else:
                messages.success(request, _("The subscription is active again; waiting deliveries are sent."))
            return redirect("ops-webhook", subscription.pk)
        if action == "rotate":
            secret = services.subscription_rotate_secret(subscription=subscription, by=request.user)
        elif action == "delete":
            if not request.POST.get("confirm"):
                messages.error(request, _("Tick “I am sure” to delete the subscription."))
                return redirect("ops-webhook", subscription.pk)
            services.subscription_delete(subscription=subscription, by=request.user)
            messages.success(request, _("The subscription to %(url)s is deleted.") % {"url": subscription.url})
            return redirect("ops-webhooks")
        elif action == "redeliver":
            delivery = Delivery.objects.filter(subscription=subscription, pk=_int(request.POST.get("delivery"))).first()
            if delivery is None:
                messages.error(request, _("No such delivery of this subscription."))
            else:
                try:
                    services.delivery_redeliver(delivery=delivery, by=request.user)
                    messages.success(request, _("The delivery is sent again."))
                except services.RedeliverRefused:
                    messages.error(request, _("This delivery is still being tried; redeliver it once it is delivered or failed."))
            return redirect("ops-webhook", subscription.pk)
        else:
            messages.error(request, _("Unknown action."))
            return redirect("ops-webhook", subscription.pk)
    response = render(
        request,
        "webhooks/ops_webhook.html",
        {
            "subscription": subscription,
            "deliveries": selectors.deliveries_of(subscription=subscription)[:LOG_LENGTH],
            "log_length": LOG_LENGTH,
            "secret": secret,
        },
    )
    if secret:
        response["Cache-Control"] = "no-store"
    return response


def _int(value) -> int:
    try:
        number = int(value)
    except (TypeError, ValueError):
        return 0
    return number if 0 < number < 2**63 else 0
