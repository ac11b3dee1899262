"""Dynamic Registration's pages: the registration URL an LMS opens, the operator's registration
links and their Approve / Reject of what an LMS registered, and Canvas's developer-key JSON."""

from __future__ import annotations

import re
from urllib.parse import urlsplit

from django.contrib import messages
from django.http import Http404, HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import redirect, render
from django.urls import reverse
from django.utils.translation import gettext as _
from django.views.decorators.http import require_GET, require_POST

from labs.views.operator import operator_view
from lti import dynamic_registration
from lti.registration_pages import LinkForm, page_context
from lti.selectors import registration_for
from lti.tool_configuration import ToolUrls, canvas_configuration


def tool_urls(request: HttpRequest) -> ToolUrls:
    """The tool's URLs on the host the request came to (one of ``ALLOWED_HOSTS``)."""
    return ToolUrls(
        login=request.build_absolute_uri(reverse("lti:login")),
        launch=request.build_absolute_uri(reverse("lti:launch")),
        jwks=request.build_absolute_uri(reverse("lti:jwks")),
    )


@require_GET
def canvas_json(request: HttpRequest) -> JsonResponse:
    response = JsonResponse(canvas_configuration(tool_urls(request)), json_dumps_params={"indent": 2})
    response["Cache-Control"] = "max-age=300"
    return response


def _framed_by(response: HttpResponse, openid_configuration: str) -> HttpResponse:
    """The LMS shows the registration page in its iframe or a window it opened: let the origin of
    its configuration (the issuer's, once checked) frame it, and nobody else."""
    origin = _origin(openid_configuration)
    response.xframe_options_exempt = True
    response._csp_replace = {"frame-ancestors": [origin] if origin else ["'none'"]}
    return response


# A host name or an IPv4 or IPv6 address, and nothing that could end the CSP's directive.
HOST = re.compile(r"[A-Za-z0-9.-]+|\[[0-9A-Fa-f:.]+\]")


def _origin(url: str) -> str | None:
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError:
        return None
    host = parts.netloc.rsplit(":", 1)[0] if port else parts.netloc
    if parts.scheme not in ("http", "https") or not HOST.fullmatch(host):
        return None
    return f"{parts.scheme}://{host}" + (f":{port}" if port else "")


@require_GET
def register(request: HttpRequest, token: str) -> HttpResponse:
    """The registration URL an LMS opens (LTI DR 1.0 §3.3). The page ends by posting
    ``org.imsglobal.lti.close`` to the LMS (``lti/registration_close.js``) once registered."""
    openid_configuration = request.GET.get("openid_configuration", "")
    if not openid_configuration:
        error = _("Open this address from the LMS's tool registration: the LMS did not send its OpenID configuration.")
        return render(request, "lti/registration_result.html", {"error": error}, status=400)
    try:
        registration = dynamic_registration.register(
            token=token,
            openid_configuration=openid_configuration,
            registration_token=request.GET.get("registration_token") or None,
            urls=tool_urls(request),
        )
    except dynamic_registration.RegistrationRefused as exc:
        response = render(request, "lti/registration_result.html", {"error": str(exc)}, status=400)
    else:
        response = render(request, "lti/registration_result.html", {"registration": registration})
    return _framed_by(response, openid_configuration)


@operator_view()
@require_POST
def link_create(request: HttpRequest) -> HttpResponse:
    form = LinkForm(request.POST, scope=request.operator_scope)
    if not form.is_valid():
        messages.error(request, _("Choose one of your institutions."))
        return redirect("lti:ops-registrations")
    token = dynamic_registration.link_create(by=request.user, institution=form.cleaned_data["institution"])
    link = request.build_absolute_uri(reverse("lti:register", kwargs={"token": token}))
    context = page_context(request) | {"new_link": link, "new_link_institution": form.cleaned_data["institution"]}
    response = render(request, "lti/ops_registrations.html", context)
    response["Cache-Control"] = "no-store"  # the link is a secret
    return response


def _pending(request: HttpRequest, registration_id: int):
    registration = registration_for(user=request.user, registration_id=registration_id)
    if registration is None:
        raise Http404(_("No such page."))
    return registration


@operator_view()
@require_POST
def registration_approve(request: HttpRequest, registration_id: int) -> HttpResponse:
    registration = _pending(request, registration_id)
    if dynamic_registration.registration_approve(by=request.user, registration=registration):
        messages.success(request, _("The registration is approved; launches from that LMS are accepted."))
    else:
        messages.error(request, _("This registration is not waiting for approval."))
    return redirect("lti:ops-registrations")


@operator_view()
@require_POST
def registration_reject(request: HttpRequest, registration_id: int) -> HttpResponse:
    registration = _pending(request, registration_id)
    if dynamic_registration.registration_reject(by=request.user, registration=registration):
        messages.success(request, _("The registration is rejected and deleted."))
    else:
        messages.error(request, _("This registration is not waiting for approval."))
    return redirect("lti:ops-registrations")
