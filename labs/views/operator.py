"""The operator console: the cluster card by card (live), drain and card health, stopping a
session, tenancy (allotments, allow-lists, operators), repairs and the audit log.

Every view starts from ``operator_scope``: 404 for anyone who operates nothing. Actions that
change shared hardware (drain, card health, allotments, who operates) need a platform
operator (403 otherwise); an institution's operator manages its own allow-list and stops its
own sessions. Each action asks for confirmation and a reason, and lands in the audit log.
"""

from __future__ import annotations

from decimal import Decimal
from functools import wraps

from django import forms
from django.conf import settings
from django.contrib import messages
from django.contrib.auth import get_user_model
from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied
from django.core.paginator import Paginator
from django.http import Http404, HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.utils import timezone
from django.utils.translation import gettext as _
from django.utils.translation import gettext_lazy, ngettext
from django.views.decorators.http import require_GET, require_http_methods, require_POST

from labs.domain.vllm import VENDOR_MODELS
from labs.forms import GiBField, TemplateForm, filter_text
from labs.models import Allocation, AllowedImage, AuditEvent, Card, Institution, InstitutionRole, Node, RepairEvent
from labs.presentation import gib_text, label_separator
from labs.selectors.console import cluster_facts
from labs.selectors.operations import (
    audit_events,
    card_instances,
    cluster_state,
    cluster_state_json,
    cluster_summary,
    fragmentation,
    institutions_for,
    operator_scope,
    repairs,
    session_for_operator,
)
from labs.selectors.reservations import upcoming_slots
from labs.selectors.usage import usage_chart, usage_report, usage_report_csv
from labs.services import catalog, evacuation, operations, selftest
from labs.services.affiliations import affiliation_link
from labs.views.tables import Column, sorted_table

PAGE_SIZE = 50


def operator_view(*, platform: bool = False):
    def decorate(view):
        @login_required
        @wraps(view)
        def wrapper(request: HttpRequest, *args, **kwargs):
            scope = operator_scope(user=request.user)
            if scope is None:
                raise Http404(_("No such page."))
            if platform and not scope.platform:
                raise PermissionDenied(_("Only a platform operator may do this."))
            # Not ``request.scope``: under ASGI that is the connection's scope, which Django reads the
            # request's scheme from (build_absolute_uri, is_secure).
            request.operator_scope = scope
            return view(request, *args, **kwargs)

        return wrapper

    return decorate


class ReasonForm(forms.Form):
    reason = forms.CharField(
        label=gettext_lazy("Reason"),
        max_length=300,
        help_text=gettext_lazy("Recorded in the audit log, e.g. “firmware update, ticket 4711”."),
    )
    confirm = forms.BooleanField(label=gettext_lazy("I am sure"))


# --- the cluster ------------------------------------------------------------------------------


@operator_view()
@require_GET
def cluster(request: HttpRequest) -> HttpResponse:
    nodes = cluster_state()
    report = fragmentation()
    return render(
        request,
        "labs/ops/cluster.html",
        {
            "nodes": nodes,
            "fragmentation": report,
            "scope": request.operator_scope,
            "summary": cluster_summary(nodes).to_json(),
        },
    )


@operator_view()
@require_GET
def cluster_json(request: HttpRequest) -> HttpResponse:
    return JsonResponse(cluster_state_json(cluster_state()))


@operator_view()
@require_GET
def card_detail(request: HttpRequest, card_id: int) -> HttpResponse:
    card = get_object_or_404(Card.objects.select_related("node"), pk=card_id)
    instances = card_instances(card=card, scope=request.operator_scope)
    return render(request, "labs/ops/card.html", {"card": card, "instances": instances, "scope": request.operator_scope})


# --- actions ----------------------------------------------------------------------------------


@operator_view(platform=True)
@require_http_methods(["GET", "POST"])
def node_drain(request: HttpRequest, node_id: int) -> HttpResponse:
    node = get_object_or_404(Node, pk=node_id)
    undrain = node.drained
    form = ReasonForm(request.POST or None)
    if request.method == "POST" and form.is_valid():
        reason = form.cleaned_data["reason"]
        if undrain:
            operations.node_undrain(node=node, by=request.user, reason=reason)
            messages.success(request, _("%(node)s takes new sessions again.") % {"node": node.name})
        else:
            operations.node_drain(node=node, by=request.user, reason=reason)
            messages.success(request, _("%(node)s is drained: no new sessions; the running ones go on.") % {"node": node.name})
        return redirect("labs:ops")
    remaining = Allocation.objects.filter(card__node=node, released_at__isnull=True).count()
    return render(
        request,
        "labs/ops/confirm.html",
        {"form": form, "node": node, "undrain": undrain, "remaining": remaining, "what": "drain"},
    )


