"""A driver that runs nothing: instances are records in a state directory that "start" after a delay.

For tests and demos. Records live in ``state_dir`` so every process (web, Celery workers) sees
the same instances. Failures can be injected three ways:

* ``fail_images``: ``create`` for one of these images succeeds, then ``poll`` reports ``FAILED``
  with ``"image pull failed: <image> (simulated)"``, as a cluster does for a missing image;
* an image starting with ``"reject:"`` makes ``create`` itself raise ``DriverRefused``;
* ``create_failure_rate`` makes that share of ``create`` calls raise ``DriverError`` (a flaky
  cluster API), ``delete_failure_rate`` the same for ``delete``;
* an image starting with ``"leaky:"`` makes the instance's isolation self-test see the whole
  card instead of its cap (``simulated_selftest_mib``), as a device plugin that does not isolate;
* ``access_url``: where a running instance says its lab is (``{session_id}`` is filled in); a
  bench points it at a stand-in lab server that answers the idle check's questions;
* ``inject_failure(session_id, message)`` makes a running or starting instance ``FAILED``, and
  ``inject_card(session_id, index)`` moves it to another card, as a device plugin that chose
  another card than the ledger would show; both from any process.
"""

from __future__ import annotations

import random
import time
import uuid
from collections.abc import Iterable

from labs.drivers.base import (
    ClusterDriver,
    DriverError,
    DriverRefused,
    LaunchSpec,
    Observed,
    PollStatus,
    canonical_session_id,
)
from labs.drivers.statefile import StateDir

REJECT_PREFIX = "reject:"
LEAKY_PREFIX = "leaky:"
ACCESS_URL = "https://lab.simulator.invalid/{session_id}/"


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
        access_url: str = ACCESS_URL,
    ) -> None:
        if "{session_id}" not in access_url or not access_url.startswith(("http://", "https://")):
            raise ValueError(f"access_url must be an http(s) URL with {{session_id}} in it, got {access_url!r}")
        self.access_url = access_url
        for name, rate in (("create_failure_rate", create_failure_rate), ("delete_failure_rate", delete_failure_rate)):
            if not 0.0 <= float(rate) <= 1.0:
                raise ValueError(f"{name} must be between 0 and 1, got {rate!r}")
        self.create_failure_rate = float(create_failure_rate)
        self.delete_failure_rate = float(delete_failure_rate)
        if start_delay_seconds < 0:
            raise ValueError(f"start_delay_seconds must be >= 0, got {start_delay_seconds!r}")
        if create_delay_seconds < 0:
            raise ValueError(f"create_delay_seconds must be >= 0, got {create_delay_seconds!r}")
        # A slow cluster API: create() blocks this long before recording the instance, which
        # gives fault-injection tests a window to kill the worker mid-task.
        self.create_delay_seconds = float(create_delay_seconds)
        if isinstance(fail_images, str):
            fail_images = [image.strip() for image in fail_images.split(",") if image.strip()]
        self.state = StateDir(state_dir)
        self.start_delay_seconds = float(start_delay_seconds)
        self.fail_images = frozenset(fail_images)

    def create(self, spec: LaunchSpec) -> str:
        if spec.image.startswith(REJECT_PREFIX):
            raise DriverRefused("the cluster refused the instance (simulated)")
        if self.create_delay_seconds:
            time.sleep(self.create_delay_seconds)
        if self.create_failure_rate and random.random() < self.create_failure_rate:
            raise DriverError("the cluster API did not answer (simulated)")
        with self.state.lock(spec.session_id) as sid:
            record = self.state.read(sid)
            if record is not None:
                return record["ref"]
            failure = f"image pull failed: {spec.image} (simulated)" if spec.image in self.fail_images else ""
            ref = str(uuid.uuid4())
            # Wall-clock time, because another process computes the delay from it.
            record = {
                "ref": ref,
                "kind": spec.kind,
                "image": spec.image,
                "created": time.time(),
                "failure": failure,
                "node": spec.card.node,
                "card": spec.card.card_index,
                # What the simulated lab's self-test sees: its cap, or the whole card if leaky.
                "visible_mib": spec.card.card_memory_mib if spec.image.startswith(LEAKY_PREFIX) else spec.card.memory_mib,
            }
            self.state.write(sid, record)
            return ref

    def simulated_selftest_mib(self, session_id: str) -> int | None:
        record = self.state.read(canonical_session_id(session_id))
        return None if record is None else record.get("visible_mib")

    def observe(self) -> dict[str, Observed]:
        now = time.time()
        observed = {}
        for sid in self.state.session_ids():
            record = self.state.read(sid)
            if record is None:
                continue  # deleted since the directory was listed
            observed[sid] = self._observed(sid, record, now)
        return observed

    def _observed(self, sid: str, record: dict, now: float) -> Observed:
        where = {"ref": record["ref"], "node": record.get("node", ""), "card_index": record.get("card")}
        if record.get("failure"):
            return Observed(sid, PollStatus.FAILED, message=record["failure"], **where)
        if now - record["created"] < self.start_delay_seconds:
            return Observed(sid, PollStatus.PENDING, message="starting (simulated)", **where)
        return Observed(sid, PollStatus.RUNNING, access_url=self.access_url.format(session_id=sid), **where)

    def delete(self, session_id: str) -> None:
        if self.delete_failure_rate and random.random() < self.delete_failure_rate:
            raise DriverError("the cluster API did not answer (simulated)")
        with self.state.lock(session_id) as sid:
            self.state.remove(sid)

    def inject_card(self, session_id: str, card_index: int) -> None:
        """Report the session's instance on ``card_index``; ``DriverError`` when it has none."""
        self._change_record(session_id, card=card_index)

    def inject_failure(self, session_id: str, message: str = "the instance died (simulated)") -> None:
        """Make the session's instance ``FAILED`` with ``message``; ``DriverError`` when it has none."""
        self._change_record(session_id, failure=message)

    def _change_record(self, session_id: str, **fields: object) -> None:
        with self.state.lock(session_id) as sid:
            record = self.state.read(sid)
            if record is None:
                raise DriverError(f"no simulated instance for session {sid}")
            self.state.write(sid, {**record, **fields})
