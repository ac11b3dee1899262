from django.conf import settings
from django.db import models
from django.db.models import Count, Q
from django.utils.translation import gettext_lazy as _

from labs.domain.placement import largest_limit
from labs.models.sessions import stored_reason_text


def node_allocatable(cpu_millicores: int | None, memory_mib: int | None) -> tuple[int | None, int | None]:
    """A node's host CPU (millicores) and memory (MiB) for lab sessions: what it reports minus
    ``LAB_NODE_RESERVE_*`` (never below 0); ``None`` where it reports nothing (not limited)."""
    cpu = None if cpu_millicores is None else max(0, cpu_millicores - settings.LAB_NODE_RESERVE_CPU_MILLICORES)
    mib = None if memory_mib is None else max(0, memory_mib - settings.LAB_NODE_RESERVE_MEMORY_MIB)
    return cpu, mib


# The two reads below are the model layer's own: ``LabTemplate.clean`` checks a template against
# them, and a model calls nothing above it (the placement engine's view is ``labs.selectors.capacity``).


class NodeQuerySet(models.QuerySet):
    def largest_host(self) -> tuple[int | None, int | None]:
        """The most host CPU (millicores) and memory (MiB) one node offers lab sessions; ``None`` for a
        resource some node does not report (it is not limited there) or when there is no node."""
        figures = [node_allocatable(cpu, mib) for cpu, mib in self.values_list("host_cpu_millicores", "host_memory_mib")]
        return largest_limit(cpu for cpu, _ in figures), largest_limit(mib for _, mib in figures)


class CardQuerySet(models.QuerySet):
    def whole_card_facts(self) -> tuple[int, tuple[int, ...]]:
        """The most usable cards one node has and the distinct memory sizes (MiB) of usable cards,
        smallest first: what a whole-card template can ask for. ``(0, ())`` with no cards."""
        usable = self.filter(healthy=True, disabled=False)
        per_node = usable.values("node_id").annotate(n=Count("id")).values_list("n", flat=True).order_by()
        sizes = usable.values_list("memory_mib", flat=True).distinct().order_by("memory_mib")
        return max(per_node, default=0), tuple(sizes)


