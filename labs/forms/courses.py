"""Forms of the launch button and of a course: the course itself and its quota (memory in GiB on the
nodes' grid, the rule ``labs.domain.quota_spec``'s)."""

from __future__ import annotations

import re
from decimal import Decimal, InvalidOperation

from django import forms
from django.utils.translation import gettext as _
from django.utils.translation import gettext_lazy

from labs.domain.quota_spec import (
    INT4_MAX,
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
    MEMORY_GRANULE_MIB,
)
from labs.models import Course
from labs.presentation import cores_text, gib_text
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
    if amount.unit is Unit.MILLICORES:
        return cores_text(amount.value)
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


class CoresField(forms.DecimalField):
    """Host CPU typed in cores (``2``, ``0.5``, ``1.25``), cleaned to millicores (Kubernetes' unit,
    which the models keep): a thousandth of a core at most, so the millicores are exact."""

    def __init__(self, **kwargs) -> None:
        kwargs.setdefault("max_digits", 12)
        kwargs.setdefault("decimal_places", 3)
        super().__init__(**kwargs)
        self.widget.attrs["step"] = "0.001"

    def clean(self, value):
        cores = super().clean(value)
        return None if cores is None else int(cores * 1000)

    @staticmethod
    def shown(millicores: int | None) -> Decimal | None:
        """A stored value as the field shows it."""
        return None if millicores is None else (Decimal(millicores) / 1000).normalize()


# Host memory without a grid of its own (a course's cap of its labs' RAM) is typed in GiB on the
# 128 MiB grid all memory here is on, like a template's host memory.
HOST_MEMORY_OFF_STEP = gettext_lazy("Host memory is given in steps of %(step)s: use %(below)s or %(above)s.")


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
    if spec.unit is Unit.MIB:
        top = Decimal((spec.maximum or INT4_MAX) // MEMORY_GRANULE_MIB * MEMORY_GRANULE_MIB) / 1024
        return GiBField(min_value=Decimal(spec.minimum or 0), max_value=top, off_step=HOST_MEMORY_OFF_STEP, **common)
    if spec.unit is Unit.MILLICORES:
        top = Decimal(spec.maximum if spec.maximum is not None else INT4_MAX) // 1000
        return CoresField(min_value=Decimal(spec.minimum or 0), max_value=top, **common)
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
            if spec.unit is Unit.MIB:
                value = None if value is None else (Decimal(value) / 1024).normalize()
            elif spec.unit is Unit.MILLICORES:
                value = CoresField.shown(value)
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
