"""``DevCluster``: etcd, kube-apiserver, kube-scheduler and kube-controller-manager on free ports.

Everything lives in one folder (certificates, kubeconfigs, etcd's data, each process's log) and
goes with it: ``stop`` ends every process it started and removes the folder. What runs is the
real control plane, configured as a kubeadm cluster would be:

* etcd, serving only TLS clients with a certificate from the cluster's CA;
* kube-apiserver with client-certificate and ServiceAccount-token authentication (anonymous
  requests are ``system:anonymous``, which RBAC allows only the health and version paths),
  ``--authorization-mode=Node,RBAC`` and the default admission plugins plus NodeRestriction,
  ResourceQuota and LimitRanger, and an audit log of the requests of every ServiceAccount
  outside ``kube-system`` (the portal's, JupyterHub's; ``request_counts``);
* kube-scheduler with two profiles of the default plugins, ``default-scheduler`` and
  ``volcano`` (so pods that name Volcano are scheduled, on extended resources; Volcano's own
  plugins, such as FlexNPU's ``flexnpuaffinity``, do not run);
* kube-controller-manager with every default controller (garbage collector, namespace,
  ServiceAccount and token, ResourceQuota, node lifecycle, ...), each with its own
  ServiceAccount's credentials;

then the fake nodes and their kubelets (``labs.devcluster.simulator``).
"""

from __future__ import annotations

import contextlib
import ctypes
import http.client
import json
import os
import shutil
import signal
import socket
import ssl
import subprocess
import time
from collections import Counter
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from kubernetes import client, config
from prometheus_client.parser import text_string_to_metric_families

from labs.devcluster.binaries import Release, require_built
from labs.devcluster.nodes import SIMULATED_LABEL, FakeNode, fake_nodes
from labs.devcluster.pki import CertFiles, CertificateAuthority, service_account_keys
from labs.devcluster.simulator import NodeSimulator, checked_pod_ip

SERVICE_CIDR = "10.96.0.0/12"
SERVICE_IP = "10.96.0.1"
ISSUER = "https://kubernetes.default.svc.cluster.local"
SCHEDULER_NAMES = ("default-scheduler", "volcano")
LOOPBACK = "127.0.0.1"
PR_SET_PDEATHSIG = 1
# How long a Ready node may keep its not-ready taint before its status is reported again.
NODE_STATUS_NUDGE_SECONDS = 15.0
# apiserver_request_total's verbs as the audit log (and RBAC) names them; the rest are lowered.
METRIC_VERBS = {"POST": "create", "PUT": "update", "APPLY": "patch"}
# The API server's audit policy: the metadata (who, verb, resource; no bodies) of each request
# of a ServiceAccount outside kube-system, when it is received. The components' requests (the
# controller-manager's ServiceAccounts, the scheduler's and the node simulator's certificates)
# are not logged: a thousand nodes' lease renewals would cost more than the requests counted.
# Logged when received, before the request is served, so a count read after a call returns
# includes it, and a watch counts when it starts.
AUDIT_POLICY = {
    "apiVersion": "audit.k8s.io/v1",
    "kind": "Policy",
    "omitStages": ["ResponseStarted", "ResponseComplete"],
    "rules": [
        {"level": "None", "userGroups": ["system:serviceaccounts:kube-system"]},
        {"level": "Metadata", "userGroups": ["system:serviceaccounts"]},
        {"level": "None"},
    ],
}


class ClusterError(RuntimeError):
    """A component did not start; the message ends with its log's last lines."""


def free_ports(count: int) -> list[int]:
    """``count`` distinct ports free on the loopback address now (held together, so they differ)."""
    with contextlib.ExitStack() as stack:
        sockets = []
        for _ in range(count):
            sock = stack.enter_context(socket.socket(socket.AF_INET, socket.SOCK_STREAM))
            sock.bind((LOOPBACK, 0))
            sockets.append(sock)
        return [sock.getsockname()[1] for sock in sockets]