class Node(models.Model):
    """An NPU server. ``available`` is false while its agent cannot be reached or it is drained."""

    name = models.CharField(_("name"), max_length=253, unique=True)
    available = models.BooleanField(_("available for new sessions"), default=True)
    labels = models.JSONField(_("labels"), default=dict, blank=True)
    # The node agent (python -m nodeagent); empty for a node the portal only knows from admin.
    agent_url = models.URLField(_("agent URL"), blank=True)
    last_seen_at = models.DateTimeField(_("agent last answered"), null=True, blank=True)
    unavailable_reason = models.CharField(_("why unavailable"), max_length=300, blank=True)
    # The device profile's memory step: 128 MiB for FlexNPU, 1024 MiB for openFuyao vNPU.
    memory_granule_mib = models.PositiveIntegerField(_("memory step (MiB)"), default=128)
    # Drained by an operator for maintenance: no new placements; running sessions go on. Kept
    # apart from ``available``, which the reconciler sets from the agent's answers.
    drained = models.BooleanField(_("drained"), default=False)
    drain_reason = models.CharField(_("why drained"), max_length=300, blank=True)
    drained_at = models.DateTimeField(_("drained at"), null=True, blank=True)
    # Being emptied for maintenance (labs.services.evacuation): drained, its students warned, and
    # what still runs there at this time is stopped. Cleared when the node is undrained.
    evacuate_at = models.DateTimeField(_("emptied by"), null=True, blank=True)
    # How many instances the node's agent listed at the last reconcile; empty until it reports.
    # A node is empty (safe to upgrade its NPU plugin) only when the ledger and the agent agree.
    instances_reported = models.PositiveIntegerField(_("instances the agent reports"), null=True, blank=True)

    # How the portal knows which card an instance really runs on (the driver says, at each
    # inventory sync): REPORTED (the agent lists each instance on its card and the ledger
    # follows), PINNED (the pod names the card) or NONE (neither: the device plugin picks the
    # card and nobody tells; the ledger's card is only a packing, checked against the memory
    # each card's agent reports in use, and pages show the node alone).
    class CardTruth(models.TextChoices):
        REPORTED = "reported", _("reported by the node")
        PINNED = "pinned", _("pinned in the pod")
        NONE = "none", _("chosen by the device plugin, not reported")

    card_truth = models.CharField(_("card truth"), max_length=8, choices=CardTruth.choices, default=CardTruth.REPORTED)
    # The host's CPU (millicores) and memory (MiB) as its agent (host CPU count and RAM) or the
    # Kubernetes node (``status.allocatable``) reports them; empty for an agent that reports
    # neither: then placement does not limit the node's host resources. Placement subtracts
    # ``LAB_NODE_RESERVE`` (the system and the FlexNPU daemon) from these figures.
    host_cpu_millicores = models.PositiveIntegerField(_("host CPU (millicores)"), null=True, blank=True)
    host_memory_mib = models.PositiveIntegerField(_("host memory (MiB)"), null=True, blank=True)
    # What the node runs, as its agent last read it (npu-smi's banner and board); empty for
    # one the agent cannot tell, or an agent that predates them.
    driver_version = models.CharField(_("NPU driver version"), max_length=64, blank=True)
    firmware_version = models.CharField(_("firmware version"), max_length=64, blank=True)
    npu_smi_version = models.CharField(_("npu-smi version"), max_length=64, blank=True)
    # The node's boot id as the cluster (the Kubernetes Node's ``status.nodeInfo.bootID``) and as
    # its agent last reported it (empty: never reported); each compared only with its own last
    # one. A new one means the node restarted: ``rebooted_at`` is when that was seen,
    # ``devices_back_at`` when its NPUs were reported again since (empty: not yet). Its labs wait
    # ``LAB_REBOOT_DEVICE_WAIT`` for them (labs.services.reboots, labs.domain.lifecycle).
    boot_id = models.CharField(_("boot id"), max_length=64, blank=True)
    agent_boot_id = models.CharField(_("boot id (agent)"), max_length=64, blank=True)
    rebooted_at = models.DateTimeField(_("restart seen at"), null=True, blank=True)
    devices_back_at = models.DateTimeField(_("NPUs reported again at"), null=True, blank=True)
    # Why the node does not meet its device profile's preconditions (labs.domain.readiness), as
    # a reason code and parameters; empty: ready. Set at each inventory sync; an unready node
    # takes no new placements, and its running sessions go on.
    readiness_code = models.CharField(_("why not ready"), max_length=64, blank=True)
    readiness_params = models.JSONField(default=dict, blank=True)

    objects = NodeQuerySet.as_manager()

    class Meta:
        ordering = ["name"]
        permissions = [("operate_platform", "Can run the platform: drain nodes, mark cards, see every institution")]
        constraints = [
            models.CheckConstraint(condition=Q(memory_granule_mib__in=[128, 1024]), name="node_memory_granule_known"),
            models.CheckConstraint(condition=Q(card_truth__in=["reported", "pinned", "none"]), name="node_card_truth_known"),
        ]

    def __str__(self) -> str:
        return self.name

    @property
    def ready(self) -> bool:
        return not self.readiness_code

    @property
    def readiness_reason(self) -> str:
        """Why the node is not ready, in the active language; empty when it is."""
        return stored_reason_text(self.readiness_code, self.readiness_params)


class Card(models.Model):
    node = models.ForeignKey(Node, on_delete=models.PROTECT, related_name="cards")
    index = models.PositiveSmallIntegerField(_("index"))
    die_id = models.CharField(_("die id"), max_length=128, blank=True)
    chip_type = models.CharField(_("chip type"), max_length=64, default="Ascend910B")
    memory_mib = models.PositiveIntegerField(_("usable memory (MiB)"))
    healthy = models.BooleanField(_("healthy"), default=True)
    # Device memory in use as the node's agent last measured it (npu-smi's HBM usage); empty
    # until an agent reports. Placement counts it only where the node's card truth is "none".
    memory_used_mib = models.PositiveIntegerField(_("memory in use (MiB)"), null=True, blank=True)
    # Temperature and power draw as npu-smi last read them; empty when not reported (NA).
    temperature_celsius = models.PositiveSmallIntegerField(_("temperature (°C)"), null=True, blank=True)
    power_milliwatts = models.PositiveIntegerField(_("power (mW)"), null=True, blank=True)
    # Marked unhealthy by an operator (whatever the agent says): no new placements on it.
    disabled = models.BooleanField(_("marked unhealthy by an operator"), default=False)
    disabled_reason = models.CharField(_("why marked unhealthy"), max_length=300, blank=True)
    # A session on this card saw more NPU memory than its cap (the isolation self-test): the
    # device plugin's isolation is in doubt until an operator clears it.
    isolation_suspect = models.BooleanField(_("isolation suspect"), default=False)

    objects = CardQuerySet.as_manager()

    class Meta:
        ordering = ["node__name", "index"]
        constraints = [
            models.UniqueConstraint(fields=["node", "index"], name="card_unique_index_per_node"),
            models.CheckConstraint(condition=Q(memory_mib__gt=0), name="card_memory_positive"),
        ]

    def __str__(self) -> str:
        return f"{self.node.name}/npu{self.index}"

    @property
    def power_watts(self) -> float | None:
        return None if self.power_milliwatts is None else self.power_milliwatts / 1000
