"""The Kubernetes side of ``bench.jupyterhub --driver kubernetes``: a dev cluster, and the Hub's place in it.

``HubCluster.start`` starts a ``labs.devcluster`` with ceil(K / 128) FlexNPU nodes whose pods all
report the podIP 127.0.0.1 (where the bench's one stub server listens), makes the Hub's namespace,
its ServiceAccount with a Role of only what KubeSpawner does here, and a kubeconfig with that
account's token; ``profile_list`` is KubeSpawner's one profile, asking for what the portal's pod
asks for with the small template; the rest reads what is in the namespace.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from kubernetes import client
from kubernetes.utils import parse_quantity

from bench.harness import Resources
from labs.devcluster.cluster import DevCluster, processes_using
from labs.devcluster.nodes import PROFILE_LABEL, FakeNode
from labs.drivers.base import CardBinding, HostResources, LaunchSpec
from labs.drivers.kubernetes.builders import host_resources
from labs.drivers.kubernetes.profiles import FlexNPUProfile

NAMESPACE = "jupyterhub"
SERVICE_ACCOUNT = "hub"
ROLE = "kubespawner"
# What KubeSpawner does with pods and their events when it makes no PVC, Service or Secret.
ROLE_RULES = [
    {"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list", "watch", "create", "delete"]},
    {"apiGroups": [""], "resources": ["events"], "verbs": ["get", "list", "watch"]},
]
TOKEN_SECONDS = 6 * 3600
# bench.classstart's "small" template, and how many of them one 8-card node takes.
SMALL_CORE_PERCENT = 5
SMALL_MEMORY_MIB = 4096
INSTANCES_PER_NODE = 128
STUB_POD_IP = "127.0.0.1"
IMAGE = "quay.io/jupyter/base-notebook:latest"  # never pulled: the node simulator runs no container


def node_names(launches: int) -> list[str]:
    """Enough nodes for ``launches`` small labs, named as bench.classstart names its servers."""
    return [f"npu-{i + 1:03d}" for i in range(max(1, math.ceil(launches / INSTANCES_PER_NODE)))]


def portal_small_lab() -> tuple[dict[str, str], dict[str, str]]:
    """(requests, limits) of the portal's pod for the small template on the flexnpu profile, by the driver's own builders."""
    card = CardBinding(
        node="npu-001",  # the profile pins the ledger's node; only its resources are taken here
        card_index=0,
        die_id="",
        chip_type="Ascend910B",
        core_percent=SMALL_CORE_PERCENT,
        memory_mib=SMALL_MEMORY_MIB,
        scenario="development",
        card_memory_mib=64 * 1024,
    )
    spec = LaunchSpec(
        session_id="00000000-0000-0000-0000-000000000000",
        kind="jupyter",
        image=IMAGE,
        secret="",
        card=card,
        host=HostResources.for_kind("jupyter"),
    )
    requests, limits = host_resources(spec)
    device = FlexNPUProfile().render(card).resources
    return {**requests, **device}, {**limits, **device}


@dataclass
class HubCluster:
    devcluster: DevCluster
    hub_kubeconfig: Path
    namespace: str = NAMESPACE
    image: str = IMAGE

    @classmethod
    def start(cls, res: Resources, temp: Path, *, launches: int, start_delay: float) -> HubCluster:
        """The dev cluster in ``temp`` (stopped by ``res.close()``), with the Hub's namespace and credentials."""
        nodes = [FakeNode(name=name, profile="flexnpu") for name in node_names(launches)]
        devcluster = DevCluster(
            temp / "devcluster",
            nodes=nodes,
            start_delay_seconds=start_delay,
            pod_ip=STUB_POD_IP,
            keep_directory=res.keep_temp,
        )
        res.on_close("stop the dev cluster", lambda: stop_devcluster(devcluster))
        devcluster.start()
        return cls(devcluster, hub_credentials(devcluster, temp / "hub.kubeconfig"))

    @property
    def core(self) -> client.CoreV1Api:
        return client.CoreV1Api(self.devcluster.api)

    @property
    def node_selector(self) -> dict[str, str]:
        return {PROFILE_LABEL: "flexnpu"}

    def profile_list(self) -> list[dict[str, Any]]:
        """KubeSpawner's one profile: the portal's small lab's host CPU, memory, scratch disk and FlexNPU share."""
        host = HostResources.for_kind("jupyter")
        requests, limits = portal_small_lab()
        override = {
            "cpu_guarantee": host.cpu_request_millicores / 1000,
            "cpu_limit": host.cpu_limit_millicores / 1000,
            "mem_guarantee": f"{host.memory_request_mib}M",  # KubeSpawner's M is MiB
            "mem_limit": f"{host.memory_limit_mib}M",
            "extra_resource_guarantees": {k: v for k, v in requests.items() if k not in ("cpu", "memory")},
            "extra_resource_limits": {k: v for k, v in limits.items() if k not in ("cpu", "memory")},
        }
        name = f"small: {SMALL_CORE_PERCENT} % of an Ascend 910B, {SMALL_MEMORY_MIB // 1024} GiB"
        return [{"display_name": name, "slug": "small", "default": True, "kubespawner_override": override}]

    def pod_resources_as_portal(self) -> bool | str:
        """True when a pod KubeSpawner made asks for what the portal's pod asks for; else what differs."""
        pods = self.core.list_namespaced_pod(self.namespace, limit=1).items
        if not pods:
            return "no pod to look at"
        resources = pods[0].spec.containers[0].resources
        want_requests, want_limits = portal_small_lab()
        differs = []
        for what, got, want in (("requests", resources.requests, want_requests), ("limits", resources.limits, want_limits)):
            got = {k: parse_quantity(v) for k, v in (got or {}).items()}
            want = {k: parse_quantity(v) for k, v in want.items()}
            if got != want:
                differs.append(f"{what} {got} instead of {want}")
        return "; ".join(differs) or True

    def pods(self) -> list[str]:
        return [pod.metadata.name for pod in self.core.list_namespaced_pod(self.namespace).items]

    def left_over(self) -> dict[str, int]:
        """What KubeSpawner could have left in its namespace: pods, services, secrets, PVCs."""
        core = self.core
        return {
            "pods": len(core.list_namespaced_pod(self.namespace).items),
            "services": len(core.list_namespaced_service(self.namespace).items),
            "secrets": len(core.list_namespaced_secret(self.namespace).items),
            "PVCs": len(core.list_namespaced_persistent_volume_claim(self.namespace).items),
        }


