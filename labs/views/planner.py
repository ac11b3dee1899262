"""The term capacity planner's pages: a course's (its instructors and assistants) and the
operators'. Each shows the weeks asked for as a heatmap, offers them as CSV and answers a what-if
class; nothing is booked or changed (GET only)."""

from __future__ import annotations

from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.views.decorators.http import require_GET

from labs.forms.planner import PlanForm, WhatIfForm
from labs.models import Course
from labs.selectors.planner import (
    PlannerScope,
    WhatIfRefused,
    class_what_if,
    plan_csv,
    plan_heatmap,
    term_plan,
)
from labs.views.instructor import course_context, course_view
from labs.views.operator import operator_view


def _planner(request: HttpRequest, scope: PlannerScope, what_if_form: WhatIfForm, name: str) -> HttpResponse | dict:
    """The plan (or its CSV file) and, when the what-if form was sent, its answer."""
    plan_form = PlanForm(request.GET)
    report = None
    if plan_form.is_valid():
        report = term_plan(scope=scope, **plan_form.cleaned_data)
        if request.GET.get("format") == "csv":
            response = HttpResponse(plan_csv(report), content_type="text/csv; charset=utf-8")
            response["Content-Disposition"] = f'attachment; filename="planner-{name}-{report.first.isoformat()}.csv"'
            return response
    answer = refusal = None
    if what_if_form.is_bound and what_if_form.is_valid():
        data = dict(what_if_form.cleaned_data)
        data.pop("course", None)
        try:
            answer = class_what_if(scope=scope, course=what_if_form.cleaned_data["course"], **data)
        except WhatIfRefused as exc:
            refusal = str(exc)
    return {
        "plan_form": plan_form,
        "report": report,
        "heatmap": plan_heatmap(report) if report else None,
        "what_if_form": what_if_form,
        "answer": answer,
        "refusal": refusal,
    }


def _bound(request: HttpRequest) -> dict | None:
    return request.GET if any(key.startswith("class-") for key in request.GET) else None


@course_view()
@require_GET
def course_planner(request: HttpRequest, course: Course) -> HttpResponse:
    scope = PlannerScope(institutions=frozenset({course.institution_id}), courses=frozenset({course.pk}))
    result = _planner(request, scope, WhatIfForm(_bound(request), course=course), course.code)
    if isinstance(result, HttpResponse):
        return result
    return render(request, "labs/console/planner.html", course_context(request, course, **result))


@operator_view()
@require_GET
def ops_planner(request: HttpRequest) -> HttpResponse:
    operator = request.operator_scope
    institutions = None if operator.platform else frozenset(operator.institutions)
    courses = Course.objects.filter(archived_at__isnull=True).select_related("institution").order_by("code", "term")
    if institutions is not None:
        courses = courses.filter(institution_id__in=institutions)
    result = _planner(request, PlannerScope(institutions=institutions), WhatIfForm(_bound(request), courses=courses), "cluster")
    if isinstance(result, HttpResponse):
        return result
    return render(request, "labs/ops/planner.html", result)
