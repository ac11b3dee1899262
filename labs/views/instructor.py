"""The instructor console: HTML views for courses, quota, templates and live sessions (the pages
about a course's students, its roster, usage and reservations, are ``instructor_students``).

Every view finds the course through ``course_for_console`` (the user's role in it, or 404) and
checks the role before changing anything: instructors manage; assistants see everything and
may stop sessions. Validation is the forms'; writing is the services'.
"""

from __future__ import annotations

from functools import wraps

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied
from django.db.models import Q
from django.http import Http404, HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import redirect, render
from django.urls import reverse
from django.utils.html import format_html
from django.utils.translation import gettext as _
from django.utils.translation import gettext_lazy, ngettext
from django.views.decorators.http import require_GET, require_http_methods

from labs.domain.reasons import Reason
from labs.domain.states import TERMINAL
from labs.forms import (
    CourseForm,
    PreviewForm,
    QuotaForm,
    TemplateForm,
    filter_text,
)
from labs.models import Enrollment, LabSession
from labs.selectors.console import (
    CourseRole,
    cluster_facts,
    course_for_console,
    courses_taught,
    guarantees_held,
    institution_allotment,
    institutions_for_new_courses,
)
from labs.selectors.courses import course_quota_use, course_readiness
from labs.selectors.sessions import session_event_payloads
from labs.services import catalog, courses
from labs.services.sessions import session_stop


def course_view(*, manage: bool = False):
    """Find the course (404 when the user has no role in it); ``manage`` views need an instructor (403)."""

    def decorate(view):
        @login_required
        @wraps(view)
        def wrapper(request: HttpRequest, course_id: int, *args, **kwargs):
            found = course_for_console(user=request.user, course_id=course_id)
            if found is None:
                raise Http404(_("No such course, or you do not teach it."))
            course, role = found
            if manage and role != CourseRole.INSTRUCTOR:
                raise PermissionDenied(_("Only the course's instructors may change this."))
            request.course_role = role
            return view(request, course, *args, **kwargs)

        return wrapper

    return decorate


def course_context(request: HttpRequest, course, **extra) -> dict:
    """What every page of a course shows: the course, the user's role in it and whether they manage it."""
    return {"course": course, "role": request.course_role, "can_manage": request.course_role == CourseRole.INSTRUCTOR, **extra}


def archived_guard(request: HttpRequest, course) -> HttpResponse | None:
    """Before a change: back to the course with a notice when it is archived, else None."""
    if course.archived:
        messages.error(request, _("This course is archived; unarchive it to change it."))
        return redirect("labs:course-detail", course.pk)
    return None


def may_change(request: HttpRequest, course) -> HttpResponse | None:
    """Before a change on a page assistants may read: 403 unless an instructor; back to the
    course with a notice when it is archived."""
    if request.course_role != CourseRole.INSTRUCTOR:
        raise PermissionDenied(_("Only the course's instructors may change this."))
    return archived_guard(request, course)


# --- guided setup: course, quota, templates, roster ------------------------------------------------

# Each step ``course_readiness`` checks: the page that does it, the "Next:" words after the step
# before, and the checklist's line while it is not done.
SETUP_STEPS = {
    "quota": (
        "labs:course-quota",
        gettext_lazy("Next: set the quota"),
        gettext_lazy("Set the quota: without one, no launch is accepted."),
    ),
    "templates": ("labs:course-templates", gettext_lazy("Next: offer templates"), gettext_lazy("Offer at least one template.")),
    "students": ("labs:course-roster", gettext_lazy("Next: enrol students"), gettext_lazy("Enrol at least one student.")),
    "open": (
        "labs:course-archive",
        gettext_lazy("Next: unarchive the course"),
        gettext_lazy("Unarchive the course: an archived course takes no launch."),
    ),
}


def setup_checklist(course, readiness) -> list[tuple[str, str, str]]:
    """The steps ``readiness`` says the course lacks, as (step, checklist line, URL of its page)."""
    return [(step, str(SETUP_STEPS[step][2]), reverse(SETUP_STEPS[step][0], args=[course.pk])) for step in readiness.missing]


