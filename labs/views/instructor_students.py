"""The instructor console's pages about a course's students: the roster (one by one or from a
CSV file), their usage and budgets, and the class slots booked for them.

As in ``labs.views.instructor``: the course through ``course_view``, instructors manage,
assistants see.
"""

from __future__ import annotations

from dataclasses import asdict

from django.conf import settings
from django.contrib import messages
from django.core.exceptions import PermissionDenied
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.utils import timezone
from django.utils.translation import gettext as _
from django.utils.translation import ngettext
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_GET, require_http_methods, require_POST

from labs.forms import BudgetGrantForm, ReservationForm, RoleForm, RosterAddForm, RosterImportForm
from labs.models import Enrollment
from labs.selectors.console import CourseRole, course_usage, course_usage_csv, roster_of
from labs.selectors.invitations import invitations_csv, roster_invitations
from labs.selectors.reservations import course_reservations, reservation_of
from labs.selectors.usage import student_budgets, usage_chart
from labs.services import budgets, reservations, roster
from labs.views.instructor import archived_guard, course_context, course_view, may_change, saved_next
from labs.views.tables import Column, sorted_table

# --- roster ---------------------------------------------------------------------------------------


@course_view()
@require_http_methods(["GET", "POST"])
def course_roster(request: HttpRequest, course) -> HttpResponse:
    add_form = RosterAddForm()
    if request.method == "POST":
        if (guard := may_change(request, course)) is not None:
            return guard
        action = request.POST.get("action")
        try:
            if action == "add":
                add_form = RosterAddForm(request.POST)
                if add_form.is_valid():
                    enrollment = roster.roster_add(course=course, by=request.user, **add_form.cleaned_data)
                    saved_next(
                        request,
                        course,
                        _("Added %(name)s as %(role)s.")
                        % {"name": enrollment.user.get_username(), "role": enrollment.get_role_display()},
                    )
                    return redirect("labs:course-roster", course.pk)
            elif action in ("remove", "role"):
                user_id = int(request.POST.get("user", "0") or 0)
                if action == "remove":
                    roster.roster_remove(course=course, user_id=user_id, by=request.user)
                    messages.success(request, _("Removed from the course."))
                else:
                    role_form = RoleForm(request.POST)
                    if not role_form.is_valid():
                        raise roster.RosterError(_("Choose student, assistant or instructor."))
                    roster.roster_set_role(course=course, user_id=user_id, role=role_form.cleaned_data["role"], by=request.user)
                    messages.success(request, _("Role changed."))
                return redirect("labs:course-roster", course.pk)
            else:
                messages.error(request, _("Unknown action."))
        except (roster.RosterError, ValueError) as exc:
            messages.error(request, str(exc) if isinstance(exc, roster.RosterError) else _("Unknown member."))
    query = request.GET.get("q", "").strip()
    members = roster_of(course=course)
    if query:
        needle = query.lower()
        members = [
            e
            for e in members
            if needle in e.user.get_username().lower()
            or needle in (e.user.email or "").lower()
            or needle in e.user.get_full_name().lower()
        ]
    return render(
        request,
        "labs/console/roster.html",
        course_context(request, course, members=members, add_form=add_form, import_form=RosterImportForm(), query=query),
    )


@course_view(manage=True)
@require_POST
def roster_import(request: HttpRequest, course) -> HttpResponse:
    """Step 1 uploads and previews (nothing written); step 2 confirms the same text and writes it."""
    if (guard := archived_guard(request, course)) is not None:
        return guard
    if request.POST.get("step") == "confirm":
        plan = roster.roster_apply(course=course, text=request.POST.get("csv", ""), by=request.user)
        if plan.error:
            messages.error(request, plan.error)
            return redirect("labs:course-roster", course.pk)
        # Ids and counts only: the invitation links are made afresh on the result page, never kept.
        request.session[_import_key(course)] = {
            "counts": asdict(plan.counts),
            "created": [row.user_id for row in plan.rows if row.action == roster.Action.CREATE],
            "sign_in": plan.sign_in.value,
            "lms": plan.lms,
        }
        return redirect("labs:roster-import-done", course.pk)
    form = RosterImportForm(request.POST, request.FILES)
    if not form.is_valid():
        for error in form.errors.get("file", []):
            messages.error(request, error)
        return redirect("labs:course-roster", course.pk)
    text = form.cleaned_data["file"]
    plan = roster.roster_plan(course=course, text=text)
    return render(
        request,
        "labs/console/roster_preview.html",
        course_context(request, course, plan=plan, counts=plan.counts, csv_text=text, invitation_days=_invitation_days()),
    )


