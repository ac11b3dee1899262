"""Forms: the launch button and the instructor console. Every value is checked here with a message
that says what is wrong and what would be right; the services write what passed."""

from __future__ import annotations

import re
from decimal import Decimal, InvalidOperation

from django import forms
from django.core.validators import MaxValueValidator, MinValueValidator
from django.utils.translation import gettext as _
from django.utils.translation import gettext_lazy, pgettext_lazy

from labs.domain.placement import SharePolicy
from labs.domain.units import (
    CARD_INSTANCE_CAP,
    CORE_PERCENT_MAX,
    HOST_DEFAULTS,
    MEMORY_GRANULE_MIB,
    NODE_INSTANCE_CAP,
    WHOLE_CARDS_MAX,
    Scenario,
    default_scenario,
)
from labs.domain.vllm import VENDOR_MODELS, vendor_supports
from labs.drivers import get_driver
from labs.models import AllowedImage, Course, Enrollment, LabTemplate
from labs.models.catalog import SHARE_POLICY_CHOICES
from labs.models.tenancy import COHORT_TAKEN, cohort_of_another_institution
from labs.selectors.console import Allotment, ClusterFacts
from labs.templatetags.units import gib_text

MAX_SESSIONS_PER_STUDENT = 16
MAX_SESSION_MINUTES = 7 * 24 * 60
MAX_EXTENSIONS = 20
MAX_BUDGET = 1_000_000


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


class GiBField(forms.DecimalField):
    """Memory typed in GiB (``4``, ``0.5``, ``1.125``), cleaned to MiB; off the step is an error."""

    def __init__(self, *, step_mib: int = MEMORY_GRANULE_MIB, **kwargs) -> None:
        kwargs.setdefault("min_value", Decimal(0))
        kwargs.setdefault("max_digits", 12)
        kwargs.setdefault("decimal_places", 3)
        super().__init__(**kwargs)
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
            step = gib_text(self.step_mib)
            below = int(mib) // self.step_mib * self.step_mib
            raise forms.ValidationError(
                _("Memory is reserved in steps of %(step)s: use %(below)s or %(above)s.")
                % {"step": step, "below": gib_text(below), "above": gib_text(below + self.step_mib)}
            )
        return int(mib)


def _count(label, **kwargs) -> forms.IntegerField:
    return forms.IntegerField(label=label, min_value=0, **kwargs)


