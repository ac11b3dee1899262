"""The term capacity planner's forms: which weeks to plan, and a what-if class. Ranges come from
``labs.domain.planner``, as the API's serializers take them."""

from __future__ import annotations

from datetime import date, timedelta

from django import forms
from django.utils import timezone
from django.utils.translation import gettext, gettext_lazy

from labs.domain.planner import DEFAULT_HISTORY_WEEKS, MAX_CLASS_SIZE, MAX_HISTORY_WEEKS, MAX_WEEKS
from labs.forms.students import WEEKDAYS
from labs.models import Course, LabTemplate

# How far from today a plan may start: a year back (to compare with what was), two years ahead.
DAYS_BACK = 366
DAYS_AHEAD = 2 * 366


def plan_date_error(day: date) -> str | None:
    """Why ``day`` cannot start (or end) a plan, in the reader's language; ``None`` when it can."""
    today = timezone.localdate()
    if not today - timedelta(days=DAYS_BACK) <= day <= today + timedelta(days=DAYS_AHEAD):
        return gettext("Choose a date from a year ago to two years ahead.")
    return None


_DATE = forms.DateInput(attrs={"type": "date"}, format="%Y-%m-%d")
_TIME = forms.TimeInput(attrs={"type": "time"}, format="%H:%M")


class PlanForm(forms.Form):
    """The weeks to plan: from the week of ``first``, ``weeks`` weeks, learning the usual use from
    the last ``history_weeks`` weeks of the ledger. Empty fields take their defaults."""

    first = forms.DateField(label=gettext_lazy("From the week of"), required=False, widget=_DATE)
    weeks = forms.IntegerField(label=gettext_lazy("Weeks"), min_value=1, max_value=MAX_WEEKS, required=False)
    history_weeks = forms.IntegerField(
        label=gettext_lazy("Past weeks to learn from"),
        min_value=1,
        max_value=MAX_HISTORY_WEEKS,
        required=False,
        help_text=gettext_lazy("The usual self-paced use of each hour is its 90th percentile over these weeks."),
    )

    def clean_first(self) -> date | None:
        first = self.cleaned_data.get("first")
        if first is not None and (error := plan_date_error(first)):
            raise forms.ValidationError(error)
        return first

    def clean(self) -> dict:
        data = super().clean()
        if not self.errors:
            data["first"] = data.get("first") or timezone.localdate()
            data["weeks"] = data.get("weeks") or 1
            data["history_weeks"] = data.get("history_weeks") or DEFAULT_HISTORY_WEEKS
        return data


class WhatIfForm(forms.Form):
    """A new class to try: ``count`` labs of a template, weekly on one weekday from a start to an
    end time, between two dates. With ``courses`` (the operator's page) the course is chosen too;
    the template must be offered in it."""

    course = forms.ModelChoiceField(label=gettext_lazy("Course"), queryset=Course.objects.none(), empty_label=None)
    template = forms.ModelChoiceField(label=gettext_lazy("Template"), queryset=LabTemplate.objects.none(), empty_label=None)
    count = forms.IntegerField(label=gettext_lazy("Students"), min_value=1, max_value=MAX_CLASS_SIZE)
    weekday = forms.TypedChoiceField(label=gettext_lazy("Weekday"), choices=WEEKDAYS, coerce=int)
    start = forms.TimeField(label=gettext_lazy("Starts at"), widget=_TIME)
    end = forms.TimeField(label=gettext_lazy("Ends at"), widget=_TIME)
    first = forms.DateField(label=gettext_lazy("From"), widget=_DATE)
    last = forms.DateField(label=gettext_lazy("Until"), widget=_DATE)

    def __init__(self, *args, courses=None, course: Course | None = None, **kwargs) -> None:
        kwargs.setdefault("prefix", "class")
        super().__init__(*args, **kwargs)
        if course is not None:
            del self.fields["course"]
            self.fields["template"].queryset = course.templates.order_by("name")
            self.course = course
        else:
            self.fields["course"].queryset = courses if courses is not None else Course.objects.none()
            self.fields["template"].queryset = LabTemplate.objects.filter(courses__in=self.fields["course"].queryset).distinct()
            self.course = None

    def clean(self) -> dict:
        data = super().clean()
        course = data.get("course") or self.course
        template = data.get("template")
        if course is not None and template is not None and not course.templates.filter(pk=template.pk).exists():
            words = {"template": template.name, "course": course.code}
            self.add_error("template", gettext("%(template)s is not offered in %(course)s.") % words)
        start, end = data.get("start"), data.get("end")
        if start is not None and end is not None and end <= start:
            self.add_error("end", gettext("A class must end after it starts."))
        first, last = data.get("first"), data.get("last")
        for name, day in (("first", first), ("last", last)):
            if day is not None and (error := plan_date_error(day)):
                self.add_error(name, error)
        if first is not None and last is not None and not self.errors:
            if last < first:
                self.add_error("last", gettext("The last date is before the first."))
            elif last - first > timedelta(weeks=MAX_WEEKS):
                self.add_error("last", gettext("Plan at most %(weeks)s weeks at a time.") % {"weeks": MAX_WEEKS})
        data["course"] = course
        return data