def saved_next(request: HttpRequest, course, done: str) -> None:
    """A success message: ``done``, then the next step the course lacks, linked, or that it is ready."""
    missing = course_readiness(course=course).missing
    if not missing:
        url, words = reverse("labs:course-detail", args=[course.pk]), _("Ready: students can launch")
    else:
        url, words = reverse(SETUP_STEPS[missing[0]][0], args=[course.pk]), str(SETUP_STEPS[missing[0]][1])
    messages.success(request, format_html('{} <a href="{}" data-testid="next-step">{}</a>', done, url, words))


# --- home and courses ----------------------------------------------------------------------------


@login_required
@require_GET
def console_home(request: HttpRequest) -> HttpResponse:
    show_archived = request.GET.get("archived") == "1"
    taught = courses_taught(user=request.user, include_archived=show_archived)
    return render(
        request,
        "labs/console/home.html",
        {
            "taught": taught,
            "show_archived": show_archived,
            "can_create": bool(institutions_for_new_courses(user=request.user)),
            "student_courses": Enrollment.objects.filter(user=request.user, role=Enrollment.Role.STUDENT).exists(),
        },
    )


@login_required
@require_GET
def course_use(request: HttpRequest, course_id: int) -> HttpResponse:
    """Live use against guarantee of one course, for the console's pages to refresh after an update."""
    found = course_for_console(user=request.user, course_id=course_id)
    if found is None:
        raise Http404(_("No such course, or you do not teach it."))
    use = course_quota_use(course=found[0])
    return JsonResponse({"instances": use.instances, "core_percent": use.core_percent, "memory_mib": use.memory_mib})


@login_required
@require_http_methods(["GET", "POST"])
def course_new(request: HttpRequest) -> HttpResponse:
    institutions = institutions_for_new_courses(user=request.user)
    if not institutions:
        raise PermissionDenied(_("You may not create courses; ask your institution's operator."))
    chosen = institutions[0]
    if len(institutions) > 1:
        wanted = request.POST.get("institution") or request.GET.get("institution")
        chosen = next((i for i in institutions if str(i.pk) == wanted), institutions[0])
    form = CourseForm(request.POST or None, institution=chosen)
    if request.method == "POST" and form.is_valid():
        course = courses.course_create(by=request.user, institution=chosen, **form.cleaned_data)
        messages.success(request, _("Created %(course)s. Next: set its quota.") % {"course": course.code})
        return redirect("labs:course-quota", course.pk)
    return render(
        request,
        "labs/console/course_form.html",
        {"form": form, "institutions": institutions, "institution": chosen, "course": None},
    )


@course_view(manage=True)
@require_http_methods(["GET", "POST"])
def course_edit(request: HttpRequest, course) -> HttpResponse:
    if (guard := archived_guard(request, course)) is not None:
        return guard
    form = CourseForm(request.POST or None, instance=course)
    if request.method == "POST" and form.is_valid():
        courses.course_update(course=course, by=request.user, **form.cleaned_data)
        messages.success(request, _("Saved."))
        return redirect("labs:course-detail", course.pk)
    return render(request, "labs/console/course_form.html", course_context(request, course, form=form))


@course_view(manage=True)
@require_http_methods(["GET", "POST"])
def course_archive(request: HttpRequest, course) -> HttpResponse:
    open_sessions = LabSession.objects.filter(course=course).exclude(state__in=TERMINAL).count()
    if request.method == "POST":
        if request.POST.get("action") == "unarchive":
            courses.course_unarchive(course=course, by=request.user)
            messages.success(request, _("%(course)s is open again.") % {"course": course.code})
            return redirect("labs:course-detail", course.pk)
        if request.POST.get("confirm") != "yes":
            messages.error(request, _("Tick the box to confirm."))
        else:
            stopped = courses.course_archive(course=course, by=request.user)
            messages.success(
                request,
                ngettext(
                    "%(course)s is archived; %(n)s open session was stopped with a notice.",
                    "%(course)s is archived; %(n)s open sessions were stopped with a notice.",
                    stopped,
                )
                % {"course": course.code, "n": stopped},
            )
            return redirect("labs:course-detail", course.pk)
    return render(request, "labs/console/course_archive.html", course_context(request, course, open_sessions=open_sessions))


