"""The template form (a course's own template and its host resources, memory in GiB) and the live
"how many fit" preview's form."""

from __future__ import annotations

from decimal import Decimal

from django import forms
from django.core.validators import MaxValueValidator, MinValueValidator
from django.utils.translation import gettext as _
from django.utils.translation import gettext_lazy, pgettext_lazy

from labs.domain.placement import SharePolicy
from labs.domain.units import (
    CORE_PERCENT_MAX,
    HOST_DEFAULTS,
    MEMORY_GRANULE_MIB,
    WHOLE_CARDS_MAX,
    default_scenario,
)
from labs.domain.vllm import VENDOR_MODELS, vendor_supports
from labs.drivers import get_driver
from labs.forms.courses import HOST_MEMORY_OFF_STEP, CoresField, GiBField
from labs.models import AllowedImage, LabTemplate
from labs.models.catalog import SHARE_POLICY_CHOICES
from labs.presentation import gib_text
from labs.selectors.console import ClusterFacts

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
# Host CPU: at most what a PositiveIntegerField of millicores holds, in whole cores.
HOST_CORES_MAX = (2**31 - 1) // 1000


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
    offers_smaller_lab = forms.BooleanField(
        label=gettext_lazy("Offer a smaller lab while this one waits"),
        required=False,
        initial=True,
        help_text=gettext_lazy(
            "When a student's lab of this template waits for free NPU capacity and a smaller template of this "
            "course would start at once, the student is offered it. Not when the course's quota is what it waits for."
        ),
    )
    # Host resources of the lab's pod; empty: the defaults of the kind (HOST_DEFAULTS).
    # Host CPU in cores, kept as millicores (Kubernetes' unit) on the template.
    cpu_request_millicores = CoresField(
        label=gettext_lazy("CPU request (cores)"),
        required=False,
        min_value=Decimal("0.001"),
        max_value=Decimal(HOST_CORES_MAX),
        help_text=gettext_lazy("Kept for the lab on its server; 0.5 = half a core. Empty: the default of the kind."),
    )
    cpu_limit_millicores = CoresField(
        label=gettext_lazy("CPU limit (cores)"), required=False, min_value=Decimal("0.001"), max_value=Decimal(HOST_CORES_MAX)
    )
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
            "offers_smaller_lab": data["offers_smaller_lab"],
            **{name: data[name] for name in self.HOST_FIELDS},
        }


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
