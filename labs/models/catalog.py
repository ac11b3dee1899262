from django.conf import settings
from django.core.exceptions import ValidationError
from django.core.validators import MaxValueValidator, MinValueValidator
from django.db import models
from django.db.models import F, Q
from django.db.models.functions import Mod
from django.db.models.lookups import Exact
from django.utils.translation import gettext
from django.utils.translation import gettext_lazy as _

from labs.domain.images import is_image_reference
from labs.domain.placement import SharePolicy
from labs.domain.reasons import MIB, MILLICORES, amount
from labs.domain.units import HOST_DEFAULTS, MEMORY_GRANULE_MIB, WHOLE_CARDS_MAX, Scenario
from labs.drivers import get_driver
from labs.drivers.base import launches_vllm_serve
from labs.models.cluster import Card, Node


def gib_words(memory_mib: int) -> str:
    """Memory in GiB in the active language, as the forms ask for it ("1.5 GiB")."""
    return amount(memory_mib, MIB).render(gettext)


def cores_words(millicores: int) -> str:
    """Host CPU in cores in the active language, as the forms ask for it ("1.5 cores")."""
    return amount(millicores, MILLICORES).render(gettext)


def validate_memory_granule(value: int) -> None:
    from django.core.exceptions import ValidationError

    if value % MEMORY_GRANULE_MIB:
        raise ValidationError(_("Memory must be a multiple of %(granule)s MiB."), params={"granule": MEMORY_GRANULE_MIB})


def validate_image_reference(value: str) -> None:
    if not is_image_reference(value):
        raise ValidationError(
            _("“%(value)s” is not a container image reference: registry/name:tag, the name in lower case, no spaces."),
            params={"value": value},
            code="image_reference",
        )


def serving_image(kind: str, image: str) -> str:
    """The ``image`` of an allow-list entry of ``kind`` as stored: a vLLM model's own, or the site's
    ``LAB_VLLM_IMAGE`` when the operator named none; a JupyterLab entry's as given (it must be empty)."""
    if kind == "vllm" and not image:
        return settings.LAB_VLLM_IMAGE
    return image


class AllowedImage(models.Model):
    """What an institution lets its courses run: a JupyterLab image, or a vLLM model and the image
    that serves it (its operator's list)."""

    institution = models.ForeignKey("labs.Institution", on_delete=models.CASCADE, related_name="allowed_images")
    kind = models.CharField(_("kind"), max_length=16, choices=[("jupyter", _("JupyterLab")), ("vllm", _("vLLM"))])
    reference = models.CharField(_("image or model"), max_length=300)
    image = models.CharField(
        _("serving image (vLLM)"),
        max_length=300,
        blank=True,
        validators=[validate_image_reference],
        help_text=_("vLLM: the container image that serves the model; empty: the site's LAB_VLLM_IMAGE. JupyterLab: empty."),
    )
    label = models.CharField(_("label"), max_length=100, blank=True)

    class Meta:
        ordering = ["kind", "label", "reference"]
        constraints = [
            models.UniqueConstraint(fields=["institution", "kind", "reference"], name="allowed_image_unique"),
            models.CheckConstraint(condition=Q(kind__in=["jupyter", "vllm"]), name="allowed_image_kind_valid"),
            models.CheckConstraint(
                condition=(Q(kind="vllm") & ~Q(image="")) | Q(kind="jupyter", image=""),
                name="allowed_image_vllm_names_its_image",
                violation_error_message=_("A vLLM model needs the image that serves it; a JupyterLab image needs none."),
            ),
        ]

    def __str__(self) -> str:
        return self.label or self.reference

    def clean(self) -> None:
        """A vLLM model without an image gets the site's (``serving_image``); a JupyterLab entry is its
        own image, so its reference must be one and it names no other."""
        super().clean()
        if self.kind == "jupyter":
            if self.image:
                raise ValidationError({"image": _("A JupyterLab image needs no serving image: leave it empty.")})
            if self.reference:
                try:
                    validate_image_reference(self.reference)
                except ValidationError as exc:
                    raise ValidationError({"reference": exc.error_list}) from None
        self.image = serving_image(self.kind, self.image)

    @property
    def container_image(self) -> str:
        """The image a template made from this entry runs: the JupyterLab image, or the vLLM model's serving image."""
        return self.image if self.kind == "vllm" else self.reference