def _die_with_parent() -> None:
    """In the child, before exec: SIGTERM it when the process that started it dies (even by SIGKILL)."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(PR_SET_PDEATHSIG, signal.SIGTERM)


@dataclass
class Component:
    """One running binary and its log file."""

    name: str
    process: subprocess.Popen[bytes]
    log: Path

    def tail(self, lines: int = 25) -> str:
        try:
            return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no log)"


class DevCluster:
    """A control plane with ``nodes`` fake Ascend nodes, in ``directory`` (made if missing; removed by ``stop``).

    ``nodes``: a count (their profiles take turns: flexnpu, vnpu, hami) or the ``FakeNode``\\ s.
    ``start_delay_seconds``: how long a bound pod takes to be Running and Ready.
    ``node_monitor_grace_seconds``: how long a node may miss its lease before the
    controller-manager marks it NotReady (a real cluster's default is 50). It also sets the
    lease's duration (at least 4 s), and the simulator renews each lease at a quarter of that,
    as a kubelet does: ``nodes / (grace / 4)`` renewals a second. The default 8 s suits a few
    nodes (the tests lose one and wait for NotReady); for a thousand, give 40 (a renewal every
    10 s, a kubelet's default: 100 a second) or more (120: 33 a second), or the renewals alone
    keep a small machine busy.
    ``pod_ip``: the address every running pod reports, e.g. ``"127.0.0.1"`` where one stub
    server answers for all of them; ``None`` (the default): each pod an address of its own.

    Start it from a thread that outlives it (the main thread): each component is told to end
    when the thread that started it does, so none outlives a killed test run.
    """

    def __init__(
        self,
        directory: Path,
        *,
        nodes: int | Sequence[FakeNode] = 3,
        start_delay_seconds: float = 1.0,
        node_monitor_grace_seconds: int = 8,
        pod_ip: str | None = None,
        release: Release | None = None,
        keep_directory: bool = False,
    ) -> None:
        self.release = require_built(release)
        self.directory = Path(directory)
        self.nodes = fake_nodes(nodes) if isinstance(nodes, int) else list(nodes)
        self.start_delay_seconds = start_delay_seconds
        self.node_monitor_grace_seconds = node_monitor_grace_seconds
        self.pod_ip = checked_pod_ip(pod_ip)
        self.keep_directory = keep_directory
        self.components: list[Component] = []
        self.simulator: NodeSimulator | None = None
        self._api: client.ApiClient | None = None
        self.server = ""
        self.pki = self.directory / "pki"
        self.kubeconfig = self.directory / "admin.kubeconfig"
        self.audit_log = self.directory / "audit.log"
        self.start_seconds: dict[str, float] = {}

    # -- the public face -------------------------------------------------------------------------

    def __enter__(self) -> DevCluster:
        try:
            self.start()
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def ca_file(self) -> Path:
        return self.pki / "ca.crt"

    @property
    def api(self) -> client.ApiClient:
        """An API client authenticated as the admin (``system:masters``)."""
        if self._api is None:
            self._api = self.api_client(self.kubeconfig)
        return self._api

    def api_client(self, kubeconfig: Path) -> client.ApiClient:
        configuration = client.Configuration()
        config.load_kube_config(config_file=str(kubeconfig), client_configuration=configuration, persist_config=False)
        configuration.connection_pool_maxsize = 16
        return client.ApiClient(configuration)

    def token_client(self, token: str) -> client.ApiClient:
        """An API client that authenticates with a bearer ``token`` (a ServiceAccount's)."""
        configuration = client.Configuration()
        configuration.host = self.server
        configuration.ssl_ca_cert = str(self.ca_file)
        configuration.api_key = {"authorization": f"Bearer {token}"}
        return client.ApiClient(configuration)

    def kubectl(self, *args: str, check: bool = True, input: str | None = None) -> subprocess.CompletedProcess[str]:
        """``kubectl`` as the admin."""
        command = [str(self.release.binary("kubectl")), f"--kubeconfig={self.kubeconfig}", *args]
        return subprocess.run(command, capture_output=True, text=True, check=check, input=input, timeout=120)

    # -- start -----------------------------------------------------------------------------------

    def start(self) -> None:
        """Start everything; ``start_seconds`` then says how long each part took."""
        began = time.monotonic()
        self.directory.mkdir(parents=True, exist_ok=True)
        (etcd_port, peer_port, api_port, kcm_port, scheduler_port) = free_ports(5)
        self.server = f"https://{LOOPBACK}:{api_port}"
        certs = self._certificates()
        self._start_etcd(certs, etcd_port, peer_port)
        self._wait_https("etcd", f"https://{LOOPBACK}:{etcd_port}/health", certs["apiserver-etcd-client"])
        self._start_apiserver(certs, etcd_port, api_port)
        self._wait_https("kube-apiserver", f"{self.server}/readyz", certs["admin"])
        self._kubeconfig("admin", certs["admin"])
        self._start_controller_manager(certs, kcm_port)
        self._start_scheduler(certs, scheduler_port)
        self._wait_https("kube-controller-manager", f"https://{LOOPBACK}:{kcm_port}/healthz", None)
        self._wait_https("kube-scheduler", f"https://{LOOPBACK}:{scheduler_port}/healthz", None)
        self.start_seconds["control plane"] = time.monotonic() - began
        self.simulator = NodeSimulator(
            self.api_client(self._kubeconfig("node-simulator", certs["node-simulator"])),
            self.nodes,
            start_delay_seconds=self.start_delay_seconds,
            lease_duration_seconds=max(4, self.node_monitor_grace_seconds),
            kubelet_version=self.release.kubernetes,
            pod_ip=self.pod_ip,
        )
        registering = time.monotonic()
        self.simulator.start()
        self.start_seconds["nodes registered"] = time.monotonic() - registering
        # The node lifecycle controller lifts each new node's not-ready taint: a minute, plus
        # a little for each node on a big cluster.
        self.wait_for_nodes_ready(timeout=60.0 + 0.06 * len(self.nodes))
        self.wait_for_service_account("default")
        self.start_seconds["nodes ready"] = time.monotonic() - registering

    def _certificates(self) -> dict[str, CertFiles]:
        ca = CertificateAuthority(self.pki)
        service_names = ("kubernetes", "kubernetes.default", "kubernetes.default.svc", "kubernetes.default.svc.cluster.local")
        return {
            "ca": ca.files,
            # etcd's gateway dials etcd itself with this certificate: a client one too.
            "etcd": ca.issue("etcd", "etcd", server_names=(LOOPBACK, "localhost"), client=True),
            "apiserver": ca.issue(
                "apiserver", "kube-apiserver", server_names=(LOOPBACK, "localhost", SERVICE_IP, *service_names)
            ),
            "apiserver-etcd-client": ca.issue("apiserver-etcd-client", "kube-apiserver-etcd-client", client=True),
            "admin": ca.issue("admin", "devcluster-admin", organizations=("system:masters",), client=True),
            "controller-manager": ca.issue("controller-manager", "system:kube-controller-manager", client=True),
            "scheduler": ca.issue("scheduler", "system:kube-scheduler", client=True),
            # The simulated kubelets of every fake node: one identity, so no per-node certificates.
            "node-simulator": ca.issue(
                "node-simulator", "devcluster-node-simulator", organizations=("system:masters",), client=True
            ),
            "service-account": service_account_keys(self.pki),
        }

    def _kubeconfig(self, user: str, cert: CertFiles) -> Path:
        path = self.directory / f"{user}.kubeconfig"
        document = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [{"name": "devcluster", "cluster": {"server": self.server, "certificate-authority": str(self.ca_file)}}],
            "users": [{"name": user, "user": {"client-certificate": str(cert.cert), "client-key": str(cert.key)}}],
            "contexts": [{"name": user, "context": {"cluster": "devcluster", "user": user}}],
            "current-context": user,
        }
        path.write_text(yaml.safe_dump(document, sort_keys=False))
        path.chmod(0o600)
        return path

    def _spawn(self, name: str, *args: str) -> Component:
        log = self.directory / f"{name}.log"
        with open(log, "wb") as out:
            process = subprocess.Popen(
                [str(self.release.binary(name)), *args],
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                cwd=self.directory,
                start_new_session=True,  # Ctrl-C reaches us, and we stop them in order
                preexec_fn=_die_with_parent,
            )
        component = Component(name, process, log)
        self.components.append(component)
        return component

    def _start_etcd(self, certs: dict[str, CertFiles], port: int, peer_port: int) -> None:
        client_url, peer_url = f"https://{LOOPBACK}:{port}", f"http://{LOOPBACK}:{peer_port}"
        self._spawn(
            "etcd",
            "--name=devcluster",
            f"--data-dir={self.directory / 'etcd'}",
            f"--listen-client-urls={client_url}",
            f"--advertise-client-urls={client_url}",
            f"--listen-peer-urls={peer_url}",
            f"--initial-advertise-peer-urls={peer_url}",
            f"--initial-cluster=devcluster={peer_url}",
            f"--cert-file={certs['etcd'].cert}",
            f"--key-file={certs['etcd'].key}",
            f"--trusted-ca-file={certs['ca'].cert}",
            "--client-cert-auth=true",
            # A throwaway cluster: losing the last writes on a power cut does not matter here.
            "--unsafe-no-fsync=true",
            "--log-level=warn",
        )

    def _start_apiserver(self, certs: dict[str, CertFiles], etcd_port: int, port: int) -> None:
        policy = self.directory / "audit-policy.yaml"
        policy.write_text(yaml.safe_dump(AUDIT_POLICY, sort_keys=False))
        self._spawn(
            "kube-apiserver",
            f"--etcd-servers=https://{LOOPBACK}:{etcd_port}",
            f"--etcd-cafile={certs['ca'].cert}",
            f"--etcd-certfile={certs['apiserver-etcd-client'].cert}",
            f"--etcd-keyfile={certs['apiserver-etcd-client'].key}",
            f"--bind-address={LOOPBACK}",
            f"--advertise-address={LOOPBACK}",
            f"--secure-port={port}",
            f"--tls-cert-file={certs['apiserver'].cert}",
            f"--tls-private-key-file={certs['apiserver'].key}",
            f"--client-ca-file={certs['ca'].cert}",
            f"--service-account-issuer={ISSUER}",
            f"--service-account-key-file={certs['service-account'].cert}",
            f"--service-account-signing-key-file={certs['service-account'].key}",
            f"--service-cluster-ip-range={SERVICE_CIDR}",
            "--authorization-mode=Node,RBAC",
            "--enable-admission-plugins=NodeRestriction,ResourceQuota,LimitRanger",
            "--allow-privileged=true",
            # No kube-proxy and no other API server: nobody follows the kubernetes Service's endpoints.
            "--endpoint-reconciler-type=none",
            f"--audit-policy-file={policy}",
            f"--audit-log-path={self.audit_log}",
            "--audit-log-format=json",
            "--audit-log-mode=blocking",  # written before the request goes on: a count read later includes it
            "--audit-log-maxsize=0",  # never rotated: the cluster's folder goes with it
            "--profiling=false",
        )

    def _start_controller_manager(self, certs: dict[str, CertFiles], port: int) -> None:
        self._spawn(
            "kube-controller-manager",
            f"--kubeconfig={self._kubeconfig('controller-manager', certs['controller-manager'])}",
            f"--bind-address={LOOPBACK}",
            f"--secure-port={port}",
            "--controllers=*",
            "--use-service-account-credentials=true",
            f"--service-account-private-key-file={certs['service-account'].key}",
            f"--root-ca-file={certs['ca'].cert}",
            f"--cluster-signing-cert-file={certs['ca'].cert}",
            f"--cluster-signing-key-file={certs['ca'].key}",
            f"--service-cluster-ip-range={SERVICE_CIDR}",
            "--leader-elect=false",
            # Each controller's client may send 20 requests a second by default: the node
            # lifecycle controller lifting the not-ready taint of a thousand new nodes, or the
            # garbage collector and the endpoints controllers following a thousand labs, would
            # queue behind that for minutes.
            "--kube-api-qps=200",
            "--kube-api-burst=400",
            # A node's health is checked every period against its lease; a real cluster's
            # 5 s is enough unless the grace is short (the tests' 8 s).
            f"--node-monitor-period={max(1, min(5, self.node_monitor_grace_seconds // 8))}s",
            f"--node-monitor-grace-period={self.node_monitor_grace_seconds}s",
            # Its default is a folder under /usr/libexec, which it would make on this machine.
            f"--flex-volume-plugin-dir={self.directory / 'flexvolume'}",
            "--profiling=false",
        )

    def _start_scheduler(self, certs: dict[str, CertFiles], port: int) -> None:
        kubeconfig = self._kubeconfig("scheduler", certs["scheduler"])
        settings = {
            "apiVersion": "kubescheduler.config.k8s.io/v1",
            "kind": "KubeSchedulerConfiguration",
            "clientConnection": {"kubeconfig": str(kubeconfig), "qps": 200, "burst": 400},
            "leaderElection": {"leaderElect": False},
            "profiles": [{"schedulerName": name} for name in SCHEDULER_NAMES],
        }
        path = self.directory / "scheduler.yaml"
        path.write_text(yaml.safe_dump(settings, sort_keys=False))
        self._spawn("kube-scheduler", f"--config={path}", f"--bind-address={LOOPBACK}", f"--secure-port={port}")

    def _component(self, name: str) -> Component:
        return next(c for c in self.components if c.name == name)

    def _wait_https(self, name: str, url: str, cert: CertFiles | None, timeout: float = 60.0) -> None:
        """Until ``url`` answers 200 (the CA checked when the cluster's; self-signed components are not)."""
        component = self._component(name)
        if cert is None:
            context = ssl._create_unverified_context()  # noqa: S323 - the component's own self-signed certificate
        else:
            context = ssl.create_default_context(cafile=str(self.ca_file))
            context.load_cert_chain(str(cert.cert), str(cert.key))
        host, port_path = url.removeprefix("https://").split(":", 1)
        port, path = port_path.split("/", 1)
        deadline = time.monotonic() + timeout
        last = ""
        while time.monotonic() < deadline:
            if component.process.poll() is not None:
                raise ClusterError(f"{name} exited with {component.process.returncode}:\n{component.tail()}")
            connection = http.client.HTTPSConnection(host, int(port), context=context, timeout=5)
            try:
                connection.request("GET", f"/{path}")
                response = connection.getresponse()
                last = f"{response.status} {response.read(300).decode(errors='replace')}"
                if response.status == 200:
                    return
            except OSError as exc:
                last = repr(exc)
            finally:
                connection.close()
            time.sleep(0.1)
        raise ClusterError(f"{name} was not ready in {timeout:.0f} s (last answer: {last}):\n{component.tail()}")

    def wait_for_nodes_ready(self, timeout: float = 60.0) -> None:
        """Until every fake node is Ready and carries no taint (the controller-manager lifts not-ready's)."""
        core = client.CoreV1Api(self.api)
        names = {node.name for node in self.nodes}
        deadline = time.monotonic() + timeout
        reported = time.monotonic()
        pending: set[str] = names
        tainted: list[str] = []
        while time.monotonic() < deadline:
            pending, tainted = set(names), []
            # Raw JSON: the client's models take seconds for a thousand nodes.
            listed = core.list_node(label_selector=f"{SIMULATED_LABEL}=true", _preload_content=False)
            for node in json.loads(listed.data)["items"]:
                conditions = (node.get("status") or {}).get("conditions") or []
                ready = any(c["type"] == "Ready" and c["status"] == "True" for c in conditions)
                if ready and not node["spec"].get("taints"):
                    pending.discard(node["metadata"]["name"])
                elif ready:
                    tainted.append(node["metadata"]["name"])
            if not pending:
                return
            if tainted and self.simulator is not None and time.monotonic() - reported > NODE_STATUS_NUDGE_SECONDS:
                # The node lifecycle controller lifts the taint when it sees the node change and,
                # when that fails, does not try again (a TODO in its doNodeProcessingPassWorker)
                # until the node's next change: a kubelet's status report, minutes later. Now.
                self.simulator.report_status(tainted)
                reported = time.monotonic()
            time.sleep(0.2 if len(names) < 100 else 1.0)
        shown = ", ".join(sorted(pending)[:20]) + (f" and {len(pending) - 20} more" if len(pending) > 20 else "")
        raise ClusterError(
            f"nodes not Ready and untainted after {timeout:.0f} s ({len(tainted)} Ready but tainted): {shown}"
        )

    def wait_for_service_account(self, namespace: str, name: str = "default", timeout: float = 30.0) -> None:
        """Until the controller-manager has made ``namespace``'s ServiceAccount ``name`` (pods need it)."""
        core = client.CoreV1Api(self.api)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if any(sa.metadata.name == name for sa in core.list_namespaced_service_account(namespace).items):
                return
            time.sleep(0.1)
        raise ClusterError(f"no ServiceAccount {namespace}/{name} after {timeout:.0f} s")

    # -- what the API server was asked -----------------------------------------------------------

    def request_counts(self, user: str) -> Counter[tuple[str, str]]:
        """How many requests ``user`` (a ServiceAccount outside kube-system, e.g.
        ``system:serviceaccount:npu-lab-portal:npu-lab-portal``) has made since the cluster
        started, by ``(verb, resource)``: ``("create", "pods")``, ``("list", "pods")``,
        ``("watch", "pods")``, ``("create", "serviceaccounts/token")`` (a subresource after a
        slash), a path for a request that names no resource (``("get", "/version")``).

        Read from the API server's audit log, which names the user of each request (its
        ``apiserver_request_total`` metric does not: see ``metric_request_counts``). Subtract
        two counts for the requests in between.
        """
        counts: Counter[tuple[str, str]] = Counter()
        try:
            lines = self.audit_log.read_text().splitlines()
        except FileNotFoundError:
            return counts
        for line in lines:
            event = json.loads(line)
            if event["stage"] != "RequestReceived" or event["user"].get("username") != user:
                continue
            ref = event.get("objectRef")
            if ref and ref.get("resource"):
                resource = ref["resource"] + (f"/{ref['subresource']}" if ref.get("subresource") else "")
            else:
                resource = event["requestURI"].split("?", 1)[0]
            counts[(event["verb"], resource)] += 1
        return counts

    def metric_request_counts(self) -> Counter[tuple[str, str]]:
        """Every client's requests since the API server started, by ``(verb, resource)`` as in
        ``request_counts``, from its own ``apiserver_request_total`` (its HTTP verbs named as the
        audit log names them: ``POST`` is ``create``, ``PUT`` ``update``): the scheduler's
        bindings, the node simulator's status updates and lease renewals, the controllers'
        requests, the portal's. A request is counted when it ends (a watch, when it closes)."""
        response = self.api.call_api(
            "/metrics", "GET", auth_settings=["BearerToken"], _preload_content=False, _return_http_data_only=True
        )
        text = response.data.decode()
        counts: Counter[tuple[str, str]] = Counter()
        for family in text_string_to_metric_families(text):
            if family.name != "apiserver_request":  # the parser drops a counter's _total
                continue
            for sample in family.samples:
                if not sample.name.endswith("_total"):
                    continue
                labels = sample.labels
                if labels.get("resource"):
                    resource = labels["resource"] + (f"/{labels['subresource']}" if labels.get("subresource") else "")
                else:  # a request for a path, which the metric keeps as its subresource
                    resource = labels.get("subresource", "")
                verb = METRIC_VERBS.get(labels["verb"], labels["verb"].lower())
                counts[(verb, resource)] += int(sample.value)
        return counts

    # -- stop ------------------------------------------------------------------------------------

    def stop(self, timeout: float = 10.0) -> None:
        """End the simulator and every process (SIGTERM, then SIGKILL after ``timeout``); remove the folder."""
        if self.simulator is not None:
            self.simulator.stop(timeout=0)
        # The scheduler and the controller-manager first, then the API server, then etcd.
        for group in (("kube-scheduler", "kube-controller-manager"), ("kube-apiserver",), ("etcd",)):
            stopping = [c for c in self.components if c.name in group and c.process.poll() is None]
            for component in stopping:
                component.process.terminate()
            for component in stopping:
                try:
                    component.process.wait(timeout)
                except subprocess.TimeoutExpired:
                    component.process.kill()
                    component.process.wait()
        if self.simulator is not None:
            self.simulator.stop(timeout=timeout)
        if self._api is not None:
            self._api.close()
            self._api = None
        if not self.keep_directory:
            shutil.rmtree(self.directory, ignore_errors=True)

    def pids(self) -> dict[str, int]:
        return {c.name: c.process.pid for c in self.components}

    def describe(self) -> dict[str, Any]:
        """What ``python -m labs.devcluster`` prints: where to connect, as JSON-ready values."""
        return {
            "server": self.server,
            "kubeconfig": str(self.kubeconfig),
            "kubectl": str(self.release.binary("kubectl")),
            "nodes": {node.name: node.profile for node in self.nodes},
            "directory": str(self.directory),
        }


def processes_using(directory: Path) -> Iterator[tuple[int, str]]:
    """(pid, command line) of every live process whose command line names ``directory``."""
    needle = str(directory)
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            command = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if needle in command and int(entry.name) != os.getpid():
            yield int(entry.name), command.strip()

