from django.conf import settings
from django.db import models
from django.utils.translation import gettext_lazy as _


class RepairEvent(models.Model):
    """Something the reconciler or the agent sync found and did, for operators to read."""

    class Kind(models.TextChoices):
        RESIDUAL_SEEN = "residual_seen", _("residual instance seen")
        RESIDUAL_UNREGISTERED = "residual_unregistered", _("residual instance unregistered")
        FOREIGN_INSTANCE = "foreign_instance", _("instance of another owner's pod, left alone")
        ORPHAN_DELETED = "orphan_deleted", _("instance without a session deleted")
        SESSION_BOUND = "session_bound", _("instance bound to its session")
        SESSION_FAILED = "session_failed", _("session failed: its instance vanished")
        NODE_UNAVAILABLE = "node_unavailable", _("node agent unreachable")
        NODE_AVAILABLE = "node_available", _("node agent reachable again")
        NODE_REBOOTED = "node_rebooted", _("node restarted")
        NODE_DEVICES_BACK = "node_devices_back", _("node reports its NPUs again after a restart")
        NODE_READINESS = "node_readiness", _("node readiness for its device profile changed")
        CARD_CHANGED = "card_changed", _("card inventory changed")
        CARD_REBOUND = "card_rebound", _("allocation moved to the card the node reports")
        CARD_TOTALS = "card_totals", _("card memory in use beyond the ledger")
        GUARANTEE_BREACH = "guarantee_breach", _("AI Core floor not delivered")
        RECLAIM_WARNED = "reclaim_warned", _("borrowed session warned of a reclaim")
        RECLAIM_WITHDRAWN = "reclaim_withdrawn", _("reclaim no longer needed")
        RECLAIMED = "reclaimed", _("borrowed session stopped for a guaranteed one")
        REPAIR_FAILED = "repair_failed", _("repair failed")
        ISOLATION_BREACH = "isolation_breach", _("a session saw more NPU memory than its cap")

    created_at = models.DateTimeField(auto_now_add=True, db_index=True)
    kind = models.CharField(max_length=32, choices=Kind.choices)
    node = models.ForeignKey("labs.Node", null=True, blank=True, on_delete=models.SET_NULL, related_name="repair_events")
    session = models.ForeignKey("labs.LabSession", null=True, blank=True, on_delete=models.SET_NULL, related_name="repair_events")
    entity_id = models.CharField(max_length=128, blank=True)
    message = models.CharField(max_length=500)

    class Meta:
        ordering = ["-created_at", "-id"]

    def __str__(self) -> str:
        return f"{self.created_at:%Y-%m-%d %H:%M:%S} {self.kind}: {self.message}"


class ResidualCandidate(models.Model):
    """An instance an agent reports whose pod exists nowhere (a residual by the FlexNPU guide), and since when.

    Only one seen for longer than the grace window is unregistered: a pod that has just
    started may be reported by the agent before the portal has recorded its UID.
    """

    node = models.ForeignKey("labs.Node", on_delete=models.CASCADE, related_name="residual_candidates")
    entity_id = models.CharField(max_length=128)
    first_seen_at = models.DateTimeField()

    class Meta:
        constraints = [models.UniqueConstraint(fields=["node", "entity_id"], name="residual_unique_per_node")]

    def __str__(self) -> str:
        return f"{self.entity_id} on node {self.node_id} since {self.first_seen_at:%H:%M:%S}"


class InstanceSample(models.Model):
    """One agent reading of an instance: its AI Core floor, delivered share and demand (simulated
    agents only; real nodes report none), and the device memory it has in use."""

    node = models.ForeignKey("labs.Node", on_delete=models.CASCADE, related_name="samples")
    entity_id = models.CharField(max_length=128)
    taken_at = models.DateTimeField()
    floor_percent = models.PositiveSmallIntegerField()
    demand_percent = models.PositiveSmallIntegerField(null=True, blank=True)
    delivered_percent = models.PositiveSmallIntegerField()
    memory_used_mib = models.PositiveIntegerField(null=True, blank=True)

    class Meta:
        indexes = [models.Index(fields=["node", "entity_id", "taken_at"], name="sample_node_entity_time")]

    def __str__(self) -> str:
        return f"{self.entity_id}: {self.delivered_percent} % of floor {self.floor_percent} %"


class AuditEvent(models.Model):
    """One change made through a console or the API: who, what, when, before and after. Never edited."""

    created_at = models.DateTimeField(auto_now_add=True, db_index=True)
    actor = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+")
    actor_name = models.CharField(max_length=150)  # kept when the account is deleted
    institution = models.ForeignKey("labs.Institution", null=True, blank=True, on_delete=models.SET_NULL, related_name="+")
    action = models.CharField(max_length=64, db_index=True)
    target = models.CharField(max_length=300)
    before = models.JSONField(default=dict, blank=True)
    after = models.JSONField(default=dict, blank=True)

    class Meta:
        ordering = ["-created_at", "-id"]

    def __str__(self) -> str:
        return f"{self.created_at:%Y-%m-%d %H:%M:%S} {self.actor_name} {self.action} {self.target}"