def _import_key(course) -> str:
    return f"roster-import-{course.pk}"


def _invitation_days() -> int:
    return max(1, settings.PASSWORD_RESET_TIMEOUT // 86400)


@course_view(manage=True)
@require_GET
@never_cache
def roster_import_done(request: HttpRequest, course) -> HttpResponse:
    """What the last import of this course by this instructor did, and the new accounts' way in:
    their LMS, or an invitation link each (on the page with a copy button, and as a CSV file)."""
    result = request.session.get(_import_key(course))
    if result is None:
        return redirect("labs:course-roster", course.pk)
    counts = roster.RosterCounts(**result["counts"])
    by_lms = result["sign_in"] == roster.SignIn.LMS
    invitations = [] if by_lms else roster_invitations(course=course, user_ids=result["created"])
    if request.GET.get("format") == "csv":
        response = HttpResponse(invitations_csv(invitations, request.build_absolute_uri), content_type="text/csv; charset=utf-8")
        response["Content-Disposition"] = f'attachment; filename="invitations-{course.code}.csv"'
        return response
    return render(
        request,
        "labs/console/roster_import_done.html",
        course_context(
            request,
            course,
            counts=counts,
            by_lms=by_lms,
            lms=result["lms"],
            invitations=[(i, request.build_absolute_uri(i.path)) for i in invitations],
            invitation_days=_invitation_days(),
        ),
    )


# --- usage ---------------------------------------------------------------------------------------


@course_view()
@require_http_methods(["GET", "POST"])
def course_usage_view(request: HttpRequest, course) -> HttpResponse:
    if request.method == "POST":
        return _budget_grant(request, course)
    usage = course_usage(course=course)
    if request.GET.get("format") == "csv":
        response = HttpResponse(course_usage_csv(usage), content_type="text/csv; charset=utf-8")
        stamp = timezone.localdate().isoformat()
        response["Content-Disposition"] = f'attachment; filename="usage-{course.code}-{stamp}.csv"'
        return response
    chart = usage_chart(usage.days, usage.core_hours_by_day, usage.gib_hours_by_day)
    quota = getattr(course, "quota", None)
    budgeted = quota is not None and (quota.budget_core_percent_hours is not None or quota.budget_gib_hours is not None)
    budget_of = {}
    if budgeted:
        ids = dict(
            Enrollment.objects.filter(course=course, role=Enrollment.Role.STUDENT).values_list("user__username", "user_id")
        )
        found = student_budgets(pairs=[(course.pk, i) for i in ids.values()])
        budget_of = {name: found.get((course.pk, i)) for name, i in ids.items()}
    for u in usage.students:
        u.budget = budget_of.get(u.username)
    table = sorted_table(request, usage.students, _usage_columns(budgeted), default="student")
    return render(
        request,
        "labs/console/usage.html",
        course_context(
            request, course, usage=usage, table=table, chart=chart, budgeted=budgeted, grant_form=BudgetGrantForm()
        ),
    )


def _usage_columns(budgeted: bool) -> list[Column]:
    columns = [
        Column("student", _("Student"), lambda u: u.username.casefold()),
        Column("sessions_week", _("Sessions"), lambda u: u.sessions_week),
        Column("core_week", _("AI-Core-% × h"), lambda u: u.core_hours_week),
        Column("gib_week", _("GiB × h"), lambda u: u.gib_hours_week),
        Column("sessions_term", _("Sessions"), lambda u: u.sessions_term),
        Column("core_term", _("AI-Core-% × h"), lambda u: u.core_hours_term),
        Column("gib_term", _("GiB × h"), lambda u: u.gib_hours_term),
    ]
    if budgeted:
        columns.append(Column("budget", _("Budget used this week"), lambda u: u.budget.fraction if u.budget else -1.0))
    return columns


def _budget_grant(request: HttpRequest, course) -> HttpResponse:
    if request.course_role != CourseRole.INSTRUCTOR:
        raise PermissionDenied(_("Only the course's instructors may change this."))
    form = BudgetGrantForm(request.POST)
    student = None
    if form.is_valid():
        student = (
            Enrollment.objects.filter(course=course, role=Enrollment.Role.STUDENT, user__username=form.cleaned_data["username"])
            .select_related("user")
            .first()
        )
        if student is None:
            form.add_error(
                "username", _("No student of this course is called %(name)s.") % {"name": form.cleaned_data["username"]}
            )
    if not form.is_valid():
        for errors in form.errors.values():
            for error in errors:
                messages.error(request, error)
        return redirect("labs:course-usage", course.pk)
    budgets.budget_grant(
        course=course,
        student=student.user,
        core_percent_hours=form.cleaned_data["core_percent_hours"] or 0,
        gib_hours=form.cleaned_data["gib_hours"] or 0,
        by=request.user,
    )
    messages.success(request, _("Granted %(name)s more budget for this week.") % {"name": student.user.get_username()})
    return redirect("labs:course-usage", course.pk)


# --- class reservations --------------------------------------------------------------------------


@course_view()
@require_http_methods(["GET", "POST"])
def course_reservations_view(request: HttpRequest, course) -> HttpResponse:
    """Upcoming class slots with their pre-started and claimed sessions, and the booking form
    (instructors book; assistants read). A booking the cluster cannot hold is refused with the
    reason on the form; nothing is written."""
    form = ReservationForm(request.POST or None, course=course, initial={"last_date": course.ends_on})
    if request.method == "POST":
        if (guard := may_change(request, course)) is not None:
            return guard
        if form.is_valid():
            try:
                booked = reservations.reservation_book(
                    course=course,
                    template=form.cleaned_data["template"],
                    count=form.cleaned_data["count"],
                    slots=form.cleaned_data["slots"],
                    rule=form.cleaned_data["rule"],
                    by=request.user,
                )
            except reservations.ReservationRefused as refused:
                form.add_error(None, refused.messages[0])
            else:
                slots = form.cleaned_data["slots"]
                messages.success(
                    request,
                    ngettext(
                        "Booked %(count)s sessions of %(template)s for %(n)s class; first meeting: %(first)s.",
                        "Booked %(count)s sessions of %(template)s for %(n)s classes; first meeting: %(first)s.",
                        len(slots),
                    )
                    % {
                        "count": booked.count,
                        "template": booked.template.name,
                        "n": len(slots),
                        "first": reservations.slot_label(*slots[0]),
                    },
                )
                return redirect("labs:course-reservations", course.pk)
    found = course_reservations(course=course)
    return render(
        request,
        "labs/console/reservations.html",
        course_context(request, course, form=form, reservations=found.reservations, slots=found.slots),
    )


@course_view(manage=True)
@require_http_methods(["GET", "POST"])
def reservation_cancel(request: HttpRequest, course, reservation_id: int) -> HttpResponse:
    reservation = reservation_of(course=course, reservation_id=reservation_id)
    if reservation is None or reservation.cancelled_at is not None:
        raise Http404(_("No such reservation in this course."))
    if request.method == "POST":
        if request.POST.get("confirm") != "yes":
            messages.error(request, _("Tick the box to confirm."))
        else:
            gone = reservations.reservation_cancel(reservation=reservation, by=request.user)
            messages.success(
                request,
                ngettext(
                    "Reservation cancelled: %(n)s class to come was removed.",
                    "Reservation cancelled: %(n)s classes to come were removed.",
                    gone,
                )
                % {"n": gone},
            )
            return redirect("labs:course-reservations", course.pk)
    return render(request, "labs/console/reservation_cancel.html", course_context(request, course, reservation=reservation))
