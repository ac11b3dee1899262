"""A driver that runs nothing: instances are records in a state directory that "start" after a delay.

For tests and demos. Records live in ``state_dir`` so every process (web, Celery workers) sees
the same instances. Failures can be injected three ways:

* ``fail_images``: ``create`` for one of these images succeeds, then ``poll`` reports ``FAILED``
  with ``driver.image_pull_failed`` ("image pull failed: <image> (simulated)"), as a cluster
  does for a missing image;
* an image starting with ``"reject:"`` makes ``create`` itself raise ``DriverRefused``;
* ``create_failure_rate`` makes that share of ``create`` calls raise ``DriverError`` (a flaky
  cluster API), ``delete_failure_rate`` the same for ``delete``;
* an image starting with ``"leaky:"`` makes the instance's isolation self-test see the whole
  card instead of its cap (``simulated_selftest_mib``), as a device plugin that does not isolate;
* ``restart_fraction``: that share of instances restart once while starting, as FlexNPU pods do
  when a class's instances are created at once: ``start_delay_seconds`` after ``create`` the lab
  ends ("Error, exit code 1") and is started again, running another ``start_delay_seconds`` later;
* ``inject_restart(session_id, reason, exit_code)`` makes the lab end that way and start again
  (pending for ``start_delay_seconds``), as a kubelet restarts an OOM-killed container; from any
  process;
* ``access_url``: where a running instance says its lab is (``{session_id}`` is filled in); a
  bench points it at a stand-in lab server that answers the idle check's questions;
* ``inject_failure(session_id, message)`` makes a running or starting instance ``FAILED`` (with
  ``message`` as a platform's own words, or ``driver.simulated_died`` without one), and
  ``inject_card(session_id, index)`` moves it to another card, as a device plugin that chose
  another card than the ledger would show; both from any process;
* ``foreign_pod_add(node, name)`` puts a pod the portal did not make on a node (a researcher's
  job) and returns its UID, as an entity-id an agent may report; ``foreign_pod_remove(uid)``
  takes it away. ``pods_on(node)`` lists them beside the node's simulated labs, in any process;
* ``inject_reboot(node, devices_after_seconds, comes_back)`` restarts a node, as an unexpected
  reboot does: ``nodes()`` reports it with a new boot id and its NPUs unreported, and every lab
  on it fails (the kubelet's ``UnexpectedAdmissionError``: the device plugin has not reported the
  NPUs yet). ``devices_after_seconds`` later (``None``: never) the NPUs are reported again and,
  with ``comes_back``, the labs run again, one restart more; without, they stay failed (a bare pod
  on Kubernetes does) and only a new instance runs. From any process;
* ``node_status_set(node, status)`` gives a node a node object (its device profile, labels and
  registered resources), as a cluster whose device plugin is not installed, or whose node lacks
  the vNPU label, would hold it; without one, ``node_status`` is ``None`` as for no cluster;
* ``inject_api_faults(...)`` gives every driver on the state directory, in any process, other
  failure rates and create delay until ``clear_api_faults()`` (``make chaos`` opens a window of a
  flaky cluster API this way, without restarting the workers that read the settings).
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import tempfile
import time
import uuid
from collections.abc import Iterable
from pathlib import Path

from labs.domain.reasons import Reason
from labs.drivers.base import (
    ClusterDriver,
    DriverError,
    DriverRefused,
    LaunchSpec,
    NodeBoot,
    NodePod,
    NodeStatus,
    Observed,
    PollStatus,
    canonical_session_id,
)
from labs.drivers.statefile import StateDir

REJECT_PREFIX = "reject:"
LEAKY_PREFIX = "leaky:"
ACCESS_URL = "https://lab.simulator.invalid/{session_id}/"
# In the state directory beside the records (not a session id, so never listed as an instance).
API_FAULTS_FILE = "api-faults.json"
# One file per pod of another owner, ``foreign-<uid>.json``: added and removed without a lock.
FOREIGN_POD_PREFIX = "foreign-"
# One file per node restarted at least once, ``node-<name>.json``: its boots and when its NPUs are back.
NODE_PREFIX = "node-"
# What the kubelet says of a pod it cannot admit after a restart, before the device plugin reports.
REBOOT_FAILURE = Reason.of(
    "session.driver",
    message="UnexpectedAdmissionError: Allocate failed due to no healthy devices present; cannot allocate unhealthy devices",
)
NODE_STATUS_PREFIX = "nodestatus-"


def _failure(stored: dict | str) -> Reason:
    """The failure a record holds: a reason as ``Reason.to_json`` stores it (a record written
    before reasons, a sentence: the platform's own words)."""
    if isinstance(stored, str):
        return Reason.of("session.driver", message=stored)
    return Reason.from_json(stored)


# Why a simulated lab restarting while it starts ended: a kubelet's words for a non-zero exit.
START_RESTART_EXIT = Reason.of("driver.container_exit", reason="Error", exit_code=1)


def _restart(at: float, ended: Reason, restarts: int = 0) -> dict:
    """A record's fields for a lab that ends at ``at`` (seconds since the epoch) for ``ended`` and starts again."""
    return {"restart_at": at, "restarts": restarts + 1, "last_exit": ended.to_json()}


def _boot_id(node: str, boot: int) -> str:
    """The simulated boot id of ``node``'s ``boot``-th boot (a UUID, as ``/proc/sys/kernel/random/boot_id``)."""
    return str(uuid.uuid5(uuid.NAMESPACE_DNS, f"{node}/boot/{boot}"))


def _write_atomically(directory: str, path: Path, data: dict) -> None:
    fd, tmp = tempfile.mkstemp(dir=directory, prefix=".", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            json.dump(data, fh)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise


def _check_rate(name: str, rate: float) -> float:
    if not 0.0 <= float(rate) <= 1.0:
        raise ValueError(f"{name} must be between 0 and 1, got {rate!r}")
    return float(rate)


def _check_delay(name: str, seconds: float) -> float:
    if float(seconds) < 0:
        raise ValueError(f"{name} must be >= 0, got {seconds!r}")
    return float(seconds)


class SimulatorDriver(ClusterDriver):
    """Simulated instances: ``PENDING`` for ``start_delay_seconds`` after ``create``, then ``RUNNING``."""

    option_names = frozenset(
        {
            "state_dir",
            "start_delay_seconds",
            "fail_images",
            "create_delay_seconds",
            "create_failure_rate",
            "delete_failure_rate",
            "restart_fraction",
            "access_url",
        }
    )

    def __init__(
        self,
        *,
        state_dir: str,
        start_delay_seconds: float = 2.0,
        fail_images: Iterable[str] | str = (),
        create_delay_seconds: float = 0.0,
        create_failure_rate: float = 0.0,
        delete_failure_rate: float = 0.0,
        restart_fraction: float = 0.0,
        access_url: str = ACCESS_URL,
    ) -> None:
        if "{session_id}" not in access_url or not access_url.startswith(("http://", "https://")):
            raise ValueError(f"access_url must be an http(s) URL with {{session_id}} in it, got {access_url!r}")
        self.access_url = access_url
        self.create_failure_rate = _check_rate("create_failure_rate", create_failure_rate)
        self.delete_failure_rate = _check_rate("delete_failure_rate", delete_failure_rate)
        self.restart_fraction = _check_rate("restart_fraction", restart_fraction)
        _check_delay("start_delay_seconds", start_delay_seconds)
        # A slow cluster API: create() blocks this long before recording the instance, which
        # gives fault-injection tests a window to kill the worker mid-task.
        self.create_delay_seconds = _check_delay("create_delay_seconds", create_delay_seconds)
        if isinstance(fail_images, str):
            fail_images = [image.strip() for image in fail_images.split(",") if image.strip()]
        self.state = StateDir(state_dir)
        self.start_delay_seconds = float(start_delay_seconds)
        self.fail_images = frozenset(fail_images)

    def create(self, spec: LaunchSpec) -> str:
        if spec.image.startswith(REJECT_PREFIX):
            raise DriverRefused("the cluster refused the instance (simulated)")
        faults = self.api_faults()
        if faults["create_delay_seconds"]:
            time.sleep(faults["create_delay_seconds"])
        if faults["create_failure_rate"] and random.random() < faults["create_failure_rate"]:
            raise DriverError("the cluster API did not answer (simulated)")
        with self.state.lock(spec.session_id) as sid:
            record = self.state.read(sid)
            if record is not None:
                return record["ref"]
            failure = None
            if spec.image in self.fail_images:
                failure = Reason.of("driver.image_pull_failed", detail=f"{spec.image} (simulated)").to_json()
            ref = str(uuid.uuid4())
            now = time.time()
            # Wall-clock time, because another process computes the delay from it.
            record = {
                "ref": ref,
                "kind": spec.kind,
                "image": spec.image,
                "created": now,
                "failure": failure,
                "node": spec.card.node,
                "card": spec.card.card_index,
                # What the simulated lab's self-test sees: its cap, or the whole card if leaky.
                "visible_mib": spec.card.card_memory_mib if spec.image.startswith(LEAKY_PREFIX) else spec.card.memory_mib,
            }
            if self.restart_fraction and random.random() < self.restart_fraction:
                record.update(_restart(now + self.start_delay_seconds, START_RESTART_EXIT))
            self.state.write(sid, record)
            return ref

    def simulated_selftest_mib(self, session_id: str) -> int | None:
        record = self.state.read(canonical_session_id(session_id))
        return None if record is None else record.get("visible_mib")

    def observe(self) -> dict[str, Observed]:
        now = time.time()
        return {sid: self._observed(sid, record, now) for sid, record in self.state.records().items()}

    def _observed(self, sid: str, record: dict, now: float) -> Observed:
        where = {"ref": record["ref"], "node": record.get("node", ""), "card_index": record.get("card")}
        if record.get("failure"):
            return Observed(sid, PollStatus.FAILED, reason=_failure(record["failure"]), **where)
        reboot = record.get("reboot")
        if reboot is not None:
            back = reboot["back_at"]
            if back is None or now < back or not reboot["comes_back"]:
                return Observed(sid, PollStatus.FAILED, reason=REBOOT_FAILURE, **where)
            # The NPUs are back and the kubelet started the lab again: one restart more.
            where.update(restarts=record.get("restarts", 0) + 1)
            if now - back < self.start_delay_seconds:
                return Observed(sid, PollStatus.PENDING, reason=Reason.of("driver.simulated_starting"), **where)
            return Observed(sid, PollStatus.RUNNING, access_url=self.access_url.format(session_id=sid), **where)
        restart_at = record.get("restart_at")
        if restart_at is not None and now >= restart_at:
            # The lab ended at restart_at and is starting again: up start_delay_seconds later.
            where.update(restarts=record["restarts"], last_exit=Reason.from_json(record["last_exit"]))
            if now - restart_at < self.start_delay_seconds:
                return Observed(sid, PollStatus.PENDING, reason=Reason.of("driver.simulated_starting"), **where)
        elif now - record["created"] < self.start_delay_seconds:
            return Observed(sid, PollStatus.PENDING, reason=Reason.of("driver.simulated_starting"), **where)
        return Observed(sid, PollStatus.RUNNING, access_url=self.access_url.format(session_id=sid), **where)

    def delete(self, session_id: str) -> None:
        rate = self.api_faults()["delete_failure_rate"]
        if rate and random.random() < rate:
            raise DriverError("the cluster API did not answer (simulated)")
        with self.state.lock(session_id) as sid:
            self.state.remove(sid)

    def pods_on(self, node: str) -> dict[str, NodePod]:
        """The node's simulated labs (by reference) and the foreign pods put there (``foreign_pod_add``)."""
        pods = {}
        for sid, record in self.state.records().items():
            if record.get("node") == node:
                pods[record["ref"]] = NodePod(record["ref"], f"lab {sid}", portal=True)
        for path in Path(self.state.path).glob(f"{FOREIGN_POD_PREFIX}*.json"):
            with contextlib.suppress(FileNotFoundError):  # removed since the directory was listed
                foreign = json.loads(path.read_text(encoding="utf-8"))
                if foreign["node"] == node:
                    pods[foreign["uid"]] = NodePod(foreign["uid"], foreign["name"], portal=False)
        return pods

    def nodes(self) -> dict[str, NodeBoot]:
        """Every node with a simulated lab or a restart: its first boot until ``inject_reboot``, its
        NPUs reported except while a restart waits for them."""
        now = time.time()
        boots = {}
        for record in self.state.records().values():
            if record.get("node"):
                boots[record["node"]] = NodeBoot(boot_id=_boot_id(record["node"], 1), npus_reported=True)
        for path in Path(self.state.path).glob(f"{NODE_PREFIX}*.json"):
            with contextlib.suppress(FileNotFoundError):
                node = json.loads(path.read_text(encoding="utf-8"))
                back = node["devices_at"]
                reported = back is not None and now >= back
                boots[node["name"]] = NodeBoot(_boot_id(node["name"], node["boot"]), npus_reported=reported)
        return boots

    def inject_reboot(self, node: str, *, devices_after_seconds: float | None = 2.0, comes_back: bool = False) -> None:
        """Restart ``node`` now (see the module docstring); its NPUs reported again ``devices_after_seconds``
        later (``None``: never), its labs running again then if ``comes_back``."""
        if devices_after_seconds is not None:
            _check_delay("devices_after_seconds", devices_after_seconds)
        now = time.time()
        back = None if devices_after_seconds is None else now + float(devices_after_seconds)
        path = Path(self.state.path, f"{NODE_PREFIX}{uuid.uuid5(uuid.NAMESPACE_DNS, node)}.json")
        try:
            boot = json.loads(path.read_text(encoding="utf-8"))["boot"] + 1
        except FileNotFoundError:
            boot = 2
        _write_atomically(self.state.path, path, {"name": node, "boot": boot, "devices_at": back})
        for sid in self.state.session_ids():
            with self.state.lock(sid) as locked:
                record = self.state.read(locked)
                if record is not None and record.get("node") == node:
                    self.state.write(locked, {**record, "reboot": {"at": now, "back_at": back, "comes_back": comes_back}})

    def foreign_pod_add(self, node: str, name: str = "research/train-0") -> str:
        """Put a pod the portal did not make on ``node``, seen by every driver on this state
        directory; its UID (a new UUID, as the API server gives)."""
        uid = str(uuid.uuid4())
        fd, tmp = tempfile.mkstemp(dir=self.state.path, prefix=".", suffix=".tmp")
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as fh:
                json.dump({"uid": uid, "node": node, "name": name}, fh)
            os.replace(tmp, Path(self.state.path, f"{FOREIGN_POD_PREFIX}{uid}.json"))
        except BaseException:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(tmp)
            raise
        return uid

    def foreign_pod_remove(self, uid: str) -> None:
        """Take the foreign pod ``uid`` away (nothing happens when there is none)."""
        Path(self.state.path, f"{FOREIGN_POD_PREFIX}{uuid.UUID(uid)}.json").unlink(missing_ok=True)

    def node_status(self, node: str) -> NodeStatus | None:
        """The node object ``node_status_set`` gave ``node``; ``None`` (no node objects) for any other."""
        try:
            with open(Path(self.state.path, f"{NODE_STATUS_PREFIX}{_node_file(node)}.json"), encoding="utf-8") as fh:
                record = json.load(fh)
        except FileNotFoundError:
            return None
        devices = tuple((die_id, chip) for die_id, chip in record["devices"])
        return NodeStatus(record["profile"], record["labels"], record["resources"], record["exists"], devices)

    def node_status_set(self, node: str, status: NodeStatus) -> None:
        """Give ``node`` a node object, as a cluster whose device plugin and labels are ``status``
        says, seen by every driver on this state directory (``node_status``)."""
        record = {
            "profile": status.profile,
            "labels": dict(status.labels),
            "resources": dict(status.resources),
            "devices": [list(device) for device in status.devices],
        }
        fd, tmp = tempfile.mkstemp(dir=self.state.path, prefix=".", suffix=".tmp")
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as fh:
                json.dump({**record, "exists": status.exists}, fh)
            os.replace(tmp, Path(self.state.path, f"{NODE_STATUS_PREFIX}{_node_file(node)}.json"))
        except BaseException:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(tmp)
            raise

    def node_status_forget(self, node: str) -> None:
        """Take ``node``'s node object away again (``node_status`` is ``None`` for it)."""
        Path(self.state.path, f"{NODE_STATUS_PREFIX}{_node_file(node)}.json").unlink(missing_ok=True)

    def api_faults(self) -> dict[str, float]:
        """The failure rates and create delay in force: the injected ones while there are any
        (``inject_api_faults``, from any process), else this driver's own options."""
        try:
            with open(Path(self.state.path, API_FAULTS_FILE), encoding="utf-8") as fh:
                return json.load(fh)
        except FileNotFoundError:
            return {
                "create_failure_rate": self.create_failure_rate,
                "delete_failure_rate": self.delete_failure_rate,
                "create_delay_seconds": self.create_delay_seconds,
            }

    def inject_api_faults(
        self, *, create_failure_rate: float = 0.0, delete_failure_rate: float = 0.0, create_delay_seconds: float = 0.0
    ) -> None:
        """Make every driver on this state directory, in every process, fail that share of creates
        and deletes and take that long to create, until ``clear_api_faults``; these replace the
        drivers' own options meanwhile. Written atomically: a create never sees half of it."""
        faults = {
            "create_failure_rate": _check_rate("create_failure_rate", create_failure_rate),
            "delete_failure_rate": _check_rate("delete_failure_rate", delete_failure_rate),
            "create_delay_seconds": _check_delay("create_delay_seconds", create_delay_seconds),
        }
        fd, tmp = tempfile.mkstemp(dir=self.state.path, prefix=".", suffix=".tmp")
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as fh:
                json.dump(faults, fh)
            os.replace(tmp, Path(self.state.path, API_FAULTS_FILE))
        except BaseException:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(tmp)
            raise

    def clear_api_faults(self) -> None:
        """Back to each driver's own options (nothing happens when no faults were injected)."""
        Path(self.state.path, API_FAULTS_FILE).unlink(missing_ok=True)

    def inject_card(self, session_id: str, card_index: int) -> None:
        """Report the session's instance on ``card_index``; ``DriverError`` when it has none."""
        self._change_record(session_id, card=card_index)

    def inject_restart(self, session_id: str, *, reason: str = "OOMKilled", exit_code: int = 137) -> None:
        """Make the session's lab end now with ``reason`` and ``exit_code`` and start again (running
        ``start_delay_seconds`` later), one restart more; ``DriverError`` when it has no instance."""
        ended = Reason.of("driver.container_exit", reason=reason, exit_code=exit_code)
        with self.state.lock(session_id) as sid:
            record = self.state.read(sid)
            if record is None:
                raise DriverError(f"no simulated instance for session {sid}")
            self.state.write(sid, {**record, **_restart(time.time(), ended, record.get("restarts", 0))})

    def inject_failure(self, session_id: str, message: str = "") -> None:
        """Make the session's instance ``FAILED``, with ``message`` as the platform's own words
        (``session.driver``) or, without one, ``driver.simulated_died``; ``DriverError`` when it has none."""
        reason = Reason.of("session.driver", message=message) if message else Reason.of("driver.simulated_died")
        self._change_record(session_id, failure=reason.to_json())

    def _change_record(self, session_id: str, **fields: object) -> None:
        with self.state.lock(session_id) as sid:
            record = self.state.read(sid)
            if record is None:
                raise DriverError(f"no simulated instance for session {sid}")
            self.state.write(sid, {**record, **fields})


def _node_file(node: str) -> str:
    """A node name as a file name: the simulator's names are DNS labels; anything else is refused."""
    if not node or not all(ch.isalnum() or ch in ".-" for ch in node) or node.startswith("."):
        raise DriverError(f"Not a node name: {node!r}.")
    return node
