"""Forms of a course's students: the roster (one by one, or a CSV file), roles, weekly budget
grants and class reservations."""

from __future__ import annotations

import re

from django import forms
from django.core.validators import MaxValueValidator, MinValueValidator
from django.utils import timezone
from django.utils.translation import gettext as _
from django.utils.translation import gettext_lazy

from labs.domain.quota_spec import (
    MAX_BUDGET,
)
from labs.models import Course, Enrollment, LabTemplate


class BudgetGrantForm(forms.Form):
    """More weekly budget for one student, this week only."""

    username = forms.CharField(label=gettext_lazy("Student (username)"), max_length=150)
    core_percent_hours = forms.IntegerField(
        label=gettext_lazy("More AI-Core-% × hours"),
        required=False,
        validators=[MinValueValidator(0), MaxValueValidator(MAX_BUDGET)],
    )
    gib_hours = forms.IntegerField(
        label=gettext_lazy("More GiB × hours"), required=False, validators=[MinValueValidator(0), MaxValueValidator(MAX_BUDGET)]
    )

    def clean(self):
        data = super().clean()
        if not self.errors and not (data.get("core_percent_hours") or data.get("gib_hours")):
            raise forms.ValidationError(_("Grant some AI-Core-% × hours, GiB × hours or both."))
        return data


# --- roster --------------------------------------------------------------------------------------


class RosterAddForm(forms.Form):
    identifier = forms.CharField(label=gettext_lazy("Username or e-mail"), max_length=254)
    role = forms.ChoiceField(label=gettext_lazy("Role"), choices=Enrollment.Role.choices, initial=Enrollment.Role.STUDENT)


class RosterImportForm(forms.Form):
    file = forms.FileField(
        label=gettext_lazy("CSV file"),
        help_text=gettext_lazy(
            "A header row naming the columns: username and/or email, and optionally role, first_name, last_name."
        ),
    )

    def clean_file(self) -> str:
        upload = self.cleaned_data["file"]
        if upload.size > 1_000_000:
            raise forms.ValidationError(_("The file is larger than 1 MB; split it."))
        raw = upload.read()
        for encoding in ("utf-8-sig", "gb18030"):
            try:
                return raw.decode(encoding)
            except UnicodeDecodeError:
                continue
        raise forms.ValidationError(_("The file is neither UTF-8 nor GB18030 text; save it as CSV UTF-8."))


class RoleForm(forms.Form):
    role = forms.ChoiceField(choices=Enrollment.Role.choices)


WEEKDAYS = [
    (0, gettext_lazy("Monday")),
    (1, gettext_lazy("Tuesday")),
    (2, gettext_lazy("Wednesday")),
    (3, gettext_lazy("Thursday")),
    (4, gettext_lazy("Friday")),
    (5, gettext_lazy("Saturday")),
    (6, gettext_lazy("Sunday")),
]
MAX_RESERVED_SESSIONS = 1000


class ReservationForm(forms.Form):
    """A class reservation: N sessions of a template at a time of day, weekly or on single dates.

    The slots are worked out here (in the portal's time zone, ``labs.domain.reservations``) and
    put in ``cleaned_data["slots"]``, the choices in ``cleaned_data["rule"]``; whether the
    cluster can hold them is the booking service's check. A weekly class whose first date is
    past starts at its next meeting (``rule["first_date"]`` is that meeting's date); a single
    date already past is refused. Required fields carry ``required`` and ``aria-required`` and
    say "This field is required." each when left empty.
    """

    template = forms.ModelChoiceField(label=gettext_lazy("Template"), queryset=LabTemplate.objects.none(), empty_label=None)
    count = forms.IntegerField(
        label=gettext_lazy("Sessions"),
        validators=[MinValueValidator(1), MaxValueValidator(MAX_RESERVED_SESSIONS)],
        help_text=gettext_lazy("How many students the class has: one running lab each."),
    )
    start_time = forms.TimeField(label=gettext_lazy("Class starts at"), widget=forms.TimeInput(attrs={"type": "time"}))
    minutes = forms.IntegerField(
        label=gettext_lazy("Length (minutes)"), validators=[MinValueValidator(1), MaxValueValidator(24 * 60)], initial=90
    )
    weekdays = forms.TypedMultipleChoiceField(
        label=gettext_lazy("Every week on"),
        choices=WEEKDAYS,
        coerce=int,
        required=False,
        widget=forms.CheckboxSelectMultiple,
    )
    first_date = forms.DateField(
        label=gettext_lazy("From"),
        required=False,
        widget=forms.DateInput(attrs={"type": "date"}, format="%Y-%m-%d"),
        help_text=gettext_lazy("Needed for a weekly class. A date already past: the booking starts at the next class."),
    )
    last_date = forms.DateField(
        label=gettext_lazy("Until"),
        required=False,
        widget=forms.DateInput(attrs={"type": "date"}, format="%Y-%m-%d"),
        help_text=gettext_lazy("Empty: the course's last day."),
    )
    dates = forms.CharField(
        label=gettext_lazy("Or on single dates"),
        required=False,
        help_text=gettext_lazy("YYYY-MM-DD, separated by commas or spaces."),
    )

    def __init__(self, *args, course: Course, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.course = course
        self.fields["template"].queryset = course.templates.order_by("name")
        for field in self.fields.values():
            if field.required:
                field.widget.attrs["aria-required"] = "true"

    def clean_dates(self) -> list:
        from datetime import date

        today = timezone.localdate()
        found = []
        for word in re.split(r"[\s,;]+", self.cleaned_data.get("dates", "").strip()):
            if not word:
                continue
            try:
                found.append(date.fromisoformat(word))
            except ValueError:
                raise forms.ValidationError(_("%(word)s is not a date like 2026-03-03.") % {"word": word}) from None
            if found[-1] < today:
                raise forms.ValidationError(_("%(word)s is in the past: a single date must be today or later.") % {"word": word})
        return found

    def clean(self):
        from labs.services.reservations import weekly_slots

        data = super().clean()
        if self.errors:
            return data
        weekdays, dates = data.get("weekdays") or [], data.get("dates") or []
        first, last = data.get("first_date"), data.get("last_date") or self.course.ends_on
        if not weekdays and not dates:
            raise forms.ValidationError(_("Tick the weekdays of the class, or give single dates."))
        if weekdays:
            if first is None:
                self.add_error("first_date", _("A weekly class needs its first date."))
                return data
            if last is None:
                self.add_error("last_date", _("The course has no last day: give the date of the last class."))
                return data
            if last < first:
                self.add_error("last_date", _("The last date is before the first."))
                return data
        try:
            data["slots"] = weekly_slots(
                start=data["start_time"], minutes=data["minutes"], weekdays=weekdays, first=first, last=last, dates=dates
            )
        except ValueError:
            raise forms.ValidationError(_("That is too many classes for one booking; book the term in parts.")) from None
        weekly = sorted({timezone.localtime(s).date() for s, _e in data["slots"]} - set(dates))
        if weekdays and not weekly:
            # Every class between the dates is past, or none falls on the weekdays.
            self.add_error("last_date", _("No class to come falls on the chosen weekdays by this date."))
            return data
        data["rule"] = {
            "start_time": data["start_time"],
            "minutes": data["minutes"],
            "weekdays": weekdays,
            "first_date": weekly[0] if weekdays else None,
            "last_date": last if weekdays else None,
            "dates": dates,
        }
        return data
