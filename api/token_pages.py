"""The operator console's API tokens page (/ops/tokens/): an institution's operators (and platform
operators) make tokens for their LMS, see when each was last used, and revoke them.

The secret is shown once, on the page that answers the creation, and never stored.
"""

from __future__ import annotations

from datetime import timedelta

from django import forms
from django.contrib import messages
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.utils import timezone
from django.utils.translation import gettext as _
from django.utils.translation import gettext_lazy
from django.views.decorators.http import require_http_methods

from api import oauth as api_oauth
from api import selectors, services
from api.oauth import oauth_client_create
from api.scopes import SCOPES
from labs.selectors.operations import institutions_for
from labs.views.operator import ReasonForm, operator_view


class OAuthClientForm(forms.Form):
    institution = forms.ModelChoiceField(queryset=None, label=gettext_lazy("Institution"))
    name = forms.CharField(label=gettext_lazy("Name"), max_length=100)
    scopes = forms.MultipleChoiceField(
        label=gettext_lazy("Scopes"), choices=list(SCOPES.items()), widget=forms.CheckboxSelectMultiple
    )

    def __init__(self, *args, scope, **kwargs) -> None:
        super().__init__(*args, prefix="oauth", **kwargs)
        self.fields["institution"].queryset = institutions_for(scope=scope)


class TokenForm(forms.Form):
    institution = forms.ModelChoiceField(queryset=None, label=gettext_lazy("Institution"))
    name = forms.CharField(
        label=gettext_lazy("Name"), max_length=100, help_text=gettext_lazy("Which system uses it, e.g. “Moodle production”.")
    )
    scopes = forms.MultipleChoiceField(
        label=gettext_lazy("Scopes"), choices=list(SCOPES.items()), widget=forms.CheckboxSelectMultiple
    )
    expires_in_days = forms.IntegerField(
        label=gettext_lazy("Expires after (days)"),
        required=False,
        min_value=1,
        max_value=3650,
        help_text=gettext_lazy("Empty: never."),
    )

    def __init__(self, *args, scope, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.fields["institution"].queryset = institutions_for(scope=scope)


@operator_view()
@require_http_methods(["GET", "POST"])
def tokens(request: HttpRequest) -> HttpResponse:
    oauth = request.method == "POST" and request.POST.get("kind") == "oauth"
    form = TokenForm(request.POST if request.method == "POST" and not oauth else None, scope=request.operator_scope)
    client_form = OAuthClientForm(request.POST if oauth else None, scope=request.operator_scope)
    created = secret = created_client = client_secret = None
    if request.method == "POST" and not oauth and form.is_valid():
        days = form.cleaned_data["expires_in_days"]
        created, secret = services.token_create(
            institution=form.cleaned_data["institution"],
            name=form.cleaned_data["name"],
            scopes=form.cleaned_data["scopes"],
            expires_at=timezone.now() + timedelta(days=days) if days else None,
            by=request.user,
        )
        form = TokenForm(scope=request.operator_scope)
    if oauth and client_form.is_valid():
        created_client, client_secret = oauth_client_create(
            institution=client_form.cleaned_data["institution"],
            name=client_form.cleaned_data["name"],
            scopes=client_form.cleaned_data["scopes"],
            by=request.user,
        )
        client_form = OAuthClientForm(scope=request.operator_scope)
    response = render(
        request,
        "api/ops_tokens.html",
        {
            "form": form,
            "client_form": client_form,
            "tokens": selectors.tokens_for(scope=request.operator_scope),
            "clients": selectors.oauth_clients_for(scope=request.operator_scope),
            "created": created,
            "secret": secret,
            "created_client": created_client,
            "client_secret": client_secret,
            "now": timezone.now(),
        },
    )
    if secret or client_secret:
        response["Cache-Control"] = "no-store"  # a secret must not stay in a cache
    return response


@operator_view()
@require_http_methods(["GET", "POST"])
def token_revoke(request: HttpRequest, token_id: int) -> HttpResponse:
    token = selectors.tokens_for(scope=request.operator_scope).filter(pk=token_id).first()
    if token is None:
        raise Http404(_("No such token."))
    form = ReasonForm(request.POST or None)
    if request.method == "POST" and form.is_valid():
        if services.token_revoke(token=token, by=request.user, reason=form.cleaned_data["reason"]):
            messages.success(request, _("The token %(name)s is revoked: it no longer works.") % {"name": token.name})
        return redirect("ops-tokens")
    return render(request, "api/ops_token_revoke.html", {"form": form, "token": token})


@operator_view()
@require_http_methods(["GET", "POST"])
def oauth_client_revoke(request: HttpRequest, client_id: int) -> HttpResponse:
    client = selectors.oauth_clients_for(scope=request.operator_scope).filter(pk=client_id).first()
    if client is None:
        raise Http404(_("No such OAuth client."))
    form = ReasonForm(request.POST or None)
    if request.method == "POST" and form.is_valid():
        name = client.application.name
        api_oauth.oauth_client_revoke(client=client, by=request.user, reason=form.cleaned_data["reason"])
        messages.success(request, _("The OAuth client %(name)s is revoked: its access tokens no longer work.") % {"name": name})
        return redirect("ops-tokens")
    return render(request, "api/ops_token_revoke.html", {"form": form, "client": client})
