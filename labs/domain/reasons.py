"""Why a session waits, failed or changed: a code with parameters, put into words when shown.

The engine and the services return and store a ``Reason`` (``code`` + ``params``), never a
sentence. A page renders it in the reader's language at display time: ``reason.render(gettext)``
looks the code's message up in ``MESSAGES`` and translates it before filling in the parameters;
``str(reason)`` is the English text (logs, the admin, tests).

Messages are marked with ``gettext_noop`` so that Django's ``makemessages`` extracts them into
the catalogues, although this module imports nothing from Django. Parameters are ints, strings
or another ``Reason`` (rendered in the same language), so a reason can carry its cause.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from decimal import ROUND_HALF_UP, Decimal
from typing import Any, Union


def gettext_noop(message: str) -> str:
    """Marks ``message`` for translation; the translation happens when a reason is rendered."""
    return message


MESSAGES: dict[str, str] = {
    # -- the session's own life (labs/services) ---------------------------------------------------
    "session.queued": gettext_noop("waiting for the allocation pass"),
    "session.requesting": gettext_noop("requesting an NPU instance"),
    "session.starting": gettext_noop("starting"),
    "session.create_retry": gettext_noop("the cluster did not create the instance (try %(attempt)s of %(attempts)s): %(error)s"),
    "session.create_failed": gettext_noop("could not start: %(error)s"),
    "session.spawn_timeout": gettext_noop("did not start within %(seconds)s s"),
    # A starting lab's container ended and the platform starts it again: normal while many
    # FlexNPU instances are created at once, within ``LAB_START_RESTARTS`` (``limit``).
    "session.start_restarting": gettext_noop("restarting while the NPU initialises (%(restart)s of %(limit)s)"),
    "session.start_restarts_exceeded": gettext_noop(
        "the lab kept restarting while starting (restart %(restarts)s, %(limit)s allowed); it last ended with %(cause)s"
    ),
    # A running lab's container ended and the platform started it again (``cause``: why it ended).
    "session.restarted": gettext_noop("the lab restarted after %(cause)s (restart %(restarts)s)"),
    "session.restarted_unknown": gettext_noop("the lab restarted (restart %(restarts)s)"),
    # A node restarted (its boot id changed): the CCE FlexNPU guide says its NPU pods may show
    # failed until the NPUs are reported again, and that this is normal (``LAB_REBOOT_DEVICE_WAIT``).
    "session.node_restart_waiting": gettext_noop("waiting for the NPU to come back after a node restart"),
    "session.node_restart_relaunching": gettext_noop("the node restarted; starting your lab again"),
    "session.node_restarted": gettext_noop("the node restarted; your lab was restarted"),
    "session.node_restart_no_npu": gettext_noop(
        "the node restarted and its NPUs did not come back within %(seconds)s s"
    ),
    "session.vanished": gettext_noop("the lab's instance disappeared from the cluster"),
    "session.vanished_before_start": gettext_noop("the instance disappeared before it started"),
    "session.cluster_unreachable": gettext_noop("waiting for the cluster: %(error)s"),
    # A cluster's own words and nothing else to say (a driver's reason otherwise has a ``driver.*`` code).
    "session.driver": gettext_noop("%(message)s"),
    "session.stopped_by": gettext_noop("stopped by %(who)s"),
    "session.lifetime": gettext_noop("reached the %(minutes)s-minute limit"),
    "session.portal_shutdown": gettext_noop("the portal was shut down"),
    "session.course_archived": gettext_noop("stopped: %(course)s was archived at the end of its term"),
    "session.reclaim_warned": gettext_noop(
        "this lab runs on capacity borrowed from another course, which now needs it for a session of %(course)s: "
        "it stops at the time shown; save your work"
    ),
    "session.reclaimed": gettext_noop("stopped: the capacity it borrowed was needed for a session of %(course)s"),
    # The operator empties the lab's node for maintenance (an NPU plugin upgrade): ``time`` is the
    # deadline, HH:MM in the portal's time zone (labs.services.evacuation).
    "session.evacuation_warned": gettext_noop(
        "the server this lab runs on is being emptied for maintenance: the lab stops at %(time)s; save your work"
    ),
    "session.evacuated": gettext_noop("stopped: node emptied for maintenance"),
    "session.evacuation_moved": gettext_noop(
        "stopped: pre-started for a class on a node emptied for maintenance; started again on another node"
    ),
    "session.idle_warning": gettext_noop(
        "no activity for %(minutes)s minutes: this lab stops at the time shown unless you keep it running"
    ),
    "session.idle_culled": gettext_noop("stopped after %(minutes)s minutes without activity"),
    # ``grace``: a ``duration`` (``LAB_BUDGET_GRACE_SECONDS``); ``time``: the stop, HH:MM in the portal's time zone.
    "session.budget_warning": gettext_noop(
        "over %(percent)s %% of your weekly NPU budget in %(course)s is used; at 100 %% your labs stop %(grace)s later"
    ),
    "session.budget_used_up": gettext_noop(
        "your weekly NPU budget in %(course)s is used up: this lab stops at %(time)s, %(grace)s after the budget was "
        "used up; save your work"
    ),
    "session.budget_stopped": gettext_noop("stopped: your weekly NPU budget in %(course)s was used up"),
    "session.reservation_unclaimed": gettext_noop(
        "stopped: pre-started for the class at %(time)s and not claimed by a student within %(minutes)s minutes"
    ),
    "session.reservation_cancelled": gettext_noop("stopped: the class reservation it was pre-started for was cancelled"),
    # The student took the smaller lab offered while this one waited for capacity (labs.domain.offers).
    "session.switched_smaller": gettext_noop("withdrawn: you switched to the smaller lab %(template)s"),
    "session.stop_retry": gettext_noop("stopping: the cluster has not removed the instance yet (%(error)s)"),
    # -- what a cluster driver reports of an instance (labs/drivers: ``Observed.reason``) ---------------
    # ``detail``, ``output`` and a Kubernetes ``reason`` are the platform's own words, passed on as they are.
    "driver.with_detail": gettext_noop("%(reason)s (%(detail)s)"),
    "driver.with_output": gettext_noop("%(reason)s: %(output)s"),
    "driver.simulated_starting": gettext_noop("starting (simulated)"),
    "driver.simulated_died": gettext_noop("the instance died (simulated)"),
    "driver.jupyterlab_starting": gettext_noop("starting JupyterLab"),
    "driver.jupyterlab_exited": gettext_noop("JupyterLab exited"),
    "driver.jupyterlab_exit_code": gettext_noop("JupyterLab exited with code %(exit_code)s"),
    "driver.jupyterlab_killed": gettext_noop("JupyterLab was killed by %(signal)s"),
    "driver.waiting_to_be_scheduled": gettext_noop("waiting to be scheduled"),
    "driver.waiting_to_be_scheduled_because": gettext_noop("waiting to be scheduled: %(detail)s"),
    "driver.waiting_for_npu": gettext_noop("waiting for an NPU: %(detail)s"),
    "driver.waiting_for_npu_no_room": gettext_noop("waiting for an NPU: no node has room"),
    "driver.starting_container": gettext_noop("starting container"),
    "driver.waiting_for_answer": gettext_noop("starting: waiting for the lab to answer"),
    "driver.start_timeout": gettext_noop("the lab did not start within %(seconds)s s (%(cause)s)"),
    "driver.image_pull_failed": gettext_noop("image pull failed: %(detail)s"),
    "driver.container_not_started": gettext_noop("the container could not start: %(detail)s"),
    "driver.being_stopped": gettext_noop("the lab is being stopped"),
    "driver.node_lost": gettext_noop("the server %(node)s stopped answering, and the lab on it was ended"),
    "driver.lab_stopped": gettext_noop("the lab stopped: %(cause)s"),
    "driver.container_exit": gettext_noop("%(reason)s, exit code %(exit_code)s"),
    "driver.container_exit_code": gettext_noop("exit code %(exit_code)s"),
    "driver.pod_completed": gettext_noop("completed"),
    "driver.pod_failed": gettext_noop("failed"),
    # vLLM's own log says why (labs/domain/vllm.py); the advice is the FlexNPU user guide's 常见问题.
    "vllm.alloc_sq_cq_fail": gettext_noop(
        "vLLM could not get an NPU stream (“Alloc sq cq fail”, %(cause)s): the card's streams are used up. "
        "The vendor advises a lower --max-num-batched-tokens (this lab ran with %(tokens)s) in the template's "
        "arguments and, if that is not enough, --enforce-eager (single-operator mode instead of ACL graphs)"
    ),
    "vllm.alloc_sq_cq_fail_eager": gettext_noop(
        "vLLM could not get an NPU stream (“Alloc sq cq fail”, %(cause)s): the card's streams are used up. "
        "The vendor advises a lower --max-num-batched-tokens (this lab ran with %(tokens)s, already in eager mode) "
        "in the template's arguments"
    ),
    "vllm.alloc_sq_cq_fail_default": gettext_noop(
        "vLLM could not get an NPU stream (“Alloc sq cq fail”, %(cause)s): the card's streams are used up. "
        "The vendor advises a lower --max-num-batched-tokens in the template's arguments and, if that is not enough, "
        "--enforce-eager (single-operator mode instead of ACL graphs)"
    ),
    # -- admission and placement (labs/domain) ------------------------------------------------------
    # what the request itself asks for: refused, it can never be placed as asked
    "core.range": gettext_noop("core: %(core_percent)s %% is outside 1..%(max_percent)s %%"),
    "core.best_effort_floor": gettext_noop("core: a best-effort instance has no floor; its core percent must be 0"),
    "memory.granule": gettext_noop("memory: %(memory_mib)s is not a positive multiple of %(granule_mib)s"),
    "memory.granularity": gettext_noop(
        "memory granularity: %(memory_mib)s is not a multiple of the %(step_mib)s the nodes allocate in"
    ),
    "template.not_offered": gettext_noop("template: the course does not offer this template"),
    "whole_cards.core": gettext_noop("whole cards: %(cards)s cards need core %(need_percent)s %%, not %(core_percent)s %%"),
    "whole_cards.node_size": gettext_noop("whole cards: needs %(cards)s cards on one node; the largest node has %(most)s"),
    "whole_cards.free": gettext_noop(
        "whole cards: needs %(cards)s free cards on one node; the most on a node is %(free)s (node %(node)s)"
    ),
    # the course's quota: guarantee, ceiling, borrowing within the cohort
    "quota.missing": gettext_noop("course quota: the course has no quota; ask the instructor to set one"),
    "quota.ceiling_instances": gettext_noop("course quota: the course's guarantee allows no instances"),
    "quota.ceiling_core": gettext_noop("course quota: needs %(need)s %% core; the course can hold at most %(limit)s %%"),
    "quota.ceiling_memory": gettext_noop("course quota: needs %(need_mib)s; the course can hold at most %(limit_mib)s"),
    "quota.host_memory_cap": gettext_noop(
        "course quota: needs %(need_mib)s of host memory; the course can hold at most %(limit_mib)s"
    ),
    "quota.host_cpu_cap": gettext_noop(
        "course quota: needs %(need_millicores)s of host CPU; the course can hold at most %(limit_millicores)s"
    ),
    "quota.host_memory": gettext_noop("course quota: host memory: %(used)s of %(limit)s in use; needs %(need)s more"),
    "quota.host_cpu": gettext_noop("course quota: host CPU: %(used)s of %(limit)s in use; needs %(need)s more"),
    "quota.instances": gettext_noop("course quota: %(used)s of %(limit)s instances in use"),
    "quota.core": gettext_noop("course quota: %(used)s of %(limit)s %% core in use; needs %(need)s %% more"),
    "quota.memory": gettext_noop("course quota: NPU memory: %(used)s of %(limit)s in use; needs %(need)s more"),
    "quota.borrowing_limit_instances": gettext_noop(
        "course quota: %(used)s instances in use of a guarantee of %(guarantee)s plus a borrowing limit of %(limit)s; "
        "needs %(need)s more"
    ),
    "quota.borrowing_limit_core": gettext_noop(
        "course quota: %(used)s %% core in use of a guarantee of %(guarantee)s plus a borrowing limit of %(limit)s; "
        "needs %(need)s more"
    ),
    "quota.borrowing_limit_memory": gettext_noop(
        "course quota: NPU memory: %(used)s in use of a guarantee of %(guarantee)s plus a borrowing limit of %(limit)s; "
        "needs %(need)s more"
    ),
    "cohort.instances": gettext_noop(
        "cohort %(cohort)s: needs %(over)s instances beyond the course's guarantee; %(idle)s instances are idle and lendable"
    ),
    "cohort.core": gettext_noop(
        "cohort %(cohort)s: needs %(over)s %% core beyond the course's guarantee; %(idle)s %% core is idle and lendable"
    ),
    "cohort.memory": gettext_noop(
        "cohort %(cohort)s: needs %(over)s of NPU memory beyond the course's guarantee; %(idle)s is idle and lendable"
    ),
    "student.limit": gettext_noop("student limit: %(held)s of %(limit)s concurrent sessions in use"),
    # the cluster: nodes and cards, now
    "capacity.no_cards": gettext_noop("capacity: the cluster has no NPU cards"),
    "capacity.no_healthy_card": gettext_noop("capacity: no healthy NPU card is available"),
    # Every node that could take the lab is drained by an operator (labs.services.operations,
    # labs.services.evacuation): nothing is wrong with the request or the cards.
    "capacity.maintenance": gettext_noop("the NPU servers are closed for maintenance"),
    "capacity.no_single_card": gettext_noop(
        "capacity: no single card has both %(core_percent)s %% core and %(memory_mib)s free"
    ),
    "node.selector": gettext_noop("node selector: no available node has the labels %(labels)s"),
    "node.instances_cap": gettext_noop("node instances: every available node holds its maximum of %(cap)s instances (%(nodes)s)"),
    "node.instances_caps": gettext_noop(
        "node instances: every available node holds its maximum of instances, %(inference_cap)s with an inference "
        "instance and %(development_cap)s without (%(nodes)s)"
    ),
    "node.instances_room": gettext_noop(
        "node instances: no available node has room for %(cards)s more instances under its maximum (%(nodes)s)"
    ),
    "node.host_memory": gettext_noop("node memory: needs %(need_mib)s; the most free is %(best_free_mib)s on %(node)s"),
    "node.host_cpu": gettext_noop(
        "node CPU: needs %(need_millicores)s; the most free is %(best_free_millicores)s on %(node)s"
    ),
    "node.host_memory_too_small": gettext_noop(
        "node memory: needs %(need_mib)s; the largest node has %(largest_mib)s for lab sessions"
    ),
    "node.host_cpu_too_small": gettext_noop(
        "node CPU: needs %(need_millicores)s; the largest node has %(largest_millicores)s for lab sessions"
    ),
    "card.pinned_missing": gettext_noop("pinned card: no available node has a card with die id %(die_id)s"),
    "card.pinned_unhealthy": gettext_noop(
        "pinned card: the card with die id %(die_id)s (node %(node)s, card %(card)s) is unhealthy"
    ),
    "card.too_small": gettext_noop("card memory: needs %(need_mib)s; the largest card has %(largest_mib)s"),
    "card.instances_cap": gettext_noop("card instances: every healthy card holds its maximum of %(cap)s instances"),
    "card.instances_caps": gettext_noop(
        "card instances: every healthy card holds its maximum of instances, %(inference_cap)s with an inference "
        "instance and %(development_cap)s without"
    ),
    "card.core": gettext_noop(
        "card core: needs %(need_percent)s %%; the most free on a healthy card is %(best_free_percent)s %% "
        "(node %(node)s, card %(card)s)"
    ),
    "card.memory": gettext_noop(
        "card memory: needs %(need_mib)s; the most free on a healthy card is %(best_free_mib)s "
        "(node %(node)s, card %(card)s)"
    ),
    # reclaim: the course is within its guarantee and other courses' borrowed sessions stand in the way
    "reclaim.possible": gettext_noop(
        "%(reason)s; %(victims)s borrowed session(s) of other courses can be reclaimed to make room"
    ),
    # what the waiting student reads once the victims are warned: when the room comes back
    "reclaim.returning": gettext_noop("capacity is being returned from another course: about %(minutes)s min"),
    # fragmentation: why free capacity on a card is usable by nobody
    "stranded.card_full": gettext_noop("holds its maximum of %(cap)s instances"),
    "stranded.memory_step": gettext_noop("has %(free_mib)s free, less than one %(step_mib)s step"),
    "stranded.node_full": gettext_noop("its node holds its maximum of instances"),
    # -- why a node takes no placements: its device profile's preconditions (labs/domain/readiness.py) ----
    "readiness.vnpu_label": gettext_noop(
        "not ready for vNPU: the node lacks the label %(label)s, which the openFuyao vNPU components are deployed by"
    ),
    "readiness.device_share_off": gettext_noop(
        "not ready for vNPU: device-share mode is off on a chip (npu-smi set -t device-share -i <id> -d 1)"
    ),
    "readiness.resource_missing": gettext_noop(
        "not ready for %(profile)s: the node advertises no %(resource)s (the device plugin has not registered it)"
    ),
    "readiness.chip_unsupported": gettext_noop("not ready for %(profile)s: the %(chip)s chip is not supported (%(supported)s)"),
    "readiness.driver_too_old": gettext_noop(
        "not ready for %(profile)s: the NPU driver (HDK) is %(version)s; %(minimum)s or newer is needed"
    ),
    "readiness.driver_unreadable": gettext_noop(
        "not ready for %(profile)s: the NPU driver version %(version)s cannot be compared with %(minimum)s"
    ),
    "readiness.node_missing": gettext_noop("not ready: the cluster has no node named %(node)s"),
    # -- parts of other reasons ------------------------------------------------------------------------
    "duration.minutes": gettext_noop("%(minutes)s min"),
    "duration.seconds": gettext_noop("%(seconds)s s"),
    # An amount of ``AMOUNTS``, in the unit the portal's pages show: ``gib``/``cores`` is the
    # figure ("1.5", "190"), already rounded.
    "amount.gib": gettext_noop("%(gib)s GiB"),
    "amount.core": gettext_noop("%(cores)s core"),
    "amount.cores": gettext_noop("%(cores)s cores"),
}

MIB = "MiB"
MILLICORES = "millicores"

# The parameters that are amounts, by code: stored as ints in Kubernetes' units (MiB, millicores),
# shown with their unit in the pages' (GiB, cores) when the reason is rendered, so a message
# writes ``%(need_mib)s``, not ``%(need_mib)s MiB``, and reasons stored before still read right.
AMOUNTS: dict[str, dict[str, str]] = {
    "memory.granule": {"memory_mib": MIB, "granule_mib": MIB},
    "memory.granularity": {"memory_mib": MIB, "step_mib": MIB},
    "quota.ceiling_memory": {"need_mib": MIB, "limit_mib": MIB},
    "quota.host_memory_cap": {"need_mib": MIB, "limit_mib": MIB},
    "quota.host_cpu_cap": {"need_millicores": MILLICORES, "limit_millicores": MILLICORES},
    "quota.host_memory": {"used": MIB, "limit": MIB, "need": MIB},
    "quota.host_cpu": {"used": MILLICORES, "limit": MILLICORES, "need": MILLICORES},
    "quota.memory": {"used": MIB, "limit": MIB, "need": MIB},
    "quota.borrowing_limit_memory": {"used": MIB, "guarantee": MIB, "limit": MIB, "need": MIB},
    "cohort.memory": {"over": MIB, "idle": MIB},
    "capacity.no_single_card": {"memory_mib": MIB},
    "node.host_memory": {"need_mib": MIB, "best_free_mib": MIB},
    "node.host_cpu": {"need_millicores": MILLICORES, "best_free_millicores": MILLICORES},
    "node.host_memory_too_small": {"need_mib": MIB, "largest_mib": MIB},
    "node.host_cpu_too_small": {"need_millicores": MILLICORES, "largest_millicores": MILLICORES},
    "card.too_small": {"need_mib": MIB, "largest_mib": MIB},
    "card.memory": {"need_mib": MIB, "best_free_mib": MIB},
    "stranded.memory_step": {"free_mib": MIB, "step_mib": MIB},
}

ParamValue = Union[int, str, "Reason"]


def _figure(value: Decimal) -> str:
    """``value`` to at most three decimals, without trailing zeros: "1.5", "190", "0.125"."""
    text = f"{value.quantize(Decimal('0.001'), rounding=ROUND_HALF_UP):f}"
    return text.rstrip("0").rstrip(".") if "." in text else text


def amount(value: int, unit: str) -> Reason:
    """An amount in the unit the pages show: MiB as GiB ("1.5 GiB"), millicores as cores ("190 cores")."""
    if unit == MIB:
        return Reason.of("amount.gib", gib=_figure(Decimal(value) / 1024))
    if unit == MILLICORES:
        cores = _figure(Decimal(value) / 1000)
        return Reason.of("amount.core" if cores == "1" else "amount.cores", cores=cores)
    raise ValueError(f"amount: unknown unit {unit!r}")


def duration(seconds: int) -> Reason:
    """A length of time as a reason's parameter: "5 min" for whole minutes, "90 s" otherwise."""
    if not isinstance(seconds, int) or isinstance(seconds, bool) or seconds < 0:
        raise ValueError(f"duration: seconds must be a non-negative int, not {seconds!r}")
    if seconds >= 60 and seconds % 60 == 0:
        return Reason.of("duration.minutes", minutes=seconds // 60)
    return Reason.of("duration.seconds", seconds=seconds)


@dataclass(frozen=True, slots=True)
class Reason:
    """A code from ``MESSAGES`` and its parameters (sorted ``(name, value)`` pairs)."""

    code: str
    params: tuple[tuple[str, ParamValue], ...] = ()

    def __post_init__(self) -> None:
        if self.code not in MESSAGES:
            raise ValueError(f"unknown reason code {self.code!r}")
        for name, value in self.params:
            if isinstance(value, bool) or not isinstance(value, int | str | Reason):
                raise TypeError(f"reason {self.code}: parameter {name} must be an int, a str or a Reason, not {value!r}")

    @classmethod
    def of(cls, code: str, **params: ParamValue) -> Reason:
        return cls(code, tuple(sorted(params.items())))

    @property
    def kwargs(self) -> dict[str, ParamValue]:
        return dict(self.params)

    def render(self, translate: Callable[[str], str] = gettext_noop) -> str:
        """The reason in words: ``translate`` is ``gettext`` for the reader's language."""
        units = AMOUNTS.get(self.code, {})
        values = {}
        for name, value in self.params:
            if name in units and isinstance(value, int):
                value = amount(value, units[name])
            values[name] = value.render(translate) if isinstance(value, Reason) else value
        return translate(MESSAGES[self.code]) % values

    def __str__(self) -> str:
        return self.render()

    def to_json(self) -> dict[str, Any]:
        return {
            "code": self.code,
            "params": {name: value.to_json() if isinstance(value, Reason) else value for name, value in self.params},
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any] | None) -> Reason | None:
        """The reason stored by ``to_json``; ``None`` for an empty value. Unknown codes raise ``ValueError``."""
        if not data:
            return None
        params = {
            name: cls.from_json(value) if isinstance(value, Mapping) else value
            for name, value in (data.get("params") or {}).items()
        }
        return cls.of(data["code"], **params)