def hub_credentials(devcluster: DevCluster, path: Path) -> Path:
    """The Hub's namespace, ServiceAccount, Role and RoleBinding; a kubeconfig at ``path`` with the account's token."""
    core = client.CoreV1Api(devcluster.api)
    rbac = client.RbacAuthorizationV1Api(devcluster.api)
    core.create_namespace({"metadata": {"name": NAMESPACE}})
    devcluster.wait_for_service_account(NAMESPACE)  # the ServiceAccount admission refuses pods before it
    core.create_namespaced_service_account(NAMESPACE, {"metadata": {"name": SERVICE_ACCOUNT}})
    rbac.create_namespaced_role(NAMESPACE, {"metadata": {"name": ROLE}, "rules": ROLE_RULES})
    rbac.create_namespaced_role_binding(
        NAMESPACE,
        {
            "metadata": {"name": ROLE},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": ROLE},
            "subjects": [{"kind": "ServiceAccount", "name": SERVICE_ACCOUNT, "namespace": NAMESPACE}],
        },
    )
    request = core.create_namespaced_service_account_token(
        SERVICE_ACCOUNT, NAMESPACE, {"spec": {"expirationSeconds": TOKEN_SECONDS}}
    )
    user = f"system:serviceaccount:{NAMESPACE}:{SERVICE_ACCOUNT}"
    document = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {"name": "devcluster", "cluster": {"server": devcluster.server, "certificate-authority": str(devcluster.ca_file)}}
        ],
        "users": [{"name": user, "user": {"token": request.status.token}}],
        "contexts": [{"name": "hub", "context": {"cluster": "devcluster", "user": user, "namespace": NAMESPACE}}],
        "current-context": "hub",
    }
    descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(descriptor, "w") as handle:
        handle.write(yaml.safe_dump(document, sort_keys=False))
    return path


def stop_devcluster(devcluster: DevCluster) -> None:
    """Stop it, and say whether any of its processes outlived it."""
    devcluster.stop()
    left = list(processes_using(devcluster.directory))
    if left:
        print(f"dev cluster stopped, but processes are left: {left}", flush=True)
    else:
        print(f"dev cluster stopped: {len(devcluster.pids())} processes ended, none left", flush=True)
