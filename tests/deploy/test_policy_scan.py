"""Checkov, a third-party policy scanner, over every rendered kustomization of deploy/ and every
golden lab pod (tests/drivers/kubernetes/golden/).

Each finding is either fixed or listed in ``deploy/policy-baseline.yaml`` with its reason. The
suite fails on a finding the baseline does not list, on a baseline entry that matches no finding
any more (stale: remove it) and on an entry without a reason.

Checkov has heavy pinned dependencies, so it lives in its own virtualenv (``make checkov``, which
``make test`` depends on: ``.venv-checkov``); ``CHECKOV`` names another executable. Without it
these tests fail, they do not skip.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from fnmatch import fnmatchcase
from pathlib import Path
from typing import NamedTuple

import pytest
import yaml

from tests.deploy.test_manifests import KUSTOMIZATIONS, ROOT, render

BASELINE = ROOT / "deploy" / "policy-baseline.yaml"
GOLDEN = ROOT / "tests" / "drivers" / "kubernetes" / "golden"
# What issue 14 asked of every lab pod: probes, CPU and memory requests and limits, a read-only
# root filesystem, seccomp, no privilege. None of these may ever be baselined for a lab pod.
LAB_POD_MUST_PASS = {
    "CKV_K8S_8",  # liveness probe
    "CKV_K8S_9",  # readiness probe
    "CKV_K8S_10",  # CPU requests
    "CKV_K8S_11",  # CPU limits
    "CKV_K8S_12",  # memory requests
    "CKV_K8S_13",  # memory limits
    "CKV_K8S_16",  # not privileged
    "CKV_K8S_20",  # no privilege escalation
    "CKV_K8S_22",  # read-only root filesystem
    "CKV_K8S_28",  # no NET_RAW
    "CKV_K8S_31",  # seccomp
    "CKV_K8S_38",  # no service account token
}


class Finding(NamedTuple):
    check: str
    resource: str
    file: str


class Entry(NamedTuple):
    check: str
    resource: str
    reason: str

    def matches(self, finding: Finding) -> bool:
        return self.check == finding.check and fnmatchcase(finding.resource, self.resource)


def load_baseline(path: Path = BASELINE) -> list[Entry]:
    data = yaml.safe_load(path.read_text()) or []
    if not isinstance(data, list):
        raise ValueError(f"{path.name}: expected a list of entries")
    entries = []
    for n, item in enumerate(data, 1):
        if not isinstance(item, dict) or set(item) != {"check", "resource", "reason"}:
            raise ValueError(f"{path.name}: entry {n} must have exactly check, resource and reason, got {item!r}")
        entries.append(Entry(str(item["check"]), str(item["resource"]), str(item["reason"] or "").strip()))
    return entries


def unlisted(findings: list[Finding], baseline: list[Entry]) -> list[Finding]:
    """The findings no baseline entry matches."""
    return [f for f in findings if not any(e.matches(f) for e in baseline)]


def stale(findings: list[Finding], baseline: list[Entry]) -> list[Entry]:
    """The baseline entries that match no finding."""
    return [e for e in baseline if not any(e.matches(f) for f in findings)]


def checkov() -> str:
    candidates = [os.environ.get("CHECKOV", ""), str(ROOT / ".venv-checkov" / "bin" / "checkov"), shutil.which("checkov") or ""]
    for candidate in candidates:
        if candidate and Path(candidate).exists():
            return candidate
    pytest.fail(
        "checkov is not installed: `make checkov` makes .venv-checkov from requirements-checkov.txt (or set CHECKOV).",
        pytrace=False,
    )


@pytest.fixture(scope="module")
def findings(tmp_path_factory: pytest.TempPathFactory) -> list[Finding]:
    """Checkov's failed checks over deploy/ (rendered) and the golden pods, once per run."""
    target = tmp_path_factory.mktemp("scan")
    for name in KUSTOMIZATIONS:
        (target / f"kustomize-{name.replace('/', '-')}.yaml").write_text(yaml.safe_dump_all(render(name)))
    for golden in sorted(GOLDEN.glob("pod-*.json")):
        shutil.copy(golden, target / golden.name)
    result = subprocess.run(
        [checkov(), "-d", str(target), "--framework", "kubernetes", "-o", "json", "--compact"],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
        # No telemetry or version check from a test run.
        env={**os.environ, "BC_SKIP_MAPPING": "TRUE", "CHECKOV_RUN_SCA_PACKAGE_SCAN_V2": "false", "ANALYTICS": "false"},
    )
    if result.returncode not in (0, 1):  # 1: some check failed
        pytest.fail(f"checkov failed ({result.returncode}):\n{result.stderr[-3000:]}", pytrace=False)
    reports = json.loads(result.stdout)
    reports = reports if isinstance(reports, list) else [reports]
    found = [
        Finding(check["check_id"], check["resource"], check["file_path"].lstrip("/"))
        for report in reports
        for check in report["results"]["failed_checks"]
    ]
    scanned = {r["file_path"].lstrip("/") for report in reports for r in report["results"]["passed_checks"]}
    assert {g.name for g in GOLDEN.glob("pod-*.json")} <= scanned, "checkov did not scan every golden pod"
    return found


def test_every_finding_is_fixed_or_in_the_baseline(findings: list[Finding]) -> None:
    missing = unlisted(findings, load_baseline())

    assert not missing, "findings not in deploy/policy-baseline.yaml (fix them or add an entry with a reason):\n" + "\n".join(
        f"  {f.check} {f.resource} ({f.file})" for f in missing
    )


def test_no_baseline_entry_is_stale(findings: list[Finding]) -> None:
    old = stale(findings, load_baseline())

    assert not old, "baseline entries that match no finding any more (remove them):\n" + "\n".join(
        f"  {e.check} {e.resource}" for e in old
    )


def test_every_baseline_entry_has_a_reason() -> None:
    entries = load_baseline()

    assert entries
    assert all(e.reason and e.check.startswith("CKV") and e.resource for e in entries)


def test_lab_pods_pass_the_resource_probe_and_isolation_checks(findings: list[Finding]) -> None:
    lab = [f for f in findings if f.file.startswith("pod-")]

    assert not [f for f in lab if f.check in LAB_POD_MUST_PASS]
    # Only vLLM keeps a secret in its environment (no file option); JupyterLab reads a file.
    assert {f.file for f in lab if f.check == "CKV_K8S_35"} == {g.name for g in GOLDEN.glob("pod-*vllm*.json")}


def test_a_finding_outside_the_baseline_and_a_stale_entry_are_both_reported(tmp_path: Path) -> None:
    path = tmp_path / "baseline.yaml"
    path.write_text(
        "- {check: CKV_K8S_43, resource: 'Pod.*', reason: tags}\n- {check: CKV_K8S_99, resource: '*', reason: gone}\n"
    )
    baseline = load_baseline(path)
    findings = [Finding("CKV_K8S_43", "Pod.ns.lab-1", "pod.json"), Finding("CKV_K8S_22", "Pod.ns.lab-1", "pod.json")]

    assert unlisted(findings, baseline) == [findings[1]]
    assert [e.check for e in stale(findings, baseline)] == ["CKV_K8S_99"]


def test_a_baseline_entry_without_a_reason_is_an_error(tmp_path: Path) -> None:
    path = tmp_path / "baseline.yaml"
    path.write_text("- {check: CKV_K8S_43, resource: '*'}\n")

    with pytest.raises(ValueError, match="exactly check, resource and reason"):
        load_baseline(path)
