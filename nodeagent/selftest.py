"""The isolation self-test a lab runs at start: ``python -m nodeagent selftest [--probe]``.

It reads the NPU memory the container can see, optionally tries to allocate past the share's
cap, and posts both to the portal (``POST <portal>/sessions/<id>/selftest``, authenticated by
the session's own secret), which flags a session that sees more than its cap. It needs no
Django: it runs inside the lab image.

Where the visible memory comes from (the first reporter that works):

* ``fake``: ``NPU_LAB_SELFTEST_FAKE_VISIBLE_MIB`` (tests and demos; ``NPU_LAB_SELFTEST_FAKE_PROBE_MIB``
  is then the most the fake device lets one allocate);
* ``torch_npu``: ``torch_npu.npu.mem_get_info()`` total, what vLLM itself reads; the only
  reporter that can ``--probe`` (allocates 256 MiB tensors until the cap plus one step is
  passed or the device refuses). Not testable without an NPU.

Exit codes: 0 reported and within the cap, 1 reported and over the cap, 2 usage or reporter
error, 3 the portal refused or could not be reached. Messages never contain the secret.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

PROBE_STEP_MIB = 256
EXIT_OK, EXIT_OVER_CAP, EXIT_USAGE, EXIT_PORTAL = 0, 1, 2, 3


class ReporterError(Exception):
    pass


class Reporter(Protocol):
    name: str

    def visible_mib(self) -> int: ...

    def can_allocate_mib(self, amount_mib: int) -> bool | None:
        """True if ``amount_mib`` could be allocated at once, False if refused, None if it cannot probe."""


@dataclass
class FakeReporter:
    visible: int
    allocatable: int | None = None
    name: str = "fake"

    def visible_mib(self) -> int:
        return self.visible

    def can_allocate_mib(self, amount_mib: int) -> bool | None:
        return None if self.allocatable is None else amount_mib <= self.allocatable


class TorchNpuReporter:
    name = "torch_npu"

    def __init__(self) -> None:
        try:
            import torch  # noqa: F401
            import torch_npu  # noqa: F401
        except ImportError as exc:
            raise ReporterError(f"torch_npu is not importable: {exc}") from None
        self._torch = sys.modules["torch"]

    def visible_mib(self) -> int:
        _free, total = self._torch.npu.mem_get_info()
        return int(total) // (1024 * 1024)

    def can_allocate_mib(self, amount_mib: int) -> bool | None:
        held = []
        try:
            for _ in range(0, amount_mib, PROBE_STEP_MIB):
                held.append(self._torch.empty(PROBE_STEP_MIB * 1024 * 1024, dtype=self._torch.uint8, device="npu"))
            return True
        except RuntimeError:  # the device (or its isolation layer) refused: out of memory
            return False
        finally:
            held.clear()
            self._torch.npu.empty_cache()


def pick_reporter(env: dict[str, str]) -> Reporter:
    fake = env.get("NPU_LAB_SELFTEST_FAKE_VISIBLE_MIB")
    if fake is not None:
        probe = env.get("NPU_LAB_SELFTEST_FAKE_PROBE_MIB")
        try:
            return FakeReporter(int(fake), int(probe) if probe is not None else None)
        except ValueError:
            raise ReporterError("NPU_LAB_SELFTEST_FAKE_VISIBLE_MIB and _PROBE_MIB must be whole numbers of MiB") from None
    return TorchNpuReporter()


def post_report(url: str, secret: str, body: dict, timeout: float) -> dict:
    request = urllib.request.Request(
        url,
        data=json.dumps(body).encode(),
        method="POST",
        headers={"Content-Type": "application/json", "Authorization": f"Bearer {secret}"},
    )
    with urllib.request.urlopen(request, timeout=timeout) as response:  # noqa: S310 (the operator's portal URL)
        return json.loads(response.read() or b"{}")


def parse_args(argv: list[str] | None, env: dict[str, str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m nodeagent selftest", description="The lab's NPU isolation self-test.")
    parser.add_argument(
        "--portal", default=env.get("NPU_LAB_PORTAL_URL"), help="NPU_LAB_PORTAL_URL, e.g. https://lab.example.edu"
    )
    parser.add_argument("--session", default=env.get("LAB_SESSION_ID"), help="LAB_SESSION_ID (set in every lab)")
    parser.add_argument("--cap-mib", type=int, default=env.get("FLEXNPU_MEMORY_MIB"), help="FLEXNPU_MEMORY_MIB (the share's cap)")
    parser.add_argument("--probe", action="store_true", help="also try to allocate past the cap")
    parser.add_argument("--timeout", type=float, default=float(env.get("NPU_LAB_SELFTEST_TIMEOUT_SECONDS", "10")))
    args = parser.parse_args(argv)
    args.secret, args.secret_problem = session_secret(env)
    return args


SECRET_SOURCES = "NPU_LAB_SESSION_SECRET, JUPYTER_TOKEN, the file JUPYTER_TOKEN_FILE names, or VLLM_API_KEY"


def session_secret(env: dict[str, str]) -> tuple[str, str]:
    """The session's secret and, when it cannot be had, why (never the secret itself).

    Never an argument (the process list shows arguments). A JupyterLab pod of the Kubernetes
    driver has it only as a mounted file (``JUPYTER_TOKEN_FILE``, which Jupyter Server reads
    when ``JUPYTER_TOKEN`` is unset); a vLLM pod as ``VLLM_API_KEY``; the local driver's lab as
    ``JUPYTER_TOKEN``."""
    for name in ("NPU_LAB_SESSION_SECRET", "JUPYTER_TOKEN"):
        if env.get(name):
            return env[name], ""
    path = env.get("JUPYTER_TOKEN_FILE")
    if path:
        try:
            secret = Path(path).read_text(encoding="utf-8").strip()
        except (OSError, UnicodeDecodeError) as exc:
            return "", f"the session secret: cannot read JUPYTER_TOKEN_FILE={path} ({exc.__class__.__name__})"
        if secret:
            return secret, ""
        return "", f"the session secret: JUPYTER_TOKEN_FILE={path} is empty"
    if env.get("VLLM_API_KEY"):
        return env["VLLM_API_KEY"], ""
    return "", f"the session secret ({SECRET_SOURCES})"


def main(argv: list[str] | None = None, env: dict[str, str] | None = None) -> int:
    env = dict(os.environ) if env is None else env
    args = parse_args(argv, env)
    missing = [name for name, value in (("--portal", args.portal), ("--session", args.session)) if not value]
    if not args.secret:
        missing.append(args.secret_problem)
    if args.probe and not args.cap_mib:
        missing.append("--cap-mib (needed by --probe)")
    if missing:
        print(f"selftest: missing {', '.join(missing)}", file=sys.stderr)
        return EXIT_USAGE
    try:
        reporter = pick_reporter(env)
        visible = reporter.visible_mib()
        probe = reporter.can_allocate_mib(args.cap_mib + PROBE_STEP_MIB) if args.probe else None
    except ReporterError as exc:
        print(f"selftest: cannot read NPU memory: {exc}", file=sys.stderr)
        return EXIT_USAGE
    url = f"{args.portal.rstrip('/')}/sessions/{args.session}/selftest"
    try:
        verdict = post_report(url, args.secret, {"visible_mib": visible, "probe_exceeded": probe}, args.timeout)
    except urllib.error.HTTPError as exc:
        try:
            why = json.loads(exc.read()).get("error", "")
        except ValueError:
            why = ""
        print(f"selftest: the portal refused the report ({exc.code}): {why}", file=sys.stderr)
        return EXIT_PORTAL
    except (urllib.error.URLError, OSError, ValueError) as exc:
        print(f"selftest: cannot reach the portal at {args.portal}: {exc}", file=sys.stderr)
        return EXIT_PORTAL
    probed = {True: "allocating past the cap succeeded", False: "allocating past the cap was refused", None: "not probed"}
    over = bool(verdict.get("over_cap"))
    print(
        f"selftest ({reporter.name}): sees {visible} MiB of NPU memory, cap {verdict.get('cap_mib')} MiB, "
        f"{probed[probe]}: {'OVER THE CAP, isolation in doubt' if over else 'within the cap'}"
    )
    return EXIT_OVER_CAP if over else EXIT_OK
