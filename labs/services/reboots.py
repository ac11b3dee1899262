"""Node restarts: a node's boot id as the platform and its agent report it, and its NPUs coming back.

The CCE FlexNPU guide: "节点意外重启后，NPU虚拟化Pod可能因NPU虚拟化资源上报延迟，显示为"执行失败"状态。
此为正常现象，可忽略该状态" (after an unexpected restart of a node, its NPU pods may show failed
because the NPU resources are reported late; this is normal, and the status may be ignored).

The portal records on each ``Node`` the boot id last reported by each source (the Kubernetes
Node's ``status.nodeInfo.bootID`` through the driver's ``nodes()``, and the node agent's
inventory, which reads the same ``/proc/sys/kernel/random/boot_id``). A different one means the node
restarted: ``rebooted_at`` is when that was seen, and ``devices_back_at`` when the node reported
its NPUs again since (the device plugin's resources allocatable again, or the agent's cards).
The lifecycle controller judges the labs on it from these (``labs.domain.lifecycle``). The first
boot id seen of a node is only recorded: nothing can be told from it.
"""

from __future__ import annotations

import logging
from datetime import datetime

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from labs.dispatch import controller_wake
from labs.drivers import DriverError, NodeBoot, get_driver
from labs.models import Node, RepairEvent

logger = logging.getLogger(__name__)


# Where a boot id comes from, and the Node field that keeps each source's last one: each is
# compared only with its own (a simulated agent and a simulated cluster need not agree).
BOOT_ID_FIELDS = {"cluster": "boot_id", "agent": "agent_boot_id"}


def node_boot_record(
    node_name: str,
    *,
    boot_id: str,
    npus_reported: bool,
    source: str = "cluster",
    now: datetime | None = None,
    wake: bool = True,
) -> bool:
    """Record what a node reports of its boot and NPUs (``source``: ``"cluster"``, the driver's
    ``nodes()``, or ``"agent"``); whether that changed its restart.

    A new boot id from a source (after a first one from it) is a restart: ``rebooted_at`` now,
    ``devices_back_at`` now too if the NPUs are already reported, else empty until a report with
    them. The other source seeing the same restart later (within ``LAB_REBOOT_DEVICE_WAIT`` of
    it) starts no second one. An empty boot id tells nothing of the boot. Each change is a
    ``RepairEvent`` and, with ``wake``, wakes the controller, in one transaction; a node the
    ledger does not know is left alone.
    """
    if source not in BOOT_ID_FIELDS:
        raise ValueError(f"source must be one of {sorted(BOOT_ID_FIELDS)}, not {source!r}")
    boot_field = BOOT_ID_FIELDS[source]
    now = now or timezone.now()
    with transaction.atomic():
        rows = Node.objects.select_for_update().filter(name=node_name)
        node = rows.only("pk", boot_field, "rebooted_at", "devices_back_at").first()
        if node is None:
            return False
        last = getattr(node, boot_field)
        fields: dict[str, object] = {}
        recent = node.rebooted_at is not None and (now - node.rebooted_at).total_seconds() <= settings.LAB_REBOOT_DEVICE_WAIT
        if boot_id and last != boot_id:
            fields[boot_field] = boot_id[:64]
            if last and not recent:
                fields.update(rebooted_at=now, devices_back_at=now if npus_reported else None)
                RepairEvent.objects.create(
                    kind=RepairEvent.Kind.NODE_REBOOTED,
                    node=node,
                    message=f"the node restarted (new boot id, from its {source}); "
                    + ("its NPUs are reported" if npus_reported else "its labs wait for its NPUs"),
                )
        if "rebooted_at" not in fields and node.rebooted_at is not None and node.devices_back_at is None and npus_reported:
            fields["devices_back_at"] = now
            waited = (now - node.rebooted_at).total_seconds()
            RepairEvent.objects.create(
                kind=RepairEvent.Kind.NODE_DEVICES_BACK,
                node=node,
                message=f"the node reports its NPUs again, {waited:.0f} s after its restart was seen",
            )
        if not fields:
            return False
        Node.objects.filter(pk=node.pk).update(**fields)
        restart = "rebooted_at" in fields or "devices_back_at" in fields
        if restart and wake:
            controller_wake()
        return restart


def nodes_observe(*, wake: bool = True) -> int:
    """Read every node's boot and NPUs from the cluster driver (``nodes()``) and record what
    changed; how many nodes' restarts changed. A driver that cannot be read changes nothing.
    ``wake``: wake the controller for a change (the controller's own look does not)."""
    try:
        boots = get_driver().nodes()
    except DriverError as exc:
        logger.warning("the nodes cannot be read from the cluster driver: %s", exc)
        return 0
    if not boots:
        return 0
    changed = 0
    # Only the nodes whose report differs from the ledger's are written: a thousand nodes are one read.
    for name, boot_id, rebooted, back in Node.objects.filter(name__in=list(boots)).values_list(
        "name", "boot_id", "rebooted_at", "devices_back_at"
    ):
        boot: NodeBoot = boots[name]
        new_boot = bool(boot.boot_id) and boot.boot_id != boot_id
        back_now = rebooted is not None and back is None and boot.npus_reported
        if not (new_boot or back_now):
            continue
        if node_boot_record(name, boot_id=boot.boot_id, npus_reported=boot.npus_reported, source="cluster", wake=wake):
            changed += 1
    return changed
