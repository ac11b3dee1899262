"""The course model endpoint's pages: the student's (the URL, their key, a curl example) and the
instructor's (the endpoint's settings and tokens per student). Thin: one selector or service each."""

from __future__ import annotations

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied, ValidationError
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.utils.translation import gettext as _
from django.views.decorators.http import require_http_methods

from labs.forms import EndpointForm
from labs.selectors.console import CourseRole
from labs.selectors.gateway import GATEWAY_PREFIX, course_token_usage, endpoint_of_student
from labs.services.gateway import endpoint_key_issue, endpoint_key_revoke, endpoint_set
from labs.views.instructor import archived_guard, course_context, course_view


def _base_url(request: HttpRequest, endpoint_id: int) -> str:
    return request.build_absolute_uri(f"{GATEWAY_PREFIX}{endpoint_id}/v1")


@login_required
@require_http_methods(["GET", "POST"])
def student_endpoint(request: HttpRequest, course_id: int) -> HttpResponse:
    """GET: the endpoint, whether the student has a key. POST ``action=new``: a new key, shown on
    this response only; ``action=revoke``: no key."""
    found = endpoint_of_student(user=request.user, course_id=course_id)
    if found is None:
        raise Http404(_("This course has no model endpoint, or you are not in it."))
    new_key = ""
    if request.method == "POST":
        action = request.POST.get("action")
        if action == "new":
            new_key = endpoint_key_issue(enrollment=found.enrollment)
            found = endpoint_of_student(user=request.user, course_id=course_id)
        elif action == "revoke":
            endpoint_key_revoke(enrollment=found.enrollment)
            messages.success(request, _("Your key is revoked: it no longer works."))
            return redirect("labs:student-endpoint", course_id)
        else:
            messages.error(request, _("Unknown action."))
            return redirect("labs:student-endpoint", course_id)
    response = render(
        request,
        "labs/endpoint.html",
        {
            "found": found,
            "course": found.enrollment.course,
            "base_url": _base_url(request, found.endpoint.pk),
            "new_key": new_key,
        },
    )
    response["Cache-Control"] = "no-store"  # the page with a new key must not be kept by a cache
    return response


@course_view()
@require_http_methods(["GET", "POST"])
def course_endpoint(request: HttpRequest, course) -> HttpResponse:
    """The endpoint's settings (instructors change them; assistants see them) and tokens per student."""
    endpoint = getattr(course, "endpoint", None)
    form = EndpointForm(request.POST or None, instance=endpoint, course=course)
    if request.method == "POST":
        if request.course_role != CourseRole.INSTRUCTOR:
            raise PermissionDenied(_("Only the course's instructors may change this."))
        if (guard := archived_guard(request, course)) is not None:
            return guard
        if form.is_valid():
            try:
                endpoint_set(course=course, values=form.cleaned_data, by=request.user)
            except ValidationError as error:
                form.add_error(None, error)
            else:
                messages.success(request, _("Model endpoint saved."))
                return redirect("labs:course-endpoint", course.pk)
    return render(
        request,
        "labs/console/endpoint.html",
        course_context(
            request,
            course,
            endpoint=endpoint,
            form=form,
            base_url=_base_url(request, endpoint.pk) if endpoint else "",
            tokens=course_token_usage(course_id=course.pk) if endpoint else [],
        ),
    )
