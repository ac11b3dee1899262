import uuid

from django.conf import settings
from django.db import models
from django.db.models import F, Q
from django.db.models.functions import Mod
from django.db.models.lookups import Exact
from django.utils.translation import gettext
from django.utils.translation import gettext_lazy as _

from labs.domain.reasons import Reason
from labs.domain.states import HOLDS_ALLOCATION, POLICY_STOPS, TERMINAL, SessionState
from labs.domain.units import MEMORY_GRANULE_MIB


class LabSession(models.Model):
    """One student's lab, bound to one FlexNPU instance while it runs.

    ``state`` only changes through ``labs.services.sessions.session_transition``; ``version``
    grows by one with every change so that pages can drop stale websocket events.
    """

    class State(models.TextChoices):
        QUEUED = SessionState.QUEUED.value, _("queued")
        ADMITTED = SessionState.ADMITTED.value, _("admitted")
        STARTING = SessionState.STARTING.value, _("starting")
        RUNNING = SessionState.RUNNING.value, _("running")
        STOPPING = SessionState.STOPPING.value, _("stopping")
        STOPPED = SessionState.STOPPED.value, _("stopped")
        FAILED = SessionState.FAILED.value, _("failed")

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    student = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="lab_sessions")
    course = models.ForeignKey("labs.Course", on_delete=models.PROTECT, related_name="sessions")
    template = models.ForeignKey("labs.LabTemplate", on_delete=models.PROTECT, related_name="sessions")
    state = models.CharField(_("state"), max_length=16, choices=State.choices, default=State.QUEUED)
    # Where a stopping session ends: stopped, or failed when it stops because something broke.
    end_state = models.CharField(max_length=16, choices=[("stopped", _("stopped")), ("failed", _("failed"))], blank=True)
    # Why the session is where it is, as a code and parameters (labs.domain.reasons); pages
    # render it in the reader's language (``reason`` below).
    reason_code = models.CharField(_("reason"), max_length=64, blank=True)
    reason_params = models.JSONField(default=dict, blank=True)
    version = models.PositiveIntegerField(default=1)
    created_at = models.DateTimeField(_("launched"), auto_now_add=True)
    # Its place in the course's queue: the launch time, pushed back by the student's recent
    # usage (labs.domain.fairness). The allocation pass and the queue positions follow it.
    queue_at = models.DateTimeField(null=True, blank=True)
    admitted_at = models.DateTimeField(null=True, blank=True)
    started_at = models.DateTimeField(null=True, blank=True)
    running_at = models.DateTimeField(null=True, blank=True)
    stopping_at = models.DateTimeField(null=True, blank=True)
    ended_at = models.DateTimeField(null=True, blank=True)
    access_url = models.CharField(_("access URL"), max_length=500, blank=True)
    # The isolation self-test the lab ran at start (labs.services.selftest): the NPU memory it
    # could see, whether allocating past the cap succeeded (None: not probed), and the verdict.
    selftest_at = models.DateTimeField(_("isolation self-test at"), null=True, blank=True)
    selftest_visible_mib = models.PositiveBigIntegerField(_("NPU memory visible (MiB)"), null=True, blank=True)
    selftest_probe_exceeded = models.BooleanField(_("allocated past the cap"), null=True, blank=True)
    selftest_over_cap = models.BooleanField(_("isolation breached"), default=False)
    # The per-session secret: the Jupyter token or vLLM API key. Shown only to the student.
    secret = models.CharField(max_length=128, editable=False)
    # What the driver calls the instance (pod UID or local instance id): the FlexNPU entity-id.
    driver_ref = models.CharField(max_length=128, blank=True)
    # Failed requests to create the instance so far, and when the controller may try again.
    create_attempts = models.PositiveSmallIntegerField(default=0)
    retry_at = models.DateTimeField(null=True, blank=True)
    # The process whose create lease ``retry_at`` is (empty: a back-off, nobody's): a lease whose
    # holder stopped saying it is alive is over (labs.services.controller.creates).
    lease_holder = models.CharField(max_length=64, blank=True, default="", db_default="")
    # How many times the platform restarted the lab's instance, as the controller last recorded
    # it (when it came up, and at each restart of the running lab, which the student is told of).
    restarts = models.PositiveSmallIntegerField(default=0)
    # The restart of its node the session was caught in (that node's ``rebooted_at``), and the
    # instance a relaunch after it replaces (made again once that one is gone).
    reboot_at = models.DateTimeField(null=True, blank=True)
    replaced_ref = models.CharField(max_length=128, blank=True)
    # Borrowed capacity another course needs back: the session was warned and stops at this time
    # unless the need goes away first (labs.services.allocation._reclaim_follow).
    reclaim_at = models.DateTimeField(null=True, blank=True)
    # Extensions of its maximum length the student took (CourseQuota.extensions_allowed).
    extensions_used = models.PositiveSmallIntegerField(default=0)
    # The student's weekly budget is used up: the session stops at this time (labs.services.budgets).
    budget_stop_at = models.DateTimeField(null=True, blank=True)
    # Idle culling (labs.services.activity): the latest activity seen, the stop a warning named,
    # and what the last look needs to compare with (vLLM's finished-request counter).
    last_active_at = models.DateTimeField(null=True, blank=True)
    cull_at = models.DateTimeField(null=True, blank=True)
    activity = models.JSONField(default=dict, blank=True)
    # Pre-started for a class reservation (labs.services.reservations): owned by the
    # reservation's holder until a student of the course launches its template during the slot
    # and is handed it (``claimed_at``).
    reservation_slot = models.ForeignKey(
        "labs.ReservationSlot", null=True, blank=True, on_delete=models.PROTECT, related_name="sessions"
    )
    claimed_at = models.DateTimeField(null=True, blank=True)
    # Queued for capacity: the smaller template of the course the last allocation pass found would
    # start at once ({"template": id, "core_percent", "memory_mib", "cards"}); empty: none
    # (labs.domain.offers, written by labs.services.allocation).
    smaller_offer = models.JSONField(default=dict, db_default={}, blank=True)

    class Meta:
        ordering = ["-created_at"]
        indexes = [
            models.Index(fields=["state", "created_at"], name="session_state_created"),
            models.Index(fields=["state", "queue_at"], name="session_state_queue_at"),
            models.Index(fields=["student", "state"], name="session_student_state"),
            models.Index(fields=["course", "state"], name="session_course_state"),
            # Small: only sessions a policy stopped (the metrics count them by reason).
            models.Index(fields=["reason_code"], condition=Q(reason_code__in=POLICY_STOPS), name="session_policy_stops"),
            # Small: only labs pre-started for a class and not yet handed over, which every launch
            # looks for (``launch_facts``); without it the look read every open session of the course.
            models.Index(
                fields=["course", "template"],
                condition=Q(reservation_slot__isnull=False, claimed_at__isnull=True),
                name="session_prestarted_unclaimed",
            ),
        ]
        constraints = [
            models.CheckConstraint(condition=Q(state__in=[s.value for s in SessionState]), name="session_state_valid"),
            models.CheckConstraint(
                condition=~Q(state__in=[SessionState.STOPPED.value, SessionState.FAILED.value]) | Q(ended_at__isnull=False),
                name="session_terminal_has_end",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.student} {self.template.slug} {self.state}"

    @property
    def reason(self) -> str:
        """The reason in the active language (the reader's, in a request or a websocket consumer)."""
        return stored_reason_text(self.reason_code, self.reason_params)

    @property
    def is_terminal(self) -> bool:
        return self.state in TERMINAL

    @property
    def can_stop(self) -> bool:
        return self.state in {SessionState.QUEUED, SessionState.ADMITTED, SessionState.STARTING, SessionState.RUNNING}

    @property
    def holds_allocation(self) -> bool:
        return self.state in HOLDS_ALLOCATION


class Allocation(models.Model):
    """A reservation of part of one card for one session: the ledger's unit.

    Written by the allocation pass only; ``released_at`` is set exactly once, by a conditional
    UPDATE, when the session reaches a terminal state. Unreleased rows are the capacity in use.
    """

    session = models.OneToOneField(LabSession, on_delete=models.PROTECT, related_name="allocation")
    card = models.ForeignKey("labs.Card", on_delete=models.PROTECT, related_name="allocations")
    course = models.ForeignKey("labs.Course", on_delete=models.PROTECT, related_name="allocations")
    # On whole cards (``cards`` > 1): 100 x cards and the whole memory of every card, the
    # instance's charge; ``card`` is the first of them and ``more_cards`` the others, all on one node.
    core_percent = models.PositiveSmallIntegerField()
    memory_mib = models.PositiveIntegerField()
    cards = models.PositiveSmallIntegerField(default=1)
    more_cards = models.ManyToManyField("labs.Card", blank=True, related_name="whole_card_allocations")
    scenario = models.CharField(max_length=16)
    # Host CPU (millicores) and memory (MiB) the pod requests on its node (the template's, at admission).
    cpu_millicores = models.PositiveIntegerField(default=0)
    host_memory_mib = models.PositiveIntegerField(default=0)
    entity_id = models.CharField(max_length=128, blank=True)
    # Admitted on the cohort's idle quota beyond the course's guarantee: may be reclaimed.
    borrowed = models.BooleanField(default=False)
    created_at = models.DateTimeField(auto_now_add=True)
    released_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        indexes = [
            models.Index(fields=["card"], condition=Q(released_at__isnull=True), name="allocation_live_by_card"),
            models.Index(fields=["course"], condition=Q(released_at__isnull=True), name="allocation_live_by_course"),
        ]
        constraints = [
            # 0: a best-effort instance, which has no floor; on whole cards, 100 % of each card.
            models.CheckConstraint(
                condition=Q(cards=1, core_percent__gte=0, core_percent__lte=100) | Q(cards__gte=2, core_percent=F("cards") * 100),
                name="allocation_core_percent_range",
            ),
            models.CheckConstraint(condition=Q(memory_mib__gte=MEMORY_GRANULE_MIB), name="allocation_memory_positive"),
            models.CheckConstraint(
                condition=Exact(Mod("memory_mib", MEMORY_GRANULE_MIB), 0), name="allocation_memory_128mib_multiple"
            ),
            models.CheckConstraint(condition=Q(scenario__in=["development", "inference"]), name="allocation_scenario_valid"),
        ]

    def __str__(self) -> str:
        if self.cards > 1:
            return f"{self.cards} whole cards from {self.card}"
        return f"{self.core_percent} % / {self.memory_mib} MiB on {self.card}"

    @property
    def placement(self) -> str:
        """Where the instance runs, for people: node and card, or the node alone where nobody reports the card."""
        node = self.card.node
        if node.card_truth == node.CardTruth.NONE:
            return gettext("%(node)s / NPU picked by the device plugin") % {"node": node.name}
        if self.cards > 1:
            return gettext("%(node)s / %(cards)s whole NPUs from NPU %(index)s") % {
                "node": node.name,
                "cards": self.cards,
                "index": self.card.index,
            }
        return gettext("%(node)s / NPU %(index)s") % {"node": node.name, "index": self.card.index}


def stored_reason(code: str, params: dict | None) -> Reason | None:
    """The reason of a session's ``reason_code`` and ``reason_params`` (as stored, or as a payload carries them)."""
    try:
        return Reason.from_json({"code": code, "params": params}) if code else None
    except (ValueError, TypeError, KeyError):
        return None  # a code from a newer or older release: show nothing rather than fail the page


def stored_reason_text(code: str, params: dict | None) -> str:
    """``stored_reason`` in the active language; empty when there is none."""
    reason = stored_reason(code, params)
    return reason.render(gettext) if reason is not None else ""
