"""LTI 1.3 endpoints: JWKS, OIDC login initiation, launch, the deep-linking picker and its response,
and the roster sync button. Validation is PyLTI1p3's (lti.tool); writes are lti.services'.

The login and launch requests come from the LMS, cross-site and often inside an iframe: they are
exempt from CSRF (the signed id_token, the state and the single-use nonce protect them) and may be
framed by the registration's own origins only.
"""

from __future__ import annotations

import logging

from django.contrib import messages
from django.contrib.auth import get_user_model, login
from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied
from django.http import Http404, HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import redirect, render
from django.urls import reverse
from django.utils.translation import gettext as _
from django.utils.translation import gettext_noop
from django.views.decorators.csrf import csrf_exempt
from django.views.decorators.http import require_GET, require_http_methods, require_POST
from pylti1p3.deep_link_resource import DeepLinkResource
from pylti1p3.exception import LtiException, OIDCException
from pylti1p3.lineitem import LineItem

from labs.models import Enrollment
from labs.selectors.console import CourseRole, course_for_console
from labs.services.sessions import LaunchRefused
from lti import grading, platform_storage, services, tool
from lti.models import REGISTRATION_PENDING, Identity
from lti.selectors import context_of_course, deep_link_templates, frame_origins
from lti.sync_message import refused_message, sync_message

logger = logging.getLogger(__name__)

BACKEND = "django.contrib.auth.backends.ModelBackend"


def _framable(response: HttpResponse, registration) -> HttpResponse:
    """Let the platform (and only it) show this response in its iframe."""
    response.xframe_options_exempt = True
    origins = frame_origins(registration)
    response._csp_replace = {"frame-ancestors": origins or ["'none'"]}
    return response


def _error(request: HttpRequest, message: str, registration=None, status: int = 400) -> HttpResponse:
    return _framable(render(request, "lti/error.html", {"message": message}, status=status), registration)


@require_GET
def jwks(request: HttpRequest) -> JsonResponse:
    response = JsonResponse({"keys": tool.published_jwks()})
    response["Cache-Control"] = "max-age=300"
    return response


@csrf_exempt
@require_http_methods(["GET", "POST"])
def oidc_login(request: HttpRequest) -> HttpResponse:
    conf = tool.ToolConf()
    params = request.POST if request.method == "POST" else request.GET
    if not params.get("lti1p3_new_window"):
        # First, in the LMS's frame: can this frame keep cookies? A static script checks and
        # reloads (or offers a new window); PyLTI1p3's own page has inline script the CSP forbids.
        registration = conf.registration_of(params.get("iss", ""), params.get("client_id")) if params.get("iss") else None
        if registration is None:
            return _error(request, _("This LMS is not registered with the portal (unknown issuer or client ID)."))
        if registration.state != registration.State.ACTIVE:
            return _error(request, str(REGISTRATION_PENDING), registration, status=403)
        keys = ["iss", "login_hint", "target_link_uri", "lti_message_hint", "lti_deployment_id", "client_id"]
        forward = {key: params[key] for key in keys if params.get(key)}
        forward["lti1p3_new_window"] = "1"
        target = platform_storage.wanted(params)
        if target:
            return _storage_login(request, conf, registration, target, forward)
        response = render(request, "lti/cookie_check.html", {"params": forward, "action": request.path})
        # The form's GET is redirected to the platform's authentication URL: form-action covers redirects.
        response._csp_update = {"form-action": frame_origins(registration)}
        return _framable(response, registration)
    try:
        login_request = tool.oidc_login(request, conf)
        response = login_request.redirect(request.build_absolute_uri(reverse("lti:launch")))
    except (OIDCException, LtiException) as exc:
        logger.info("LTI login refused: %s", exc)
        return _error(request, _("This LMS is not registered with the portal (unknown issuer or client ID)."))
    return response


def _storage_login(request: HttpRequest, conf: tool.ToolConf, registration, target: str, forward: dict) -> HttpResponse:
    """A login that keeps its state and nonce in the LMS's frame (``lti.platform_storage``); if
    the LMS does not answer, the page offers the cookie login in a new window (``forward``)."""
    try:
        storage = platform_storage.login_start(
            request, conf, registration=registration, launch_url=request.build_absolute_uri(reverse("lti:launch")), target=target
        )
    except (OIDCException, LtiException) as exc:
        logger.info("LTI login refused: %s", exc)
        return _error(request, _("This LMS is not registered with the portal (unknown issuer or client ID)."), registration)
    response = render(request, "lti/platform_storage.html", {"storage": storage, "params": forward, "action": request.path})
    response._csp_update = {"form-action": frame_origins(registration)}
    return _framable(response, registration)


