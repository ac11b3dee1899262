"""A driver that runs nothing: instances are records in a state directory that "start" after a delay.

For tests and demos. Records live in ``state_dir`` so every process (web, Celery workers) sees
the same instances. Failures can be injected three ways:

* ``fail_images``: ``create`` for one of these images succeeds, then ``poll`` reports ``FAILED``
  with ``"image pull failed: <image> (simulated)"``, as a cluster does for a missing image;
* an image starting with ``"reject:"`` makes ``create`` itself raise ``DriverError``;
* ``inject_failure(session_id, message)`` makes a running or starting instance ``FAILED``, from
  any process.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterable

from labs.drivers.base import ClusterDriver, DriverError, LaunchSpec, PollResult, PollStatus
from labs.drivers.statefile import StateDir, canonical_session_id

REJECT_PREFIX = "reject:"
ACCESS_URL = "https://lab.simulator.invalid/{session_id}/"


class SimulatorDriver(ClusterDriver):
    """Simulated instances: ``PENDING`` for ``start_delay_seconds`` after ``create``, then ``RUNNING``."""

    option_names = frozenset({"state_dir", "start_delay_seconds", "fail_images", "create_delay_seconds"})

    def __init__(
        self,
        *,
        state_dir: str,
        start_delay_seconds: float = 2.0,
        fail_images: Iterable[str] | str = (),
        create_delay_seconds: float = 0.0,
    ) -> None:
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
            raise DriverError("the cluster refused the instance (simulated)")
        if self.create_delay_seconds:
            time.sleep(self.create_delay_seconds)
        with self.state.lock(spec.session_id) as sid:
            record = self.state.read(sid)
            if record is not None:
                return record["ref"]
            failure = f"image pull failed: {spec.image} (simulated)" if spec.image in self.fail_images else ""
            ref = str(uuid.uuid4())
            # Wall-clock time, because another process computes the delay from it.
            record = {"ref": ref, "kind": spec.kind, "image": spec.image, "created": time.time(), "failure": failure}
            self.state.write(sid, record)
            return ref

    def poll(self, session_id: str) -> PollResult:
        sid = canonical_session_id(session_id)
        record = self.state.read(sid)
        if record is None:
            return PollResult(PollStatus.GONE)
        if record.get("failure"):
            return PollResult(PollStatus.FAILED, message=record["failure"])
        left = self.start_delay_seconds - (time.time() - record["created"])
        if left > 0:
            return PollResult(PollStatus.PENDING, message=f"starting (simulated, {left:.1f} s left)")
        return PollResult(PollStatus.RUNNING, access_url=ACCESS_URL.format(session_id=sid))

    def delete(self, session_id: str) -> None:
        with self.state.lock(session_id) as sid:
            self.state.remove(sid)

    def list(self) -> set[str]:
        return self.state.session_ids()

    def inject_failure(self, session_id: str, message: str = "the instance died (simulated)") -> None:
        """Make the session's instance ``FAILED`` with ``message``; ``DriverError`` when it has none."""
        with self.state.lock(session_id) as sid:
            record = self.state.read(sid)
            if record is None:
                raise DriverError(f"no simulated instance for session {sid}")
            record["failure"] = message
            self.state.write(sid, record)
