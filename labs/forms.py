"""Forms: the launch button and the instructor console. Every value is checked here with a message
that says what is wrong and what would be right; the services write what passed."""

from __future__ import annotations

import re
from decimal import Decimal, InvalidOperation

from django import forms
from django.core.validators import MaxValueValidator, MinValueValidator
from django.utils import timezone
from django.utils.translation import gettext as _
from django.utils.translation import gettext_lazy, pgettext_lazy

from labs.domain.placement import SharePolicy
from labs.domain.quota_spec import (
    MAX_BUDGET,
    QUOTA_FIELDS,
    QUOTA_SPEC,
    Amount,
    QuotaError,
    QuotaField,
    Unit,
    errors_by_field,
    fields_of,
    grid_error,
    quota_errors,
)
from labs.domain.units import (
    CORE_PERCENT_MAX,
    HOST_DEFAULTS,
    MEMORY_GRANULE_MIB,
    WHOLE_CARDS_MAX,
    default_scenario,
)
from labs.domain.vllm import VENDOR_MODELS, vendor_supports
from labs.drivers import get_driver
from labs.models import AllowedImage, Course, Enrollment, LabTemplate
from labs.models.catalog import SHARE_POLICY_CHOICES
from labs.presentation import gib_text
from labs.selectors.console import Allotment, ClusterFacts, GuaranteesHeld
from labs.services.courses import quota_context


def filter_text(params, name: str) -> str:
    """A page filter's free text from the query string ``params``: stripped, and without NUL bytes,
    which no stored text holds and PostgreSQL refuses in a query."""
    return params.get(name, "").replace("\x00", "").strip()


class LaunchForm(forms.Form):
    course = forms.IntegerField(min_value=1)
    template = forms.IntegerField(min_value=1)


# --- courses -------------------------------------------------------------------------------------

COURSE_CODE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")