STORAGE_REFUSED = gettext_noop(
    "Your LMS could not confirm that this launch was started in this browser. Open the activity again from your LMS."
)


def _launch_error_message(exc: Exception) -> str:
    text = str(exc)
    if "nonce" in text.lower() or "State not found" in text:
        return _("This launch was already used or has expired. Open the activity again from your LMS.")
    if "Roles" in text:
        return _("The LMS gave you no role in this course (learner, teaching assistant or instructor).")
    if "deployment" in text.lower():
        return _("This deployment of the tool is not registered with the portal; ask your portal operator to add it.")
    if "Registration not found" in text or "Client id" in text:
        return _("This LMS is not registered with the portal (unknown issuer or client ID).")
    return _("The launch from your LMS could not be verified. Open the activity again from your LMS.")


@csrf_exempt
@require_POST
def launch(request: HttpRequest) -> HttpResponse:
    conf = tool.ToolConf()
    state = request.POST.get("state", "")
    stored = platform_storage.launch_record(state)
    try:
        if stored is None:
            message = tool.message_launch(request, conf)
        elif platform_storage.SECRET_PARAM not in request.POST:
            # The login kept its state in the LMS's frame: a page reads it back and posts it here.
            storage = platform_storage.launch_page_context(state=state, record=stored, id_token=request.POST.get("id_token", ""))
            page = render(request, "lti/platform_storage_launch.html", {"storage": storage, "action": request.path})
            return _framable(page, platform_storage.record_registration(stored))
        else:
            platform_storage.launch_check(request, state=state)
            message = platform_storage.message_launch(request, conf, state=state)
        claims = message.get_launch_data()
    except platform_storage.StorageRefused as exc:
        logger.info("LTI launch refused (platform storage): %s", exc)
        return _error(request, _(STORAGE_REFUSED), platform_storage.record_registration(stored))
    except (LtiException, OIDCException, AssertionError) as exc:
        logger.info("LTI launch refused: %s", exc)
        return _error(request, _launch_error_message(exc), conf.registration)
    registration = conf.registration
    try:
        result = services.launch_provision(registration=registration, claims=claims)
    except services.LtiRefused as exc:
        return _error(request, str(exc), registration, status=exc.status)
    login(request, result.user, backend=BACKEND)
    if message.is_deep_link_launch():  # an instructor's: launch_provision refuses anyone else's
        context = {
            "launch_id": message.get_launch_id(),
            "course": result.course,
            "templates": deep_link_templates(course=result.course),
        }
        return _framable(render(request, "lti/deep_link.html", context), registration)
    # Signed in through platform storage: the frame keeps no session cookie, the new window will.
    handoff_user = result.user if stored is not None else None
    if result.role != Enrollment.Role.STUDENT:
        url = reverse("labs:course-detail", kwargs={"course_id": result.course.pk})
        return _land(request, url, registration, handoff_user)
    try:
        session = services.launch_template(result=result)
    except LaunchRefused as exc:
        messages.error(request, " ".join(exc.messages))
    else:
        if session is not None:
            messages.success(
                request,
                _("Launched %(template)s; it starts as soon as an NPU share is free.") % {"template": result.template.name},
            )
    return _land(request, reverse("labs:home"), registration, handoff_user)


def _land(request: HttpRequest, url: str, registration, handoff_user=None) -> HttpResponse:
    """Go to the portal page. Inside the LMS's iframe (``Sec-Fetch-Dest: iframe``) the portal's own
    pages refuse to be framed, so the frame offers them in a new window instead, with a one-time
    sign-in for ``handoff_user`` when the frame keeps no cookie (``platform_storage.handoff_create``)."""
    if request.headers.get("Sec-Fetch-Dest") == "iframe":
        context = {"url": url}
        if handoff_user is not None:
            context["handoff"] = platform_storage.handoff_create(user=handoff_user, url=url)
        return _framable(render(request, "lti/open_in_window.html", context), registration)
    return redirect(url)