class EvacuateForm(ReasonForm):
    minutes = forms.IntegerField(
        label=gettext_lazy("Deadline (minutes from now)"),
        initial=evacuation.EVACUATION_MINUTES_DEFAULT,
        widget=forms.NumberInput(attrs={"min": evacuation.EVACUATION_MINUTES_MIN, "max": evacuation.EVACUATION_MINUTES_MAX}),
        help_text=gettext_lazy("Students are warned now; labs still there at the deadline are stopped."),
        error_messages={
            "required": gettext_lazy("Give a deadline in minutes."),
            "invalid": gettext_lazy("Give the deadline as a whole number of minutes."),
        },
    )

    field_order = ["minutes", "reason", "confirm"]

    def clean_minutes(self) -> int:
        minutes = self.cleaned_data["minutes"]
        if not evacuation.EVACUATION_MINUTES_MIN <= minutes <= evacuation.EVACUATION_MINUTES_MAX:
            raise forms.ValidationError(
                _("Give a deadline between %(min)s and %(max)s minutes.")
                % {"min": evacuation.EVACUATION_MINUTES_MIN, "max": evacuation.EVACUATION_MINUTES_MAX}
            )
        return minutes


@operator_view(platform=True)
@require_http_methods(["GET", "POST"])
def node_evacuate(request: HttpRequest, node_id: int) -> HttpResponse:
    node = get_object_or_404(Node, pk=node_id)
    form = EvacuateForm(request.POST or None)
    if request.method == "POST" and form.is_valid():
        try:
            report = evacuation.node_evacuate(
                node=node, by=request.user, minutes=form.cleaned_data["minutes"], reason=form.cleaned_data["reason"]
            )
        except evacuation.EvacuationRefused as exc:
            form.add_error(None, str(exc))
        else:
            messages.success(
                request,
                ngettext(
                    "%(node)s is being emptied: %(labs)s lab warned; it stops at %(time)s if still there.",
                    "%(node)s is being emptied: %(labs)s labs warned; those still there stop at %(time)s.",
                    len(report.warned),
                )
                % {
                    "node": node.name,
                    "labs": len(report.warned),
                    "time": timezone.localtime(report.deadline).strftime("%H:%M"),
                },
            )
            if report.left or report.slots_short:
                messages.warning(
                    request,
                    _("Some class reservations do not fit on the other nodes; their instructors see it on their page."),
                )
            return redirect("labs:ops")
    remaining = Allocation.objects.filter(card__node=node, released_at__isnull=True).count()
    return render(
        request,
        "labs/ops/confirm.html",
        {"form": form, "node": node, "remaining": remaining, "what": "evacuate"},
    )


@operator_view(platform=True)
@require_http_methods(["GET", "POST"])
def card_health(request: HttpRequest, card_id: int) -> HttpResponse:
    card = get_object_or_404(Card.objects.select_related("node"), pk=card_id)
    form = ReasonForm(request.POST or None)
    if request.method == "POST" and form.is_valid():
        operations.card_set_disabled(card=card, by=request.user, disabled=not card.disabled, reason=form.cleaned_data["reason"])
        messages.success(request, _("Saved."))
        return redirect("labs:ops-card", card.pk)
    return render(request, "labs/ops/confirm.html", {"form": form, "card": card, "what": "card"})


@operator_view(platform=True)
@require_POST
def card_isolation_clear(request: HttpRequest, card_id: int) -> HttpResponse:
    card = get_object_or_404(Card.objects.select_related("node"), pk=card_id)
    if selftest.card_clear_isolation_suspect(card=card, by=request.user):
        messages.success(request, _("The isolation mark is cleared."))
    else:
        messages.info(request, _("This card is not marked isolation suspect."))
    return redirect("labs:ops-card", card.pk)