# --- quota -----------------------------------------------------------------------------------------


@course_view(manage=True)
@require_http_methods(["GET", "POST"])
def course_quota(request: HttpRequest, course) -> HttpResponse:
    if (guard := archived_guard(request, course)) is not None:
        return guard
    quota = getattr(course, "quota", None)
    facts = cluster_facts()
    allotment = institution_allotment(institution=course.institution, excluding=course)
    held = guarantees_held(institution=course.institution, excluding=course)
    overcommit = course.institution.allow_overcommit
    scenarios = set(course.templates.values_list("scenario", flat=True))
    form = QuotaForm(
        request.POST or None,
        initial=QuotaForm.initial_from(quota),
        facts=facts,
        allotment=allotment,
        held=held,
        overcommit=overcommit,
        scenarios=scenarios,
        institution_id=course.institution_id,
    )
    room = courses.guarantee_room(facts=facts, held=held, scenarios=scenarios)
    use = course_quota_use(course=course)
    if request.method == "POST" and form.is_valid():
        change = courses.quota_set(course=course, values=form.cleaned_data, in_use=use, by=request.user)
        saved_next(request, course, _("Quota saved."))
        if room.past(change.quota):
            messages.warning(
                request,
                _(
                    "The guarantee is more than the cluster holds beside the other courses' guarantees: "
                    "it is a priority, not a guarantee."
                ),
            )
        if change.below_use:
            messages.warning(
                request,
                _(
                    "The new guarantee is below what the course uses now. Nothing running is stopped: "
                    "the new value applies to the next launches."
                ),
            )
        return redirect("labs:course-detail", course.pk)
    return render(
        request,
        "labs/console/quota.html",
        course_context(
            request,
            course,
            form=form,
            facts=facts,
            allotment=allotment,
            use=use,
            held=held,
            room=room,
            overcommit=overcommit,
            priority=quota is not None and room.past(quota),
        ),
    )


# --- templates ------------------------------------------------------------------------------------


@course_view()
@require_http_methods(["GET", "POST"])
def course_templates(request: HttpRequest, course) -> HttpResponse:
    facts = cluster_facts()
    form = TemplateForm(None, institution=course.institution, facts=facts)
    if request.method == "POST":
        if (guard := may_change(request, course)) is not None:
            return guard
        action = request.POST.get("action")
        if action == "create":
            form = TemplateForm(request.POST, institution=course.institution, facts=facts)
            if form.is_valid():
                template = catalog.template_create(course=course, by=request.user, **form.template_fields())
                saved_next(request, course, _("Created %(template)s.") % {"template": template.name})
                return redirect("labs:course-templates", course.pk)
        elif action in ("attach", "detach"):
            try:
                template_id = int(request.POST.get("template", ""))
            except ValueError:
                template_id = 0
            change = catalog.template_attach if action == "attach" else catalog.template_detach
            template = change(course=course, template_id=template_id, by=request.user)
            if template is None:
                messages.error(request, _("That template is not available here."))
            elif action == "attach":
                saved_next(request, course, _("%(template)s is offered in the course now.") % {"template": template.name})
            else:
                messages.success(
                    request,
                    _("%(template)s is no longer offered; sessions already running it go on.") % {"template": template.name},
                )
            return redirect("labs:course-templates", course.pk)
        elif action == "smaller-offer":
            try:
                template_id = int(request.POST.get("template", ""))
            except ValueError:
                template_id = 0
            on = request.POST.get("on") == "1"
            template = catalog.template_smaller_offer_set(course=course, template_id=template_id, on=on, by=request.user)
            if template is None:
                messages.error(request, _("Only this course's own templates are changed here; the operators set the others."))
            else:
                said = (
                    _("%(template)s: a smaller lab is offered while it waits.")
                    if on
                    else _("%(template)s: no smaller lab is offered while it waits.")
                )
                messages.success(request, said % {"template": template.name})
            return redirect("labs:course-templates", course.pk)
        else:
            messages.error(request, _("Unknown action."))
    return render(
        request,
        "labs/console/templates.html",
        course_context(
            request,
            course,
            form=form,
            offered=course.templates.order_by("core_percent", "name"),
            attachable=catalog.templates_attachable(course=course),
            facts=facts,
        ),
    )


