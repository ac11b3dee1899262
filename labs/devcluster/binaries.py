"""The control plane's binaries: where they are cached, and their one build (``make controlplane``).

``tools/controlplane/go.mod`` pins Kubernetes and etcd; this module builds ``kube-apiserver``,
``kube-scheduler``, ``kube-controller-manager``, ``kubectl`` and ``etcd`` from it with the Go
toolchain on the machine, once per version, into a folder outside the work tree::

    ${XDG_CACHE_HOME:-~/.cache}/npu-lab-portal/controlplane/<kubernetes>-<etcd>/bin/

A stamp beside ``bin/`` records what was built (the versions, the hashes of go.mod and go.sum,
the Go version and the build flags); a build whose stamp matches does nothing. Only the standard
library is used, so the build runs before the project's virtualenv exists.

Run as ``python -m labs.devcluster.binaries`` (build if needed, print the folder) or with
``--path`` (print the folder, build nothing).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

MODULE_DIR = Path(__file__).resolve().parents[2] / "tools" / "controlplane"
KUBERNETES_MODULE = "k8s.io/kubernetes"
ETCD_MODULE = "go.etcd.io/etcd/server/v3"
# Binary name -> Go package. etcd's server module is itself its main package.
PROGRAMS = {
    "kube-apiserver": "k8s.io/kubernetes/cmd/kube-apiserver",
    "kube-controller-manager": "k8s.io/kubernetes/cmd/kube-controller-manager",
    "kube-scheduler": "k8s.io/kubernetes/cmd/kube-scheduler",
    "kubectl": "k8s.io/kubernetes/cmd/kubectl",
    "etcd": ETCD_MODULE,
}
# As Kubernetes' own release build (hack/lib/golang.sh): static, no debug symbols, no x/net
# trace in gRPC; "notest" leaves test-only code out. -trimpath keeps this machine's paths out.
BUILD_TAGS = "selinux,notest,grpcnotrace"
BUILD_FLAGS = ("-trimpath", f"-tags={BUILD_TAGS}")
MISSING_HINT = "run `make controlplane` (once; a cold build takes about 7 minutes on two cores)"


class ControlPlaneNotBuilt(RuntimeError):
    """The binaries for the pinned versions are not in the cache."""


@dataclass(frozen=True)
class Release:
    """The pinned versions and where their binaries live."""

    kubernetes: str
    etcd: str
    root: Path

    @property
    def bin_dir(self) -> Path:
        return self.root / "bin"

    @property
    def stamp(self) -> Path:
        return self.root / "stamp.json"

    def binary(self, name: str) -> Path:
        return self.bin_dir / name


def _required_version(go_mod: str, module: str) -> str:
    match = re.search(rf"^\s*{re.escape(module)}\s+(v\S+)", go_mod, re.MULTILINE)
    if not match:
        raise ValueError(f"{MODULE_DIR / 'go.mod'} does not require {module}")
    return match.group(1)


def cache_home() -> Path:
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")


def release() -> Release:
    """The versions tools/controlplane/go.mod pins, and their cache folder."""
    go_mod = (MODULE_DIR / "go.mod").read_text()
    kubernetes = _required_version(go_mod, KUBERNETES_MODULE)
    etcd = _required_version(go_mod, ETCD_MODULE)
    return Release(kubernetes, etcd, cache_home() / "npu-lab-portal" / "controlplane" / f"{kubernetes}-{etcd}")


def _ldflags(kubernetes: str) -> str:
    """What ``kubectl version`` and the API server's /version report (hack/lib/version.sh's -X flags).

    No build date and no commit: the proxy's zip has no git history, and a date would make two
    builds of the same version differ.
    """
    major, minor = re.match(r"v(\d+)\.(\d+)", kubernetes).groups()
    values = {"gitVersion": kubernetes, "gitMajor": major, "gitMinor": minor}
    flags = ["-s", "-w"]
    for package in ("k8s.io/client-go/pkg/version", "k8s.io/component-base/version"):
        flags += [f"-X={package}.{key}={value}" for key, value in values.items()]
    return " ".join(flags)


def _go() -> str:
    found = shutil.which("go") or ("/usr/local/go/bin/go" if os.access("/usr/local/go/bin/go", os.X_OK) else None)
    if not found:
        raise SystemExit("controlplane: no Go toolchain on PATH (go 1.25 or later is needed to build the control plane)")
    return found


def _go_env() -> dict[str, str]:
    # GOTOOLCHAIN=local: never fetch another Go toolchain; fail instead if go.mod needs a newer one.
    return {**os.environ, "CGO_ENABLED": "0", "GOTOOLCHAIN": "local"}


def _wanted_stamp(target: Release, go: str) -> dict[str, object]:
    go_version = subprocess.run([go, "env", "GOVERSION"], env=_go_env(), capture_output=True, text=True, check=True)
    digest = hashlib.sha256()
    for name in ("go.mod", "go.sum"):
        digest.update((MODULE_DIR / name).read_bytes())
    return {
        "kubernetes": target.kubernetes,
        "etcd": target.etcd,
        "module_sha256": digest.hexdigest(),
        "go": go_version.stdout.strip(),
        "flags": [*BUILD_FLAGS, _ldflags(target.kubernetes)],
        "programs": sorted(PROGRAMS),
    }


def read_stamp(target: Release) -> dict[str, object] | None:
    try:
        return json.loads(target.stamp.read_text())
    except (OSError, ValueError):
        return None


def require_built(target: Release | None = None) -> Release:
    """The release whose binaries are all in the cache, else ``ControlPlaneNotBuilt`` saying what to run."""
    target = target or release()
    missing = [name for name in PROGRAMS if not os.access(target.binary(name), os.X_OK)]
    if read_stamp(target) is None or missing:
        raise ControlPlaneNotBuilt(
            f"The control plane (Kubernetes {target.kubernetes}, etcd {target.etcd}) is not built in "
            f"{target.bin_dir}{' (missing: ' + ', '.join(missing) + ')' if missing else ''}: {MISSING_HINT}."
        )
    return target


def build(target: Release | None = None, *, log=print) -> Release:
    """Build the binaries into the release's cache folder unless its stamp says they are there."""
    target = target or release()
    go = _go()
    wanted = _wanted_stamp(target, go)
    if read_stamp(target) == wanted and all(os.access(target.binary(name), os.X_OK) for name in PROGRAMS):
        log(f"controlplane: Kubernetes {target.kubernetes} and etcd {target.etcd} already built in {target.bin_dir}")
        return target
    log(f"controlplane: building Kubernetes {target.kubernetes} and etcd {target.etcd} into {target.bin_dir} (once)")
    began = time.monotonic()
    staging = target.root / "bin.partial"
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir(parents=True)
    # One `go build` for all five: the packages they share are compiled once. Named by their
    # last path element, so etcd's server module (".../server/v3") comes out as "server".
    subprocess.run(
        [go, "build", *BUILD_FLAGS, f"-ldflags={_ldflags(target.kubernetes)}", "-o", str(staging), *PROGRAMS.values()],
        cwd=MODULE_DIR,
        env=_go_env(),
        check=True,
    )
    (staging / "server").rename(staging / "etcd")
    target.stamp.unlink(missing_ok=True)
    shutil.rmtree(target.bin_dir, ignore_errors=True)
    staging.rename(target.bin_dir)
    target.stamp.write_text(json.dumps(wanted, indent=2) + "\n")
    log(f"controlplane: built in {time.monotonic() - began:.0f} s")
    return target


def main(argv: list[str]) -> int:
    if argv == ["--path"]:
        print(release().bin_dir)
        return 0
    if argv:
        print("usage: python -m labs.devcluster.binaries [--path]", file=sys.stderr)
        return 2
    try:
        build()
    except subprocess.CalledProcessError as exc:
        print(f"controlplane: the build failed ({exc})", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