@operator_view()
@require_http_methods(["GET", "POST"])
def session_stop(request: HttpRequest, session_id) -> HttpResponse:
    session = session_for_operator(scope=request.operator_scope, session_id=session_id)
    if session is None:
        raise Http404(_("No such open session, or not one of your institution's."))
    form = ReasonForm(request.POST or None)
    if request.method == "POST" and form.is_valid():
        if operations.session_stop_by_operator(session=session, by=request.user, reason=form.cleaned_data["reason"]):
            messages.success(request, _("The session is stopping."))
        else:
            messages.info(request, _("This session is already ending."))
        return redirect("labs:ops")
    return render(request, "labs/ops/confirm.html", {"form": form, "session": session, "what": "session"})


# --- tenancy ----------------------------------------------------------------------------------


class AllotmentForm(forms.ModelForm):
    """Memory typed in GiB, as in every other form, and kept in MiB (``GiBField`` converts)."""

    allot_memory_mib = GiBField(label=gettext_lazy("Memory in total (GiB)"), required=False)

    class Meta:
        model = Institution
        fields = ["allot_instances", "allot_core_percent", "allot_memory_mib", "allow_overcommit"]
        labels = {
            "allot_instances": gettext_lazy("Instances in total"),
            "allot_core_percent": gettext_lazy("AI Core in total (%)"),
        }

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        if self.instance.allot_memory_mib is not None:
            self.initial["allot_memory_mib"] = Decimal(self.instance.allot_memory_mib) / 1024


class AllowedImageForm(forms.ModelForm):
    class Meta:
        model = AllowedImage
        fields = ["kind", "reference", "image", "label"]

    def clean_reference(self):
        value = self.cleaned_data["reference"].strip()
        if any(ch.isspace() for ch in value):
            raise forms.ValidationError(_("An image or model name has no spaces."))
        return value


@operator_view()
@require_http_methods(["GET", "POST"])
def tenancy(request: HttpRequest) -> HttpResponse:
    scope = request.operator_scope
    institutions = list(institutions_for(scope=scope).prefetch_related("allowed_images", "roles__user"))
    if request.method == "POST":
        institution = next((i for i in institutions if str(i.pk) == request.POST.get("institution")), None)
        if institution is None:
            raise Http404(_("No such institution."))
        action = request.POST.get("action")
        if action in ("allotment", "operator-add", "operator-remove", "affiliate") and not scope.platform:
            raise PermissionDenied(_("Only a platform operator may do this."))
        if action == "allotment":
            form = AllotmentForm(request.POST, instance=institution)
            if form.is_valid():
                operations.institution_set_allotment(institution=institution, by=request.user, values=form.cleaned_data)
                messages.success(request, _("Saved."))
            else:
                for errors in form.errors.values():
                    for error in errors:
                        messages.error(request, error)
        elif action == "image-add":
            form = AllowedImageForm(request.POST)
            added = form.is_valid() and operations.allowlist_add(institution=institution, by=request.user, **form.cleaned_data)
            if added:
                messages.success(request, _("Added to the allow-list."))
            else:
                messages.error(
                    request,
                    " ".join(str(e) for errors in form.errors.values() for e in errors) or _("It is on the allow-list already."),
                )
        elif action == "image-remove":
            image = AllowedImage.objects.filter(institution=institution, pk=request.POST.get("image") or 0).first()
            if image is not None:
                operations.allowlist_remove(image=image, by=request.user)
                messages.success(request, _("Removed from the allow-list; templates made from it keep running."))
        elif action == "template-add":
            form = TemplateForm(request.POST, institution=institution, facts=cluster_facts(), prefix=f"t{institution.pk}")
            if form.is_valid():
                template = catalog.catalogue_template_create(institution=institution, by=request.user, **form.template_fields())
                messages.success(
                    request, _("%(template)s is in the catalogue: courses can offer it now.") % {"template": template.name}
                )
            else:
                for name, errors in form.errors.items():
                    label = form.fields[name].label if name in form.fields else ""
                    for error in errors:
                        messages.error(request, f"{label}{label_separator()}{error}" if label else error)
        elif action == "affiliate":
            user = get_user_model().objects.filter(username=request.POST.get("username", "").strip()).first()
            if user is None:
                messages.error(request, _("No account is called %(name)s.") % {"name": request.POST.get("username", "")})
            elif affiliation_link(user=user, institution=institution, by=request.user):
                messages.success(
                    request,
                    _("%(name)s is an account of %(institution)s: its course rosters can add it.")
                    % {"name": user.get_username(), "institution": institution.name},
                )
            else:
                messages.info(
                    request,
                    _("%(name)s is an account of %(institution)s already.")
                    % {"name": user.get_username(), "institution": institution.name},
                )
        elif action in ("operator-add", "operator-remove"):
            user = get_user_model().objects.filter(username=request.POST.get("username", "").strip()).first()
            if user is None:
                messages.error(request, _("No account is called %(name)s.") % {"name": request.POST.get("username", "")})
            elif action == "operator-add":
                operations.operator_add(institution=institution, user=user, by=request.user)
                messages.success(
                    request,
                    _("%(name)s operates %(institution)s.") % {"name": user.get_username(), "institution": institution.name},
                )
            else:
                operations.operator_remove(institution=institution, user=user, by=request.user)
                messages.success(request, _("Removed."))
        else:
            messages.error(request, _("Unknown action."))
        return redirect("labs:ops-tenancy")
    facts = cluster_facts()
    rows = [
        {
            "institution": i,
            "allotment_form": AllotmentForm(instance=i),
            "template_form": TemplateForm(None, institution=i, facts=facts, prefix=f"t{i.pk}"),
            "operators": [r.user for r in i.roles.all() if r.role == InstitutionRole.Role.OPERATOR],
            "templates": i.templates.filter(course__isnull=True).order_by("name"),
            "memory_text": gib_text(i.allot_memory_mib) if i.allot_memory_mib is not None else "",
        }
        for i in institutions
    ]
    return render(
        request,
        "labs/ops/tenancy.html",
        {"rows": rows, "scope": scope, "vllm_image": settings.LAB_VLLM_IMAGE, "vendor_models": VENDOR_MODELS},
    )