@course_view()
@require_GET
def template_preview(request: HttpRequest, course) -> HttpResponse:
    form = PreviewForm(request.GET, institution=course.institution)
    if not form.is_valid():
        return JsonResponse({"errors": {k: [str(m) for m in v] for k, v in form.errors.items()}}, status=400)
    preview = catalog.fit_preview(course=course, **form.share_fields())
    return JsonResponse(
        {
            "cluster": preview.cluster,
            "cluster_empty": preview.cluster_empty,
            "quota": preview.quota,
            "quota_total": preview.quota_total,
            "capped": preview.capped,
        }
    )


# --- live sessions ---------------------------------------------------------------------------------


@course_view()
@require_http_methods(["GET", "POST"])
def sessions_stop_all(request: HttpRequest, course) -> HttpResponse:
    """Stop every open session of the course, after a confirmation page (instructors and assistants)."""
    open_ids = list(LabSession.objects.filter(course=course).exclude(state__in=TERMINAL).values_list("pk", flat=True))
    if request.method == "POST":
        if request.POST.get("confirm") != "yes":
            messages.error(request, _("Tick the box to confirm."))
        else:
            reason = Reason.of("session.stopped_by", who=request.user.get_username())
            stopped = sum(bool(session_stop(session_id=pk, reason=reason)) for pk in open_ids)
            messages.success(request, ngettext("Stopping %(n)s session.", "Stopping %(n)s sessions.", stopped) % {"n": stopped})
            return redirect("labs:course-detail", course.pk)
    return render(request, "labs/console/stop_all.html", course_context(request, course, open_count=len(open_ids)))


def sessions_filtered(course, params) -> tuple[list[LabSession], dict]:
    """The course's open sessions (or the last 200 ended ones with ``state=ended``), filtered by
    state, template and student."""
    # The course (with its quota) is the page's: not joined again for every row.
    qs = LabSession.objects.filter(course=course).select_related("student", "template", "allocation__card__node")
    state = params.get("state", "")
    template = params.get("template", "")
    if template.isdecimal():  # not isdigit(): "²" is a digit int() refuses
        qs = qs.filter(template_id=int(template))
    student = filter_text(params, "student")
    if student:
        qs = qs.filter(Q(student__username__icontains=student) | Q(student__email__icontains=student))
    if state == "ended":
        qs = qs.filter(state__in=TERMINAL).order_by("-ended_at")[:200]
    else:
        qs = qs.exclude(state__in=TERMINAL)
        if state in LabSession.State.values:
            qs = qs.filter(state=state)
        qs = qs.order_by("created_at")
    sessions = list(qs)
    for session in sessions:
        LabSession.course.field.set_cached_value(session, course)
    return sessions, {"state": state, "template": template, "student": student}


@course_view()
@require_GET
def course_detail(request: HttpRequest, course) -> HttpResponse:
    sessions, filters = sessions_filtered(course, request.GET)
    for session, payload in zip(sessions, session_event_payloads(sessions, for_owner=False), strict=True):
        session.card = payload  # the row's timed lines (queue place, started, time left) come from it
    counts = course.enrollments.values_list("role", flat=True)
    readiness = course_readiness(course=course)
    return render(
        request,
        "labs/console/course.html",
        course_context(
            request,
            course,
            quota=getattr(course, "quota", None),
            use=course_quota_use(course=course),
            sessions=sessions,
            filters=filters,
            states=[(v, label) for v, label in LabSession.State.choices if v not in TERMINAL],
            templates=course.templates.order_by("name"),
            students=sum(1 for r in counts if r == Enrollment.Role.STUDENT),
            staff=sum(1 for r in counts if r != Enrollment.Role.STUDENT),
            checklist=setup_checklist(course, readiness),
            readiness=readiness,
        ),
    )