class QuotaForm(forms.Form):
    """A course's guarantee, cohort, borrowing and lending limits and per-student rules.

    Checked against the cluster's healthy cards (vendor limits: AI Core 100 % per card, 16
    development or 8 inference instances per card and at most 128 or 64 per node, the cards'
    memory on the nodes' step) and
    against the institution's allotment less what its other courses guarantee.
    """

    instance_count = _count(gettext_lazy("Instances"))
    # xgettext:no-python-format
    core_percent = _count(gettext_lazy("AI Core (% of one card, summed)"))
    memory_mib = GiBField(label=gettext_lazy("NPU memory (GiB)"))
    cohort = forms.SlugField(
        label=gettext_lazy("Cohort"),
        required=False,
        max_length=64,
        help_text=gettext_lazy("Courses in one cohort lend each other idle quota. Empty: no borrowing or lending."),
    )
    borrow_instances = _count(gettext_lazy("Borrowing limit: instances"), required=False)
    borrow_core_percent = _count(gettext_lazy("Borrowing limit: AI Core (%)"), required=False)
    borrow_memory_mib = GiBField(label=gettext_lazy("Borrowing limit: memory (GiB)"), required=False)
    lend_instances = _count(gettext_lazy("Lending limit: instances"), required=False)
    lend_core_percent = _count(gettext_lazy("Lending limit: AI Core (%)"), required=False)
    lend_memory_mib = GiBField(label=gettext_lazy("Lending limit: memory (GiB)"), required=False)
    sessions_per_student = forms.IntegerField(
        label=gettext_lazy("Sessions per student at a time"),
        validators=[MinValueValidator(1), MaxValueValidator(MAX_SESSIONS_PER_STUDENT)],
    )
    max_session_minutes = forms.IntegerField(
        label=gettext_lazy("Maximum session length (minutes)"),
        validators=[MinValueValidator(1), MaxValueValidator(MAX_SESSION_MINUTES)],
    )
    extensions_allowed = forms.IntegerField(
        label=gettext_lazy("Extensions a student may ask for"),
        required=False,
        validators=[MinValueValidator(0), MaxValueValidator(MAX_EXTENSIONS)],
        help_text=gettext_lazy("Each lengthens a running session once, from its card. Empty or 0: none."),
    )
    budget_core_percent_hours = forms.IntegerField(
        label=gettext_lazy("Weekly budget per student: AI-Core-% × hours"),
        required=False,
        validators=[MinValueValidator(1), MaxValueValidator(MAX_BUDGET)],
        # xgettext:no-python-format
        help_text=gettext_lazy("E.g. 100: a 10 % share for 10 hours a week. Empty: no budget."),
    )
    budget_gib_hours = forms.IntegerField(
        label=gettext_lazy("Weekly budget per student: GiB × hours"),
        required=False,
        validators=[MinValueValidator(1), MaxValueValidator(MAX_BUDGET)],
        help_text=gettext_lazy("E.g. 80: 8 GiB for 10 hours a week. Empty: no budget."),
    )
    extension_minutes = forms.IntegerField(
        label=gettext_lazy("Minutes each extension adds"),
        required=False,
        validators=[MinValueValidator(1), MaxValueValidator(MAX_SESSION_MINUTES)],
        help_text=gettext_lazy("Empty: 30."),
    )

    host_cpu_cap_millicores = forms.IntegerField(
        label=gettext_lazy("host CPU cap (millicores, all sessions)"),
        required=False,
        min_value=0,
        help_text=gettext_lazy("The servers' CPU all the course's labs may request together. Empty: no cap."),
    )
    host_memory_cap_mib = forms.IntegerField(
        label=gettext_lazy("host memory cap (MiB, all sessions)"),
        required=False,
        min_value=0,
        help_text=gettext_lazy("The servers' RAM all the course's labs may request together. Empty: no cap."),
    )

    GUARANTEE = ("instance_count", "core_percent", "memory_mib")
    BORROW = ("borrow_instances", "borrow_core_percent", "borrow_memory_mib")
    LEND = ("lend_instances", "lend_core_percent", "lend_memory_mib")

    def __init__(
        self, *args, facts: ClusterFacts, allotment: Allotment, scenarios: set[str], institution_id: int, **kwargs
    ) -> None:
        super().__init__(*args, **kwargs)
        self.institution_id = institution_id
        self.facts = facts
        self.allotment = allotment
        self.inference = Scenario.INFERENCE.value in scenarios
        for name in ("memory_mib", "borrow_memory_mib", "lend_memory_mib"):
            self.fields[name].set_step(facts.memory_step_mib)

    @staticmethod
    def initial_from(quota) -> dict:
        """The form's values from a ``CourseQuota`` (memory as GiB)."""
        if quota is None:
            return {
                "sessions_per_student": 1,
                "max_session_minutes": 180,
                "instance_count": 0,
                "core_percent": 0,
                "extensions_allowed": 0,
                "extension_minutes": 30,
            }
        initial = {
            name: getattr(quota, name)
            for name in (
                "instance_count",
                "core_percent",
                "cohort",
                "borrow_instances",
                "borrow_core_percent",
                "lend_instances",
                "lend_core_percent",
                "sessions_per_student",
                "max_session_minutes",
                "extensions_allowed",
                "extension_minutes",
                "budget_core_percent_hours",
                "budget_gib_hours",
                "host_cpu_cap_millicores",
                "host_memory_cap_mib",
            )
        }
        for name in ("memory_mib", "borrow_memory_mib", "lend_memory_mib"):
            value = getattr(quota, name)
            initial[name] = None if value is None else (Decimal(value) / 1024).normalize()
        return initial

    def clean_cohort(self) -> str:
        cohort = self.cleaned_data["cohort"]
        if cohort and cohort_of_another_institution(cohort, self.institution_id):
            raise forms.ValidationError(COHORT_TAKEN)
        return cohort

    def clean_extensions_allowed(self):
        value = self.cleaned_data["extensions_allowed"]
        return 0 if value is None else value

    def clean_extension_minutes(self):
        value = self.cleaned_data["extension_minutes"]
        return 30 if value is None else value

    def clean(self):
        data = super().clean()
        facts = self.facts
        cap_scenario = Scenario.INFERENCE if self.inference else Scenario.DEVELOPMENT
        limits = {
            "instance_count": (
                facts.instance_cap(cap_scenario),
                _(
                    "The cluster's %(cards)s healthy cards hold at most %(limit)s %(kind)s instances "
                    "(%(per)s per card, %(per_node)s per node)."
                )
                % {
                    "cards": facts.cards,
                    "limit": facts.instance_cap(cap_scenario),
                    "kind": _("inference") if self.inference else _("development"),
                    "per": CARD_INSTANCE_CAP[cap_scenario],
                    "per_node": NODE_INSTANCE_CAP[cap_scenario],
                },
            ),
            "core_percent": (
                facts.core_total_percent,
                _("The cluster's %(cards)s healthy cards have %(limit)s %% of AI Core in all (%(per)s %% per card).")
                % {"cards": facts.cards, "limit": facts.core_total_percent, "per": CORE_PERCENT_MAX},
            ),
            "memory_mib": (
                facts.memory_total_mib,
                _("The cluster's %(cards)s healthy cards have %(limit)s of memory in all.")
                % {"cards": facts.cards, "limit": gib_text(facts.memory_total_mib)},
            ),
        }
        for name, (limit, message) in limits.items():
            value = data.get(name)
            if value is not None and value > limit:
                self.add_error(name, message)
        left = self.allotment
        if left.limit is not None:
            for name, resource, show in (
                ("instance_count", "instances", str),
                ("core_percent", "core_percent", lambda v: f"{v} %"),
                ("memory_mib", "memory_mib", gib_text),
            ):
                value, room = data.get(name), left.left_of(resource)
                if value is not None and room is not None and value > room and name not in self.errors:
                    self.add_error(
                        name,
                        _(
                            "Your institution may guarantee %(limit)s in total; its other courses hold %(others)s, "
                            "so at most %(left)s is left for this course."
                        )
                        % {
                            "limit": show(getattr(left.limit, resource)),
                            "others": show(getattr(left.others, resource)),
                            "left": show(room),
                        },
                    )
        for lend, guarantee in zip(self.LEND, self.GUARANTEE, strict=True):
            value, nominal = data.get(lend), data.get(guarantee)
            if value is not None and nominal is not None and value > nominal:
                self.add_error(lend, _("A course cannot lend more than it is guaranteed."))
        if not data.get("cohort"):
            for name in self.BORROW + self.LEND:
                if data.get(name) not in (None, 0):
                    self.add_error(name, _("Borrowing and lending happen inside a cohort: name the cohort, or leave this empty."))
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
        label=gettext_lazy("compute share"),
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
    host_memory_request_mib = forms.IntegerField(
        label=gettext_lazy("host memory request (MiB)"),
        required=False,
        min_value=1,
        help_text=gettext_lazy("The server's RAM kept for the lab. Empty: the default of the kind."),
    )
    host_memory_limit_mib = forms.IntegerField(label=gettext_lazy("host memory limit (MiB)"), required=False, min_value=1)
    ephemeral_storage_mib = forms.IntegerField(label=gettext_lazy("scratch disk (MiB)"), required=False, min_value=1)

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
    cluster can hold them is the booking service's check.
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
        label=gettext_lazy("From"), required=False, widget=forms.DateInput(attrs={"type": "date"}, format="%Y-%m-%d")
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

    def clean_dates(self) -> list:
        from datetime import date

        found = []
        for word in re.split(r"[\s,;]+", self.cleaned_data.get("dates", "").strip()):
            if not word:
                continue
            try:
                found.append(date.fromisoformat(word))
            except ValueError:
                raise forms.ValidationError(_("%(word)s is not a date like 2026-03-03.") % {"word": word}) from None
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
        if not data["slots"]:
            raise forms.ValidationError(_("No class falls on the chosen weekdays between those dates."))
        data["rule"] = {
            "start_time": data["start_time"],
            "minutes": data["minutes"],
            "weekdays": weekdays,
            "first_date": first if weekdays else None,
            "last_date": last if weekdays else None,
            "dates": dates,
        }
        return data