_JUPYTER_HOST = HOST_DEFAULTS["jupyter"]
IMAGE_NEEDED = _(
    "A lab template needs a container image (a vLLM template: the image that serves its model, from the allow-list)."
)


SHARE_POLICY_CHOICES = [
    (SharePolicy.ELASTIC.value, _("a guaranteed floor; idle compute lent out")),
    (SharePolicy.BEST_EFFORT.value, _("best effort: no floor, memory only")),
]


class LabTemplate(models.Model):
    """What a session runs and the FlexNPU instance it is bound to."""

    class Kind(models.TextChoices):
        JUPYTER = "jupyter", _("JupyterLab")
        VLLM = "vllm", _("vLLM")

    class ScenarioChoice(models.TextChoices):
        DEVELOPMENT = Scenario.DEVELOPMENT.value, _("development")
        INFERENCE = Scenario.INFERENCE.value, _("inference")

    institution = models.ForeignKey("labs.Institution", on_delete=models.PROTECT, related_name="templates")
    name = models.CharField(_("name"), max_length=100)
    slug = models.SlugField(_("slug"))
    description = models.CharField(_("description"), max_length=300, blank=True)
    kind = models.CharField(_("kind"), max_length=16, choices=Kind.choices, default=Kind.JUPYTER)
    # Blank in forms so that clean() says what is missing; the database refuses an empty image.
    image = models.CharField(_("container image"), max_length=300, blank=True)
    # vLLM: the model served (empty: the driver's default); JupyterLab: unused.
    model = models.CharField(_("model"), max_length=300, blank=True)
    # A course's own template (made in the instructor console); empty: the institution's catalogue.
    course = models.ForeignKey(
        "labs.Course", null=True, blank=True, on_delete=models.CASCADE, related_name="own_templates", verbose_name=_("course")
    )
    command = models.JSONField(_("command"), default=list, blank=True)
    args = models.JSONField(_("arguments"), default=list, blank=True)
    core_percent = models.PositiveSmallIntegerField(
        # xgettext:no-python-format
        _("AI Core floor (% of one card)"),
        validators=[MinValueValidator(0), MaxValueValidator(100)],
        help_text=_("0 for a best-effort instance, which has no floor."),
    )
    # How the instance shares the card's compute (openFuyao's policies): "elastic", a floor with
    # idle compute lent out (FlexNPU's behaviour), or "best-effort", no floor (cores 0, memory
    # only), which only openFuyao vNPU in soft mode runs (``ClusterDriver.best_effort_nodes``).
    share_policy = models.CharField(
        _("compute share"), max_length=16, choices=SHARE_POLICY_CHOICES, default=SharePolicy.ELASTIC.value
    )
    memory_mib = models.PositiveIntegerField(
        _("NPU memory cap (MiB)"), validators=[MinValueValidator(MEMORY_GRANULE_MIB), validate_memory_granule]
    )
    # 1: a share of one card (core_percent, memory_mib). More: that many whole cards on one node,
    # core_percent 100 and memory_mib a card's whole memory, each (volcano.sh/flexnpu-num: N).
    card_count = models.PositiveSmallIntegerField(
        _("cards"),
        default=1,
        validators=[MinValueValidator(1), MaxValueValidator(WHOLE_CARDS_MAX)],
        help_text=_("1: a share of one card. More: that many whole cards, all AI Core and memory of each."),
    )
    scenario = models.CharField(_("scenario"), max_length=16, choices=ScenarioChoice.choices, default=ScenarioChoice.DEVELOPMENT)
    idle_timeout_minutes = models.PositiveIntegerField(_("idle timeout (minutes)"), default=60)
    max_lifetime_minutes = models.PositiveIntegerField(_("maximum lifetime (minutes)"), default=240)
    # Host resources of the pod (requests: counted by placement per node; limits: the pod's cap).
    cpu_request_millicores = models.PositiveIntegerField(
        _("CPU request (millicores)"), default=_JUPYTER_HOST["cpu_request_millicores"], validators=[MinValueValidator(1)]
    )
    cpu_limit_millicores = models.PositiveIntegerField(
        _("CPU limit (millicores)"), default=_JUPYTER_HOST["cpu_limit_millicores"], validators=[MinValueValidator(1)]
    )
    host_memory_request_mib = models.PositiveIntegerField(
        _("host memory request (MiB)"), default=_JUPYTER_HOST["host_memory_request_mib"], validators=[MinValueValidator(1)]
    )
    host_memory_limit_mib = models.PositiveIntegerField(
        _("host memory limit (MiB)"), default=_JUPYTER_HOST["host_memory_limit_mib"], validators=[MinValueValidator(1)]
    )
    ephemeral_storage_mib = models.PositiveIntegerField(
        _("scratch disk (MiB)"), default=_JUPYTER_HOST["ephemeral_storage_mib"], validators=[MinValueValidator(1)]
    )
    # While a lab of this template waits for free cards (not for the course's quota), its student
    # is offered a smaller template of the course that would start at once (labs.domain.offers).
    offers_smaller_lab = models.BooleanField(
        _("offer a smaller lab while this one waits"),
        default=True,
        db_default=True,
        help_text=_(
            "When a lab of this template waits for free NPU capacity and a smaller template of the course "
            "would start at once, its student is offered that one instead."
        ),
    )

    class Meta:
        ordering = ["core_percent", "name"]
        constraints = [
            models.UniqueConstraint(fields=["institution", "slug"], name="template_unique_slug"),
            models.CheckConstraint(
                condition=Q(share_policy="elastic", core_percent__gte=1, core_percent__lte=100)
                | Q(share_policy="best-effort", core_percent=0),
                name="template_core_percent_range",
            ),
            models.CheckConstraint(condition=Q(memory_mib__gte=MEMORY_GRANULE_MIB), name="template_memory_positive"),
            models.CheckConstraint(
                condition=Exact(Mod("memory_mib", MEMORY_GRANULE_MIB), 0), name="template_memory_128mib_multiple"
            ),
            models.CheckConstraint(condition=Q(kind__in=["jupyter", "vllm"]), name="template_kind_valid"),
            models.CheckConstraint(
                condition=Q(card_count=1) | Q(card_count__gte=2, card_count__lte=WHOLE_CARDS_MAX, core_percent=100),
                name="template_whole_cards_take_all_core",
            ),
            models.CheckConstraint(
                condition=~Q(image=""),
                name="template_image_given",
                violation_error_message=IMAGE_NEEDED,
            ),
            models.CheckConstraint(condition=Q(scenario__in=["development", "inference"]), name="template_scenario_valid"),
            models.CheckConstraint(
                condition=Q(idle_timeout_minutes__gte=1, max_lifetime_minutes__gte=1), name="template_minutes_positive"
            ),
            models.CheckConstraint(
                condition=Q(
                    cpu_request_millicores__gte=1,
                    cpu_limit_millicores__gte=F("cpu_request_millicores"),
                    host_memory_request_mib__gte=1,
                    host_memory_limit_mib__gte=F("host_memory_request_mib"),
                    ephemeral_storage_mib__gte=1,
                ),
                name="template_host_limits_cover_requests",
            ),
        ]

    def __str__(self) -> str:
        if self.card_count > 1:
            return f"{self.name} ({self.card_count} whole cards)"
        core = "best effort" if self.share_policy == SharePolicy.BEST_EFFORT else f"{self.core_percent} %"
        return f"{self.name} ({core}, {self.memory_mib // 1024} GiB)"

    @property
    def core_percent_total(self) -> int:
        """AI Core (percent of one card) an instance holds: the share, or 100 x cards on whole cards."""
        return self.core_percent * self.card_count

    @property
    def memory_mib_total(self) -> int:
        """NPU memory (MiB) an instance holds: the cap, or every card's whole memory on whole cards."""
        return self.memory_mib * self.card_count

    def clean(self) -> None:
        """An image to run; a vLLM lab runs ``vllm serve``; host limits at least the requests, requests
        within what the largest node offers lab sessions."""
        super().clean()
        if not self.image:
            raise ValidationError({"image": IMAGE_NEEDED})
        if not isinstance(self.command, list) or not all(isinstance(part, str) for part in self.command):
            raise ValidationError({"command": _("The command must be a list of strings.")})
        self._clean_share_policy()
        if self.kind == self.Kind.VLLM and not launches_vllm_serve(self.command):
            raise ValidationError(
                {
                    "command": _(
                        "A vLLM lab must be launched with “vllm serve MODEL” (or an empty command): "
                        "“python -m vllm.entrypoints.openai.api_server” ignores the model and serves its default one."
                    )
                }
            )
        errors: dict[str, str] = {}
        cpu_request, cpu_limit = self.cpu_request_millicores, self.cpu_limit_millicores
        mib_request, mib_limit = self.host_memory_request_mib, self.host_memory_limit_mib
        if cpu_request and cpu_limit and cpu_limit < cpu_request:
            errors["cpu_limit_millicores"] = gettext("The CPU limit (%(limit)s) must be at least the request (%(request)s).") % {
                "limit": cores_words(cpu_limit),
                "request": cores_words(cpu_request),
            }
        if mib_request and mib_limit and mib_limit < mib_request:
            errors["host_memory_limit_mib"] = gettext(
                "The memory limit (%(limit)s) must be at least the request (%(request)s)."
            ) % {"limit": gib_words(mib_limit), "request": gib_words(mib_request)}
        if self.card_count and self.card_count > 1:
            errors.update(self._whole_card_errors())
        largest_cpu, largest_mib = Node.objects.largest_host()
        if largest_cpu is not None and cpu_request and cpu_request > largest_cpu:
            errors["cpu_request_millicores"] = gettext(
                "No node can give %(request)s of CPU; the largest has %(largest)s for lab sessions."
            ) % {"request": cores_words(cpu_request), "largest": cores_words(largest_cpu)}
        if largest_mib is not None and mib_request and mib_request > largest_mib:
            errors["host_memory_request_mib"] = gettext(
                "No node can give %(request)s of memory; the largest has %(largest)s for lab sessions."
            ) % {"request": gib_words(mib_request), "largest": gib_words(largest_mib)}
        if errors:
            raise ValidationError(errors)

    def _whole_card_errors(self) -> dict[str, str]:
        """What stops ``card_count`` whole cards: a core other than 100 %, a memory that is not a
        card's whole memory, more cards than any node has (each only where the cluster is known)."""
        errors: dict[str, str] = {}
        n = self.card_count
        if self.core_percent is not None and self.core_percent != 100:
            errors["core_percent"] = gettext(
                "A lab on %(cards)s whole cards has all of each card's AI Core: set 100 %%, not %(core)s %%."
            ) % {"cards": n, "core": self.core_percent}
        most_cards, sizes_mib = Card.objects.whole_card_facts()
        if most_cards and n > most_cards:
            errors["card_count"] = gettext(
                "No node has %(cards)s cards; the largest has %(most)s, and whole cards must be on one node."
            ) % {"cards": n, "most": most_cards}
        if sizes_mib and self.memory_mib is not None and self.memory_mib not in sizes_mib:
            errors["memory_mib"] = gettext(
                "A lab on whole cards has each card's whole memory: %(sizes)s, not %(memory)s."
            ) % {"sizes": ", ".join(gib_words(size) for size in sizes_mib), "memory": gib_words(self.memory_mib)}
        return errors

    def _clean_share_policy(self) -> None:
        """A best-effort template has core 0 and needs nodes that run best-effort instances; any other, a floor."""
        if self.share_policy != SharePolicy.BEST_EFFORT:
            if self.core_percent == 0:  # None: a form that checks the rest of the template
                raise ValidationError({"core_percent": gettext("An AI Core floor from 1 to 100 is needed; 0 means best effort.")})
            return
        if self.core_percent:
            raise ValidationError({"core_percent": gettext("A best-effort instance has no AI Core floor: set it to 0.")})
        if get_driver().best_effort_nodes() is None:
            raise ValidationError(
                {
                    "share_policy": gettext(
                        "This cluster cannot run best-effort instances: only openFuyao vNPU in soft mode has them "
                        "(FlexNPU and HAMi shares always have an AI Core floor)."
                    )
                }
            )
