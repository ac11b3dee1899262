"""The LMS API's term capacity planner for a course: the plan (JSON or CSV) and a what-if class.

The token's institution reads its course's view: every hour's totals of the whole cluster, its own
bookings named, other institutions' never (``labs.selectors.planner``). Nothing is booked.
"""

from __future__ import annotations

from django.http import HttpResponse
from django.utils import timezone
from django.utils.translation import gettext
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiResponse, extend_schema
from rest_framework import exceptions
from rest_framework.response import Response
from rest_framework.views import APIView

from api.planner_serializers import PlanQuerySerializer, PlanSerializer, WhatIfQuerySerializer, WhatIfSerializer
from api.renderers import JSONRenderer
from api.views.common import AUTH_ERRORS, COURSE_ID, INVALID, NOT_FOUND, _course_or_404, form_errors
from api.views.usage import CSVRenderer
from labs.domain.quota import Resources
from labs.forms.planner import WhatIfForm
from labs.selectors.planner import PlannerScope, WhatIfRefused, class_what_if, plan_csv, term_plan


def _scope(course) -> PlannerScope:
    return PlannerScope(institutions=frozenset({course.institution_id}), courses=frozenset({course.pk}))


def _amounts(r: Resources) -> dict:
    return {"instances": r.instances, "core_percent": r.core_percent, "memory_mib": r.memory_mib}


class CoursePlanner(APIView):
    required_scopes = {"GET": "usage:read"}
    renderer_classes = [JSONRenderer, CSVRenderer]

    @extend_schema(
        summary="The term capacity plan, hour by hour",
        description=(
            "Every hour of `weeks` weeks from the Monday of `first`: per card type and in all, what the class bookings, "
            "the usual self-paced use (the 90th percentile of that hour over the last `history_weeks` weeks of the "
            "usage ledger) and the courses' guarantees take of the cluster, placed on the cards as the scheduler "
            "would (fragmentation counts). Other institutions' bookings count in the totals and are not named. A "
            "prediction: it books nothing. `format=csv` (or Accept: text/csv) gives the same as CSV."
        ),
        parameters=[COURSE_ID, PlanQuerySerializer],
        responses={
            (200, "application/json"): PlanSerializer,
            (200, "text/csv"): OpenApiResponse(OpenApiTypes.STR),
            **INVALID,
            **AUTH_ERRORS,
            **NOT_FOUND,
        },
    )
    def get(self, request, course_id):
        query = PlanQuerySerializer(data=request.query_params)
        query.is_valid(raise_exception=True)
        course = _course_or_404(request, course_id)
        data = dict(query.validated_data)
        data.setdefault("first", timezone.localdate())
        report = term_plan(scope=_scope(course), **data)
        if request.accepted_renderer.format == "csv":
            response = HttpResponse(plan_csv(report), content_type="text/csv; charset=utf-8")
            response["Content-Disposition"] = f'attachment; filename="planner-{course.pk}-{report.first.isoformat()}.csv"'
            return response
        hours = [
            {
                "start": h.start,
                "load_percent": h.load_percent,
                "fits": h.fits,
                "capacity": _amounts(h.capacity),
                "booked": _amounts(h.booked),
                "usual": _amounts(h.usual),
                "guaranteed": _amounts(h.guaranteed),
                "unplaced": _amounts(h.unplaced_booked + h.unplaced_usual),
                "short": _amounts(h.short),
                "yours": _amounts(report.mine(h)),
                "card_types": [
                    {
                        "chip_type": t.chip_type,
                        "capacity": _amounts(t.capacity),
                        "booked": _amounts(t.booked),
                        "usual": _amounts(t.usual),
                    }
                    for t in h.card_types
                ],
                "bookings": report.named(h),
            }
            for h in report.hours
        ]
        body = {"course": course.pk, "first": report.first, "weeks": report.weeks, "history_weeks": report.history_weeks}
        return Response(PlanSerializer({**body, "hours": hours}).data)


class CourseWhatIf(APIView):
    required_scopes = {"GET": "usage:read"}

    @extend_schema(
        summary="Would a new class fit?",
        description=(
            "A new class of `count` labs of `template` on `weekday` from `start` to `end`, every week from `first` to "
            "`last`, placed hour by hour beside the bookings, the usual use and the guarantees: `fits`, "
            "`fits_with_borrowing` (beyond the course's guarantee, inside what its quota's cohort and borrowing limit "
            "allow then) or `does_not_fit`, with the other bookings in each hour. Nothing is booked."
        ),
        parameters=[COURSE_ID, WhatIfQuerySerializer],
        responses={200: WhatIfSerializer, **INVALID, **AUTH_ERRORS, **NOT_FOUND},
    )
    def get(self, request, course_id):
        query = WhatIfQuerySerializer(data=request.query_params)
        query.is_valid(raise_exception=True)
        course = _course_or_404(request, course_id)
        form = WhatIfForm(query.validated_data, course=course, prefix="")
        if not form.is_valid():
            raise form_errors(form)
        data = {k: v for k, v in form.cleaned_data.items() if k != "course"}
        try:
            report = class_what_if(scope=_scope(course), course=course, **data)
        except WhatIfRefused as exc:
            raise exceptions.ValidationError({"non_field_errors": [str(exc)]}) from exc
        hours = [
            {
                "start": h.start,
                "verdict": h.verdict.value,
                "placed": h.placed,
                "reason_code": h.reason.code if h.reason else "",
                "reason": h.reason.render(gettext) if h.reason else "",
                "collisions": [report.bookings[k].text() for k in h.collisions],
            }
            for h in report.hours
        ]
        body = {"course": course.pk, "verdict": report.verdict.value, "slots": report.slots, "hours": hours}
        return Response(WhatIfSerializer(body).data)