# --- repairs and audit ------------------------------------------------------------------------


@operator_view()
@require_GET
def repairs_view(request: HttpRequest) -> HttpResponse:
    kind, node = filter_text(request.GET, "kind"), filter_text(request.GET, "node")
    page = Paginator(repairs(scope=request.operator_scope, kind=kind, node=node), PAGE_SIZE).get_page(request.GET.get("page"))
    return render(
        request,
        "labs/ops/repairs.html",
        {
            "page": page,
            "kinds": RepairEvent.Kind.choices,
            "nodes": Node.objects.values_list("name", flat=True),
            "filters": {"kind": kind, "node": node},
        },
    )


USAGE_WINDOWS = (7, 28, 91)  # days


@operator_view()
@require_GET
def usage_view(request: HttpRequest) -> HttpResponse:
    scope = request.operator_scope
    days = int(request.GET["days"]) if request.GET.get("days") in {str(d) for d in USAGE_WINDOWS} else USAGE_WINDOWS[0]
    report = usage_report(institutions=None if scope.platform else scope.institutions, days=days)
    if request.GET.get("format") == "csv":
        response = HttpResponse(usage_report_csv(report), content_type="text/csv; charset=utf-8")
        response["Content-Disposition"] = f'attachment; filename="usage-{days}d-{timezone.localdate().isoformat()}.csv"'
        return response
    chart = usage_chart(report.days, report.core_hours_by_day, report.gib_hours_by_day)
    classes = upcoming_slots(institutions=None if scope.platform else scope.institutions)
    table = sorted_table(request, report.courses, _usage_columns(), default="institution", keep=["days"])
    return render(
        request,
        "labs/ops/usage.html",
        {"report": report, "table": table, "chart": chart, "days": days, "windows": USAGE_WINDOWS, "classes": classes},
    )


def _usage_columns() -> list[Column]:
    return [
        Column("institution", _("Institution"), lambda r: r.institution.casefold()),
        Column("course", _("Course"), lambda r: (r.code.casefold(), r.term.casefold())),
        Column("students", _("Students"), lambda r: r.students),
        Column("sessions", _("Sessions"), lambda r: r.sessions),
        Column("core", _("AI-Core-% × h"), lambda r: r.totals.core_percent_seconds),
        Column("gib", _("GiB × h"), lambda r: r.totals.memory_mib_seconds),
    ]


@operator_view()
@require_GET
def audit_view(request: HttpRequest) -> HttpResponse:
    action, actor = filter_text(request.GET, "action"), filter_text(request.GET, "actor")
    events = audit_events(scope=request.operator_scope, action=action, actor=actor)
    page = Paginator(events, PAGE_SIZE).get_page(request.GET.get("page"))
    actions = sorted(set(AuditEvent.objects.values_list("action", flat=True).distinct()))
    return render(
        request, "labs/ops/audit.html", {"page": page, "actions": actions, "filters": {"action": action, "actor": actor}}
    )