@csrf_exempt  # posted from a frame that keeps no cookie; the one-time token and the Origin check protect it
@require_POST
def handoff(request: HttpRequest) -> HttpResponse:
    """The new window of a launch signed in through platform storage: sign in with the token, once."""
    found = platform_storage.handoff_take(request)
    user = get_user_model().objects.filter(pk=found[0], is_active=True).first() if found else None
    if user is None:
        return _error(request, _("This sign-in link was already used or has expired. Open the activity again from your LMS."))
    login(request, user, backend=BACKEND)
    return redirect(found[1])


@login_required
@require_POST
def deep_link_respond(request: HttpRequest) -> HttpResponse:
    conf = tool.ToolConf()
    try:
        message = tool.message_launch_from_cache(request, request.POST.get("launch_id", ""), conf)
        claims = message.get_launch_data()
    except (LtiException, AssertionError):
        return _error(request, _("The launch from your LMS could not be verified. Open the activity again from your LMS."))
    registration = conf.registration
    # The launch must be this user's, and they must still teach the course.
    if not Identity.objects.filter(user=request.user, issuer=registration.issuer, subject=claims.get("sub")).exists():
        raise PermissionDenied(_("This launch belongs to someone else."))
    context = (claims.get(services.CLAIM + "context") or {}).get("id")
    course_row = registration.contexts.filter(context_id=context).select_related("course").first()
    found = course_for_console(user=request.user, course_id=course_row.course_id) if course_row else None
    if found is None or found[1] != CourseRole.INSTRUCTOR:
        raise PermissionDenied(_("Only the course's instructors may add lab activities."))
    course = found[0]
    template_id = request.POST.get("template", "")
    template = None
    if template_id.isdecimal():  # not isdigit(): "²" is a digit int() refuses
        template = services.deep_link_choose(course=course, template_id=int(template_id), by=request.user)
    if template is None:
        return _error(request, _("Choose one of the course's lab templates."), registration)
    try:
        grade = grading.deep_link_custom(
            source=request.POST.get("score", ""), target_minutes=request.POST.get("target_minutes", "")
        )
    except ValueError as exc:
        return _error(request, str(exc), registration)
    custom = {services.TEMPLATE_PARAM: str(template.pk)}
    resource = (
        DeepLinkResource()
        .set_url(request.build_absolute_uri(reverse("lti:launch")))
        .set_title(template.name)
        .set_custom_params(custom)
    )
    if grade:
        custom.update({services.SCORE_PARAM: "1", **grade})
        maximum = grading.link_settings(custom)["score_maximum"]
        resource.set_custom_params(custom).set_lineitem(
            LineItem()
            .set_label(template.name)
            .set_score_maximum(maximum)
            .set_resource_id(f"template-{template.pk}")
            .set_tag(grading.LINEITEM_TAG)
        )
    deep_link = message.get_deep_link()
    jwt = deep_link.get_response_jwt([resource])
    return_url = claims["https://purl.imsglobal.org/spec/lti-dl/claim/deep_linking_settings"]["deep_link_return_url"]
    response = render(request, "lti/deep_link_response.html", {"return_url": return_url, "jwt": jwt})
    # The auto-submitted form goes to the LMS.
    response._csp_update = {"form-action": frame_origins(registration) + [return_url]}
    return _framable(response, registration)


@login_required
@require_POST
def roster_sync(request: HttpRequest, course_id: int) -> HttpResponse:
    found = course_for_console(user=request.user, course_id=course_id)
    if found is None:
        raise Http404(_("No such course, or you do not teach it."))
    course, role = found
    if role != CourseRole.INSTRUCTOR:
        raise PermissionDenied(_("Only the course's instructors may change this."))
    context = context_of_course(course=course)
    if context is None:
        raise Http404(_("This course is not linked to an LMS."))
    try:
        report = services.roster_sync_from_platform(context_id=context.pk, by=request.user)
    except services.LtiRefused as exc:
        messages.error(request, str(exc))
    except Exception as exc:
        logger.warning("LTI roster sync of course %s failed: %s", course.pk, services._safe_error(exc))
        messages.error(request, _("The LMS did not answer the roster request; try again later."))
    else:
        messages.success(request, sync_message(report))
        if refused := refused_message(report):
            messages.warning(request, refused)
    return redirect("labs:course-roster", course_id=course.pk)