class CourseForm(forms.ModelForm):
    class Meta:
        model = Course
        fields = ["code", "title", "term", "starts_on", "ends_on"]
        widgets = {"starts_on": forms.DateInput(attrs={"type": "date"}), "ends_on": forms.DateInput(attrs={"type": "date"})}
        help_texts = {
            "code": gettext_lazy("Letters, digits, dot, dash or underscore, e.g. AI101."),
            "term": gettext_lazy("e.g. 2026 Autumn. The same code may be used again in another term."),
        }

    def __init__(self, *args, institution=None, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.institution = institution or getattr(self.instance, "institution", None)

    def clean_code(self) -> str:
        code = self.cleaned_data["code"].strip()
        if not COURSE_CODE.match(code):
            raise forms.ValidationError(_("Use letters, digits, dot, dash or underscore, starting with a letter or digit."))
        return code

    def clean(self):
        data = super().clean()
        starts, ends = data.get("starts_on"), data.get("ends_on")
        if starts and ends and ends < starts:
            self.add_error("ends_on", _("The last day cannot be before the first day (%(start)s).") % {"start": starts})
        code, term = data.get("code"), data.get("term")
        if self.institution is not None and code and term:
            clash = Course.objects.filter(institution=self.institution, code=code, term=term).exclude(pk=self.instance.pk)
            if clash.exists():
                self.add_error("code", _("%(code)s already exists in %(term)s.") % {"code": code, "term": term})
        return data


# --- quota ---------------------------------------------------------------------------------------


def amount_text(amount: Amount) -> str:
    """An amount of a quota message in the reader's words: memory as GiB, AI Core with %."""
    if amount.unit is Unit.MIB:
        return gib_text(amount.value)
    if amount.unit is Unit.CORE_PERCENT:
        return f"{amount.value} %"
    return str(amount.value)


def quota_messages(errors: list[QuotaError]) -> dict[str, list[str]]:
    """Quota errors (``labs.domain.quota_spec``) by field, in the active language."""
    return {name: [e.render(_, amount_text) for e in found] for name, found in errors_by_field(errors).items()}


class GiBField(forms.DecimalField):
    """Memory typed in GiB (``4``, ``0.5``, ``1.125``), cleaned to MiB; off the step is an error."""

    def __init__(self, *, step_mib: int = MEMORY_GRANULE_MIB, off_step: str | None = None, **kwargs) -> None:
        kwargs.setdefault("min_value", Decimal(0))
        kwargs.setdefault("max_digits", 12)
        kwargs.setdefault("decimal_places", 3)
        super().__init__(**kwargs)
        # What a value off the step is told (``step``, ``below``, ``above``); the quota's grid message if none.
        self.off_step = off_step
        self.set_step(step_mib)

    def set_step(self, step_mib: int) -> None:
        """The step values must be on (the nodes' memory step), for checking and for the input's ``step``."""
        self.step_mib = step_mib
        self.widget.attrs["step"] = str(Decimal(step_mib) / 1024)

    def clean(self, value):
        gib = super().clean(value)
        if gib is None:
            return None
        try:
            mib = gib * 1024
        except InvalidOperation:
            raise forms.ValidationError(_("Enter a number of GiB.")) from None
        if mib != mib.to_integral_value() or int(mib) % self.step_mib:
            error = grid_error("", int(mib), self.step_mib)
            if self.off_step is None:
                raise forms.ValidationError(error.render(_, amount_text))
            raise forms.ValidationError(str(self.off_step) % {name: amount_text(a) for name, a in error.params.items()})
        return int(mib)


def quota_form_field(spec: QuotaField) -> forms.Field:
    """The console's field for a quota field: its label, help, range and step from the spec."""
    common = {
        "label": gettext_lazy(spec.label),
        "required": not spec.optional,
        "help_text": gettext_lazy(spec.help) if spec.help else "",
    }
    if spec.unit is Unit.TEXT:
        return forms.SlugField(max_length=spec.max_length, **common)
    if spec.grid_mib is not None:  # typed in GiB on the grid; the cluster's step is set per form
        return GiBField(step_mib=spec.grid_mib, min_value=Decimal(spec.minimum or 0), **common)
    return forms.IntegerField(min_value=spec.minimum, max_value=spec.maximum, **common)


# One form field per field of the spec, in its order.
QuotaFields = type(forms.Form)(
    "QuotaFields", (forms.Form,), {"__module__": __name__, **{spec.name: quota_form_field(spec) for spec in QUOTA_SPEC}}
)


class QuotaForm(QuotaFields):
    """A course's guarantee, cohort, borrowing and lending limits and per-student rules.

    Its fields and rules are ``labs.domain.quota_spec``'s, the ``quota_set`` service's: checked
    against the cluster's healthy cards (vendor limits: AI Core 100 % per card, 16 development
    or 8 inference instances per card and at most 128 or 64 per node, the cards' memory on the
    nodes' step) and against the institution's allotment less what its other courses guarantee.
    """

    GUARANTEE = tuple(f.name for f in fields_of("guarantee"))
    BORROW = tuple(f.name for f in fields_of("borrow"))
    LEND = tuple(f.name for f in fields_of("lend"))

    def __init__(
        self,
        *args,
        facts: ClusterFacts,
        allotment: Allotment,
        held: GuaranteesHeld,
        overcommit: bool,
        scenarios: set[str],
        institution_id: int,
        **kwargs,
    ) -> None:
        super().__init__(*args, **kwargs)
        self.institution_id = institution_id
        self.held = held
        self.overcommit = overcommit
        self.facts = facts
        self.allotment = allotment
        self.scenarios = scenarios
        for spec in QUOTA_SPEC:
            if spec.grid_mib is not None:
                self.fields[spec.name].set_step(max(spec.grid_mib, facts.memory_step_mib))

    @staticmethod
    def initial_from(quota) -> dict:
        """The form's values from a ``CourseQuota`` (memory as GiB); a new quota's defaults without one."""
        if quota is None:
            return {f.name: f.default for f in QUOTA_SPEC if f.default not in (None, "")}
        initial = {}
        for spec in QUOTA_SPEC:
            value = getattr(quota, spec.name)
            if spec.grid_mib is not None:
                value = None if value is None else (Decimal(value) / 1024).normalize()
            initial[spec.name] = value
        return initial

    def clean(self):
        data = super().clean()
        for spec in QUOTA_SPEC:  # an optional field left empty takes its default
            if spec.default is not None and spec.optional and data.get(spec.name) is None and spec.name not in self.errors:
                data[spec.name] = spec.default
        context = quota_context(
            facts=self.facts,
            allotment=self.allotment,
            held=self.held,
            overcommit=self.overcommit,
            scenarios=self.scenarios,
            cohort=data.get("cohort") or "",
            institution_id=self.institution_id,
        )
        values = {name: value for name, value in data.items() if name in QUOTA_FIELDS}
        for name, messages in quota_messages(quota_errors(values, context)).items():
            for message in messages:
                self.add_error(name, message)
        return data


# --- templates -----------------------------------------------------------------------------------


def scenario_field(**kwargs) -> forms.ChoiceField:
    """A template's scenario; empty (the initial choice): the default of its kind (``default_scenario``)."""
    of_the_kind = ("", gettext_lazy("The default of the kind (vLLM: inference, JupyterLab: development)"))
    return forms.ChoiceField(choices=[of_the_kind, *LabTemplate.ScenarioChoice.choices], required=False, initial="", **kwargs)


def allowed_label(allowed: AllowedImage) -> str:
    """An allow-list entry as the template form offers it; a vLLM model the vendor does not list says so."""
    label = f"{allowed.get_kind_display()}: {allowed.label or allowed.reference}"
    if allowed.kind == LabTemplate.Kind.VLLM and not vendor_supports(allowed.reference):
        return _("%(entry)s (not on the vendor's list of supported models)") % {"entry": label}
    return label


# A template's host memory and scratch disk in GiB: one 128 MiB step at least, at most what a
# PositiveIntegerField of MiB holds, down to the step.
HOST_GIB_MIN = Decimal(MEMORY_GRANULE_MIB) / 1024
HOST_GIB_MAX = Decimal((2**31 - 1) // MEMORY_GRANULE_MIB * MEMORY_GRANULE_MIB) / 1024
HOST_MEMORY_OFF_STEP = gettext_lazy("Host memory is given in steps of %(step)s: use %(below)s or %(above)s.")


class TemplateForm(forms.Form):
    """A course's own template: what runs (from the institution's allow-list) and its NPU share."""

    name = forms.CharField(label=pgettext_lazy("a template's", "Name"), max_length=100)
    description = forms.CharField(label=gettext_lazy("Description"), max_length=300, required=False)
    image = forms.ModelChoiceField(
        label=gettext_lazy("Runs"),
        queryset=AllowedImage.objects.none(),
        empty_label=None,
        help_text=gettext_lazy("JupyterLab images and vLLM models your institution allows."),
    )
    core_percent = forms.IntegerField(
        # xgettext:no-python-format
        label=gettext_lazy("AI Core floor (% of one card)"),
        validators=[MinValueValidator(0), MaxValueValidator(CORE_PERCENT_MAX)],
        initial=10,
    )
    memory_mib = GiBField(label=gettext_lazy("NPU memory cap (GiB)"), min_value=Decimal("0.125"), initial=Decimal(8))
    # Shown only where the cluster runs best-effort instances (openFuyao vNPU in soft mode).
    share_policy = forms.ChoiceField(
        label=gettext_lazy("Compute share"),
        choices=SHARE_POLICY_CHOICES,
        required=False,
        initial=SharePolicy.ELASTIC.value,
        help_text=gettext_lazy("Best effort: no AI Core floor (set it to 0), memory only; the lab uses what the card has idle."),
    )
    card_count = forms.IntegerField(
        label=gettext_lazy("Cards"),
        required=False,
        min_value=1,
        max_value=WHOLE_CARDS_MAX,
        initial=1,
        # xgettext:no-python-format
        help_text=gettext_lazy(
            "1: a share of one card. 2 or more: that many whole cards on one server, with 100 % AI Core "
            "and each card's whole memory."
        ),
    )
    scenario = scenario_field(
        label=gettext_lazy("Scenario"),
        help_text=gettext_lazy("Inference instances take more of a card: 8 fit on one card instead of 16."),
    )
    # Host resources of the lab's pod; empty: the defaults of the kind (HOST_DEFAULTS).
    cpu_request_millicores = forms.IntegerField(
        label=gettext_lazy("CPU request (millicores)"),
        required=False,
        min_value=1,
        help_text=gettext_lazy("Kept for the lab on its server; 1000 = one core. Empty: the default of the kind."),
    )
    cpu_limit_millicores = forms.IntegerField(label=gettext_lazy("CPU limit (millicores)"), required=False, min_value=1)
    # Host memory and scratch disk are typed in GiB on the 128 MiB grid (0.125 GiB), so the MiB
    # the model keeps are exact; at most what the model's column holds.
    host_memory_request_mib = GiBField(
        label=gettext_lazy("Host memory request (GiB)"),
        required=False,
        min_value=HOST_GIB_MIN,
        max_value=HOST_GIB_MAX,
        off_step=HOST_MEMORY_OFF_STEP,
        help_text=gettext_lazy("The server's RAM kept for the lab. Empty: the default of the kind."),
    )
    host_memory_limit_mib = GiBField(
        label=gettext_lazy("Host memory limit (GiB)"),
        required=False,
        min_value=HOST_GIB_MIN,
        max_value=HOST_GIB_MAX,
        off_step=HOST_MEMORY_OFF_STEP,
    )
    ephemeral_storage_mib = GiBField(
        label=gettext_lazy("Scratch disk (GiB)"),
        required=False,
        min_value=HOST_GIB_MIN,
        max_value=HOST_GIB_MAX,
        off_step=gettext_lazy("Scratch disk is given in steps of %(step)s: use %(below)s or %(above)s."),
    )

    HOST_FIELDS = (
        "cpu_request_millicores",
        "cpu_limit_millicores",
        "host_memory_request_mib",
        "host_memory_limit_mib",
        "ephemeral_storage_mib",
    )

    def __init__(self, *args, institution, facts: ClusterFacts, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.facts = facts
        self.fields["image"].queryset = AllowedImage.objects.filter(institution=institution)
        self.fields["image"].label_from_instance = allowed_label
        self.fields["image"].help_text = _(
            "JupyterLab images and vLLM models your institution allows. The vendor supports these models with "
            "vLLM Ascend on FlexNPU: %(models)s. Others may run, but are not on its list."
        ) % {"models": ", ".join(VENDOR_MODELS)}
        self.fields["memory_mib"].set_step(facts.memory_step_mib)
        if get_driver().best_effort_nodes() is None:
            del self.fields["share_policy"]  # the cluster has none: every share has a floor

    @property
    def offers_best_effort(self) -> bool:
        return "share_policy" in self.fields

    def clean(self):
        data = super().clean()
        if data.get("card_count") is None and "card_count" not in self.errors:
            data["card_count"] = 1
        data["share_policy"] = data.get("share_policy") or SharePolicy.ELASTIC.value
        memory = data.get("memory_mib")
        if memory is not None and self.facts.largest_card_mib and memory > self.facts.largest_card_mib:
            self.add_error(
                "memory_mib",
                _("The largest card has %(limit)s of memory; one instance cannot have more.")
                % {"limit": gib_text(self.facts.largest_card_mib)},
            )
        allowed = data.get("image")
        if allowed is not None and not data.get("scenario"):
            data["scenario"] = default_scenario(allowed.kind).value
        if allowed is not None and not any(name in self.errors for name in self.HOST_FIELDS):
            defaults = HOST_DEFAULTS[allowed.kind]
            for name in self.HOST_FIELDS:
                if data.get(name) is None:
                    data[name] = defaults[name]
            # The model's rule (an image to run, limits at least the requests, requests within the
            # largest node; whole cards: 100 % AI Core, a card's whole memory, no more cards than a node has).
            share = {name: data.get(name) for name in ("core_percent", "memory_mib", "card_count", "share_policy")}
            try:
                LabTemplate(**self._runs(allowed), **share, **{name: data[name] for name in self.HOST_FIELDS}).clean()
            except forms.ValidationError as exc:
                for field, messages in exc.message_dict.items():
                    for message in messages:
                        self.add_error(field, message)
        return data

    @staticmethod
    def _runs(allowed: AllowedImage) -> dict:
        """What a template made from an allow-list entry runs: a JupyterLab image, or a vLLM model and its serving image."""
        runs = {"kind": allowed.kind, "image": allowed.container_image}
        if allowed.kind == LabTemplate.Kind.VLLM:
            runs["model"] = allowed.reference
        return runs

    def template_fields(self) -> dict:
        data = self.cleaned_data
        return {
            "name": data["name"],
            "description": data["description"],
            **self._runs(data["image"]),
            "core_percent": data["core_percent"],
            "memory_mib": data["memory_mib"],
            "card_count": data["card_count"],
            "share_policy": data["share_policy"],
            "scenario": data["scenario"],
            **{name: data[name] for name in self.HOST_FIELDS},
        }


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


class PreviewForm(forms.Form):
    """The template form's share fields, for the live "how many fit" preview; an empty scenario is
    the default of the chosen allow-list entry's kind (of JupyterLab when none is chosen)."""

    core_percent = forms.IntegerField(validators=[MinValueValidator(1), MaxValueValidator(CORE_PERCENT_MAX)])
    memory_mib = GiBField(min_value=Decimal("0.125"))
    card_count = forms.IntegerField(required=False, min_value=1, max_value=WHOLE_CARDS_MAX)
    scenario = scenario_field()
    image = forms.ModelChoiceField(queryset=AllowedImage.objects.none(), required=False)

    def __init__(self, *args, institution, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.fields["image"].queryset = AllowedImage.objects.filter(institution=institution)

    def share_fields(self) -> dict:
        """The share to preview: ``core_percent``, ``memory_mib``, ``scenario`` and ``card_count``
        (empty: 1, a share of one card)."""
        data = self.cleaned_data
        allowed = data["image"]
        kind = allowed.kind if allowed is not None else LabTemplate.Kind.JUPYTER
        scenario = data["scenario"] or default_scenario(kind).value
        return {
            "core_percent": data["core_percent"],
            "memory_mib": data["memory_mib"],
            "scenario": scenario,
            "card_count": data["card_count"] or 1,
        }


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
