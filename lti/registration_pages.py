"""The operator console's LTI page: the platforms (LMSs) each institution has registered.

An institution's operator manages its own registrations; a platform operator all of them. The
page also shows what to enter in the LMS (the tool's URLs).
"""

from __future__ import annotations

from django import forms
from django.contrib import messages
from django.db import models
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.urls import reverse
from django.utils.translation import gettext_lazy as _
from django.views.decorators.http import require_http_methods, require_POST

from labs.models import Institution
from labs.selectors.operations import institutions_for
from labs.views.operator import operator_view
from lti import services
from lti.models import Registration
from lti.selectors import registration_for, registrations_for


def _formfield(field, **kwargs):
    if isinstance(field, models.URLField):
        kwargs["assume_scheme"] = "https"
    return field.formfield(**kwargs)


class RegistrationForm(forms.ModelForm):
    institution = forms.ModelChoiceField(queryset=Institution.objects.none(), label=_("Institution"))
    deployment_ids = forms.CharField(
        label=_("Deployment IDs"),
        widget=forms.Textarea(attrs={"rows": 3}),
        help_text=_("One per line, as the LMS shows them."),
    )

    class Meta:
        model = Registration
        formfield_callback = _formfield
        fields = ["institution", "name", "issuer", "client_id", "auth_login_url", "auth_token_url", "auth_audience", "keyset_url"]

    def __init__(self, *args, scope, **kwargs):
        super().__init__(*args, **kwargs)
        self.fields["institution"].queryset = institutions_for(scope=scope)
        if self.instance.pk:
            self.initial["deployment_ids"] = "\n".join(self.instance.deployments.values_list("deployment_id", flat=True))

    def deployments(self) -> list[str]:
        return [line.strip() for line in self.cleaned_data["deployment_ids"].splitlines() if line.strip()]


class LinkForm(forms.Form):
    """The institution an LMS that opens a new Dynamic Registration link registers into."""

    institution = forms.ModelChoiceField(queryset=Institution.objects.none(), label=_("Institution"))

    def __init__(self, *args, scope, **kwargs):
        super().__init__(*args, auto_id="link_%s", **kwargs)  # beside the registration form's own institution
        institutions = institutions_for(scope=scope)
        self.fields["institution"].queryset = institutions
        if len(only := list(institutions[:2])) == 1:
            self.fields["institution"].initial = only[0].pk


def _tool_urls(request: HttpRequest) -> dict[str, str]:
    return {
        "login": request.build_absolute_uri(reverse("lti:login")),
        "launch": request.build_absolute_uri(reverse("lti:launch")),
        "jwks": request.build_absolute_uri(reverse("lti:jwks")),
        "canvas": request.build_absolute_uri(reverse("lti:canvas-json")),
    }


def _save(request: HttpRequest, form: RegistrationForm, registration: Registration | None) -> None:
    fields = {name: value for name, value in form.cleaned_data.items() if name not in ("institution", "deployment_ids")}
    services.registration_save(
        by=request.user,
        institution=form.cleaned_data["institution"],
        fields=fields,
        deployment_ids=form.deployments(),
        registration=registration,
    )


def page_context(request: HttpRequest, form: RegistrationForm | None = None) -> dict:
    """What the LTI page shows: the tool's URLs, the registrations (those an LMS made by Dynamic
    Registration apart, until approved) and the forms."""
    rows = registrations_for(user=request.user)
    return {
        "tab": "lti",
        "rows": rows.filter(state=Registration.State.ACTIVE),
        "pending": rows.filter(state=Registration.State.PENDING),
        "form": form or RegistrationForm(scope=request.operator_scope),
        "link_form": LinkForm(scope=request.operator_scope),
        "urls": _tool_urls(request),
    }


@operator_view()
@require_http_methods(["GET", "POST"])
def registrations(request: HttpRequest) -> HttpResponse:
    form = RegistrationForm(request.POST or None, scope=request.operator_scope)
    if request.method == "POST" and form.is_valid():
        _save(request, form, None)
        messages.success(request, _("The LMS is registered."))
        return redirect("lti:ops-registrations")
    return render(request, "lti/ops_registrations.html", page_context(request, form))


@operator_view()
@require_http_methods(["GET", "POST"])
def registration_edit(request: HttpRequest, registration_id: int) -> HttpResponse:
    registration = registration_for(user=request.user, registration_id=registration_id)
    if registration is None:
        raise Http404(_("No such page."))
    form = RegistrationForm(request.POST or None, instance=registration, scope=request.operator_scope)
    if request.method == "POST" and form.is_valid():
        _save(request, form, registration)
        messages.success(request, _("The registration is saved."))
        return redirect("lti:ops-registrations")
    return render(request, "lti/ops_registration_edit.html", {"tab": "lti", "form": form, "registration": registration})


@operator_view()
@require_POST
def registration_delete(request: HttpRequest, registration_id: int) -> HttpResponse:
    registration = registration_for(user=request.user, registration_id=registration_id)
    if registration is None:
        raise Http404(_("No such page."))
    services.registration_delete(by=request.user, registration=registration)
    messages.success(request, _("The registration is deleted; launches from that LMS are refused."))
    return redirect("lti:ops-registrations")
