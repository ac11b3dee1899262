"""The ``flexnpu-smi`` driver: a real node read with ``npu-smi`` and ``flexnpu-smi``."""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import threading
import time

from nodeagent.cards.base import DriverError, NodeDriver
from nodeagent.parsers.flexnpu_smi import parse_flexnpu_smi_info
from nodeagent.parsers.npu_smi import NpuSmiInfo, chip_type, parse_npu_smi_board, parse_npu_smi_device_share, parse_npu_smi_info
from nodeagent.parsers.text import ParseError
from nodeagent.wire import CardReport, InstanceReport, VersionsReport

logger = logging.getLogger("nodeagent")


class FlexnpuSmiDriver(NodeDriver):
    """Reads the node with ``npu-smi info`` and ``flexnpu-smi info``; removes with ``flexnpu-smi unregister -u``.

    Commands run without a shell, in their own process group, killed after ``timeout_seconds``,
    and one at a time: the vendor says ``npu-smi`` must not run concurrently, and the agent's
    threaded server could otherwise run it for ``/v1/inventory`` and ``/metrics`` at once. The
    ``npu-smi info`` output is reused for ``npu_smi_cache_seconds`` (0: never), so a scrape and
    a sync arriving together cost one run. ``flexnpu-smi info`` is never cached: an unregister
    is decided on what it prints now.

    A command that fails, times out or prints what does not parse raises ``DriverError``; an
    unregister is decided only from ``flexnpu-smi info`` output that parsed completely, and only
    FlexNPU ids read from it are passed to ``unregister -u``. ``die_id`` is empty: ``npu-smi
    info`` does not show it.

    Each *chip* is a card: an Atlas A3 or 300I Duo NPU holds two, and an instance lands on one.
    Its index is the chip's Phy-ID/Device number when ``npu-smi`` prints one, else the NPU
    number; its memory is the chip's own (HBM, or DDR on 310P/310B); its chip type comes from
    ``chip_type`` (name and memory: a 32 GB first-generation ``910B`` is ``Ascend910``). The
    card's ``aicore_percent`` is what ``npu-smi`` prints, for display only: the driver forces
    it to 0 in vNPU mode, so shares are never accounted from it (instances report their own).
    """

    name = "flexnpu-smi"

    def __init__(
        self,
        binary: str = "flexnpu-smi",
        npu_smi: str = "npu-smi",
        timeout_seconds: float = 10,
        npu_smi_cache_seconds: float = 2,
        versions_cache_seconds: float = 300,
    ) -> None:
        if npu_smi_cache_seconds < 0:
            raise ValueError(f"the npu-smi cache lifetime must be 0 or more seconds, got {npu_smi_cache_seconds:g}")
        self.binary = binary
        self.npu_smi = npu_smi
        self.timeout_seconds = timeout_seconds
        self.npu_smi_cache_seconds = npu_smi_cache_seconds
        # Two removals of one instance at once would both see it and the second would fail.
        self._unregister_lock = threading.Lock()
        # One vendor command at a time (npu-smi must not run concurrently).
        self._command_lock = threading.Lock()
        # Held while npu-smi info runs, so callers arriving meanwhile wait and reuse its output.
        self._npu_smi_lock = threading.Lock()
        self._npu_smi_output: tuple[float, bytes] | None = None
        self.versions_cache_seconds = versions_cache_seconds
        self._firmware: tuple[float, str] | None = None
        self._firmware_lock = threading.Lock()
        self._device_share: tuple[float, bool | None] | None = None
        self._last_info: NpuSmiInfo | None = None

    def inventory(self) -> list[CardReport]:
        info = self._parsed_npu_smi_info()
        return [
            CardReport(
                index=chip.npu_id if chip.device_id is None else chip.device_id,
                die_id="",
                chip_type=chip_type(chip.name, chip.memory_total_mib),
                memory_total_mib=chip.memory_total_mib,
                memory_used_mib=chip.memory_used_mib,
                aicore_percent=chip.aicore_percent,
                healthy=chip.healthy,
                power_milliwatts=chip.power_milliwatts,
                temperature_celsius=chip.temperature_celsius,
            )
            for chip in info.chips
        ]

    def versions(self) -> VersionsReport:
        # The banner of the output the inventory just read: no second run for the same request.
        info = self._last_info or self._parsed_npu_smi_info()
        firmware = self._firmware_version(info.chips[0].npu_id)
        return VersionsReport(driver=info.version, firmware=firmware, npu_smi=info.npu_smi_version)

    def _parsed_npu_smi_info(self) -> NpuSmiInfo:
        command = [self.npu_smi, "info"]
        try:
            info = parse_npu_smi_info(self._npu_smi_info(command))
        except ParseError as exc:
            raise _unparsed(command, exc) from None
        self._last_info = info
        return info

    def _firmware_version(self, npu_id: int) -> str:
        with self._firmware_lock:
            cached = self._firmware
            if cached is not None and time.monotonic() - cached[0] < self.versions_cache_seconds:
                return cached[1]
            command = [self.npu_smi, "info", "-t", "board", "-i", str(npu_id)]
            try:
                firmware = parse_npu_smi_board(self._run(command))
            except ParseError as exc:
                logger.warning("%s", _unparsed(command, exc))
                firmware = ""
            except DriverError as exc:
                logger.warning("cannot read the firmware version: %s", exc)
                firmware = ""
            self._firmware = (time.monotonic(), firmware)
            return firmware

    def device_share(self) -> bool | None:
        """Read once per ``versions_cache_seconds``, like the firmware: it changes only by hand."""
        with self._firmware_lock:
            cached = self._device_share
            if cached is not None and time.monotonic() - cached[0] < self.versions_cache_seconds:
                return cached[1]
            command = [self.npu_smi, "info", "-t", "device-share"]
            try:
                shares = parse_npu_smi_device_share(self._run(command))
                share: bool | None = all(shares.values())
            except ParseError as exc:
                logger.warning("%s", _unparsed(command, exc))
                share = None
            except DriverError as exc:
                logger.warning("cannot read the device-share mode: %s", exc)
                share = None
            self._device_share = (time.monotonic(), share)
            return share

    def _npu_smi_info(self, command: list[str]) -> bytes:
        with self._npu_smi_lock:
            cached = self._npu_smi_output
            if cached is not None and time.monotonic() - cached[0] < self.npu_smi_cache_seconds:
                return cached[1]
            output = self._run(command)
            self._npu_smi_output = (time.monotonic(), output)
            return output

    def instances(self) -> list[InstanceReport]:
        command = [self.binary, "info"]
        try:
            rows = parse_flexnpu_smi_info(self._run(command))
        except ParseError as exc:
            raise _unparsed(command, exc) from None
        return [
            InstanceReport(
                entity_id=row.entity_id,
                flexnpu_id=row.flexnpu_id,
                card_index=row.npu_id,
                core_percent=row.core_percent,
                memory_mib=row.memory_limit_mib,
                memory_used_mib=row.memory_used_mib,
                aicore_percent=row.aicore_percent,
            )
            for row in rows
        ]

    def unregister(self, entity_id: str) -> bool:
        with self._unregister_lock:
            flexnpu_ids = [i.flexnpu_id for i in self.instances() if i.entity_id == entity_id]
            for flexnpu_id in flexnpu_ids:
                self._run([self.binary, "unregister", "-u", flexnpu_id])
            return bool(flexnpu_ids)

    def _run(self, command: list[str]) -> bytes:
        with self._command_lock:
            return self._run_alone(command)

    def _run_alone(self, command: list[str]) -> bytes:
        shown = " ".join(command)
        try:
            process = subprocess.Popen(
                command, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True
            )
        except OSError as exc:
            raise DriverError(f"cannot run {command[0]!r}: {exc.strerror or exc}") from None
        with process:
            try:
                stdout, stderr = process.communicate(timeout=self.timeout_seconds)
            except subprocess.TimeoutExpired:
                _kill_group(process)
                raise DriverError(f"'{shown}' did not finish within {self.timeout_seconds:g} s") from None
        if process.returncode != 0:
            detail = stderr.decode("utf-8", "replace").strip() or stdout.decode("utf-8", "replace").strip()
            detail = detail.splitlines()[-1][:300] if detail else "no output"
            raise DriverError(f"'{shown}' exited with status {process.returncode}: {detail}")
        return stdout


def _kill_group(process: subprocess.Popen) -> None:
    try:
        os.killpg(process.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    try:
        process.communicate(timeout=5)
    except subprocess.TimeoutExpired:
        pass


def _unparsed(command: list[str], exc: ParseError) -> DriverError:
    return DriverError(
        f"'{' '.join(command)}' printed output that did not parse ({exc}); "
        f"check it with: {' '.join(command)} > out.txt; python -m nodeagent.parsers {os.path.basename(command[0])} out.txt"
    )
