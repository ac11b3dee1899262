"""``python -m labs.devcluster``: a local control plane with fake Ascend nodes until Ctrl-C or SIGTERM.

Prints the API server's URL and the admin's kubeconfig, e.g.::

    python -m labs.devcluster --nodes 3 --start-delay 1
    kubectl --kubeconfig /tmp/npu-lab-devcluster-.../admin.kubeconfig get nodes
"""

from __future__ import annotations

import argparse
import signal
import sys
import tempfile
import threading
from pathlib import Path

from labs.devcluster.binaries import ControlPlaneNotBuilt
from labs.devcluster.cluster import ClusterError, DevCluster
from labs.devcluster.nodes import fake_nodes
from labs.drivers.kubernetes.profiles import PROFILES


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m labs.devcluster", description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=3, help="how many fake nodes (default 3)")
    parser.add_argument(
        "--profiles",
        default="flexnpu,vnpu,hami",
        help="the nodes' device profiles, taking turns (default flexnpu,vnpu,hami)",
    )
    parser.add_argument("--start-delay", type=float, default=1.0, help="seconds from a pod's binding to Running (default 1)")
    parser.add_argument(
        "--node-grace",
        type=int,
        default=8,
        help="seconds a node may miss its lease before it is NotReady (default 8); each lease is renewed every quarter "
        "of it, so give 40 or more for hundreds of nodes",
    )
    parser.add_argument("--dir", type=Path, help="the cluster's folder (default: a new temporary folder, removed at the end)")
    args = parser.parse_args(argv)
    profiles = tuple(p.strip() for p in args.profiles.split(",") if p.strip())
    unknown = sorted(set(profiles) - set(PROFILES))
    if unknown or not profiles:
        named = ", ".join(unknown) or "(none given)"
        parser.error(f"unknown device profile(s) {named}; choose from {', '.join(sorted(PROFILES))}")
    if args.nodes < 1:
        parser.error("--nodes must be 1 or more")
    if args.node_grace < 4:
        parser.error("--node-grace must be 4 or more")

    stop = threading.Event()
    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, lambda *_: stop.set())
    directory = args.dir or Path(tempfile.mkdtemp(prefix="npu-lab-devcluster-"))
    try:
        cluster = DevCluster(
            directory,
            nodes=fake_nodes(args.nodes, profiles=profiles),
            start_delay_seconds=args.start_delay,
            node_monitor_grace_seconds=args.node_grace,
        )
        with cluster:
            info = cluster.describe()
            print(f"API server:  {info['server']}")
            print(f"kubeconfig:  {info['kubeconfig']}")
            print(f"kubectl:     {info['kubectl']} --kubeconfig {info['kubeconfig']}")
            print("nodes:       " + ", ".join(f"{name} ({profile})" for name, profile in info["nodes"].items()))
            print("Ctrl-C stops it and removes its folder.", flush=True)
            stop.wait()
            print("stopping...", flush=True)
    except (ControlPlaneNotBuilt, ClusterError) as exc:
        print(f"devcluster: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
