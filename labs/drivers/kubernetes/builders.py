"""Pure builders of the Kubernetes objects a lab session needs; no API calls.

Like KubeSpawner's ``make_pod``: every function takes plain values and returns a plain dict
(the JSON the API server receives), so the objects can be checked against golden files and
handed to the official client as request bodies unchanged.

Names are derived from the session id, so any process can find a session's objects again:
pod and service ``lab-<session-id>``, secret ``lab-<session-id>-secret``, all in the course's
namespace ``<namespace_prefix><course>``. The session's secret (Jupyter token, vLLM API key)
lives only in the Secret: JupyterLab reads it as a mounted file (``JUPYTER_TOKEN_FILE``); vLLM
takes its key only from ``--api-key`` or ``VLLM_API_KEY``, so its pod refers to it with
``secretKeyRef`` (listed with that reason in ``deploy/policy-baseline.yaml``).

Every lab pod asks for the template's host CPU, memory and scratch disk (requests and limits),
runs with a read-only root filesystem and writes only to the ``emptyDir`` volumes of
``WRITABLE_DIRS`` (and the persistent home, when configured).
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass, field
from decimal import ROUND_DOWN, Decimal

from labs.drivers.base import CardBinding, DriverError, DriverRefused, LaunchSpec, launches_vllm_serve
from labs.drivers.kubernetes.profiles import DeviceProfile

LABEL_PREFIX = "npu-lab.portal"
SESSION_LABEL = f"{LABEL_PREFIX}/session-id"
COURSE_LABEL = f"{LABEL_PREFIX}/course"
STUDENT_LABEL = f"{LABEL_PREFIX}/student"
KIND_LABEL = f"{LABEL_PREFIX}/kind"
MANAGED_BY = {"app.kubernetes.io/managed-by": "npu-lab-portal"}
SESSION_SELECTOR = "app.kubernetes.io/managed-by=npu-lab-portal,app.kubernetes.io/component=lab-session"
SECRET_KEY = "token"
SECRET_MOUNT_PATH = "/var/run/lab-secret"
JUPYTER_PORT = 8888
VLLM_PORT = 8000
SCHEDULER_NAME = "volcano"

_LABEL_VALUE_BAD = re.compile(r"[^A-Za-z0-9._-]+")
_DNS_LABEL_BAD = re.compile(r"[^a-z0-9-]+")


def label_value(value: str) -> str:
    """``value`` as a valid label value (<= 63 chars of ``[A-Za-z0-9._-]``, alphanumeric at both ends).

    A value that had to change gets a hash suffix, so two students never share a label.
    """
    safe = _LABEL_VALUE_BAD.sub("-", value).strip("-_.")
    if safe == value and len(value) <= 63:
        return value
    digest = hashlib.sha256(value.encode()).hexdigest()[:8]
    return f"{safe[:54].strip('-_.')}-{digest}".lstrip("-")


def dns_label(value: str, *, max_length: int = 63) -> str:
    """``value`` lowercased as an RFC 1123 label (alphanumerics and ``-``), hash-suffixed when otherwise changed."""
    safe = _DNS_LABEL_BAD.sub("-", value.lower()).strip("-")
    if safe == value.lower() and 0 < len(safe) <= max_length:
        return safe
    digest = hashlib.sha256(value.encode()).hexdigest()[:8]
    return f"{safe[: max_length - 9].strip('-')}-{digest}".lstrip("-")


def namespace_name(course_code: str, *, namespace_prefix: str = "lab-") -> str:
    return dns_label(f"{namespace_prefix}{course_code or 'default'}")


def pod_name(session_id: str) -> str:
    return f"lab-{session_id}"


def service_name(session_id: str) -> str:
    return f"lab-{session_id}"


def secret_name(session_id: str) -> str:
    return f"lab-{session_id}-secret"


def base_url(session_id: str) -> str:
    return f"/labs/{session_id}/"


# The taints the node lifecycle controller puts on a node that stopped answering.
NODE_LOST_TAINTS = ("node.kubernetes.io/unreachable", "node.kubernetes.io/not-ready")


@dataclass(frozen=True)
class PodOptions:
    """Deployment-wide settings of the lab pods (from the driver's options)."""

    url_pattern: str = "http://{service}.{namespace}.svc:{port}/labs/{session_id}/"
    scheduler_name: str = SCHEDULER_NAME
    run_as_user: int = 1000
    run_as_group: int = 100
    home_pvc: str = ""  # claim name pattern, e.g. "home-{student}"; empty: no persistent home
    home_mount_path: str = "/home/jovyan/work"
    vllm_model: str = "Qwen/Qwen2.5-0.5B-Instruct"
    vllm_served_model_name: str = ""  # empty: the model's last path segment
    vllm_max_model_len: int = 4096
    vllm_max_num_batched_tokens: int = 2048
    # None: eager mode on a shared card (vllm-ascend does not support graph mode on a
    # soft-partitioned NPU, and graph capture fails with two models on one NPU), off on a whole card.
    vllm_enforce_eager: bool | None = None
    vllm_memory_fraction: str = "0.90"  # of the instance's memory cap that vLLM may fill
    extra_labels: dict[str, str] = field(default_factory=dict)
    # How long a lab stays on a node that stopped answering (unreachable or not ready) before
    # Kubernetes evicts it and the student can launch again elsewhere; Kubernetes' default is 300.
    node_lost_seconds: int = 60


def session_labels(spec: LaunchSpec) -> dict[str, str]:
    labels = {
        **MANAGED_BY,
        "app.kubernetes.io/component": "lab-session",
        SESSION_LABEL: spec.session_id,
        KIND_LABEL: label_value(spec.kind),
    }
    if spec.course_code:
        labels[COURSE_LABEL] = label_value(spec.course_code)
    if spec.student:
        labels[STUDENT_LABEL] = label_value(spec.student)
    return labels


def session_annotations(spec: LaunchSpec) -> dict[str, str]:
    """The unmangled values behind the labels, and the ledger's card binding."""
    card = spec.card
    return {
        f"{LABEL_PREFIX}/session-id": spec.session_id,
        f"{LABEL_PREFIX}/course-code": spec.course_code,
        f"{LABEL_PREFIX}/student": spec.student,
        f"{LABEL_PREFIX}/node": card.node,
        f"{LABEL_PREFIX}/card-index": str(card.card_index),
        f"{LABEL_PREFIX}/die-id": card.die_id,
        f"{LABEL_PREFIX}/core-percent": str(card.core_percent),
        f"{LABEL_PREFIX}/memory-mib": str(card.memory_mib),
        # Whole cards: how many, from card-index on (absent for a share of one card).
        **({f"{LABEL_PREFIX}/cards": str(card.cards)} if card.cards > 1 else {}),
    }


def _metadata(spec: LaunchSpec, name: str, namespace: str) -> dict:
    return {"name": name, "namespace": namespace, "labels": session_labels(spec), "annotations": session_annotations(spec)}


def access_url(session_id: str, *, kind: str, namespace: str, url_pattern: str) -> str:
    """The URL a student opens, from a pattern such as ``https://labs.example.edu/labs/{session_id}/``.

    The pattern may also use ``{namespace}``, ``{service}`` and ``{port}`` (the in-cluster address).
    """
    return url_pattern.format(session_id=session_id, namespace=namespace, service=service_name(session_id), port=port_for(kind))


def port_for(kind: str) -> int:
    return VLLM_PORT if kind == "vllm" else JUPYTER_PORT


def vllm_memory_utilization(card: CardBinding, fraction: str = "0.90", *, memory_seen: str = "card") -> str:
    """``--gpu-memory-utilization``: the fraction of the memory vLLM sees that it may fill.

    ``memory_seen`` is the device profile's: ``"card"`` when the runtime reports the whole card's
    memory (the plugin only enforces the cap), so the fraction is ``cap / card.card_memory_mib``
    times the headroom ``fraction``; ``"cap"`` when soft partitioning reports the cap as the total,
    so it is ``fraction`` itself. Rounded down to 0.01 so vLLM never asks for more than the cap:
    a 16 GiB share of a 32 GiB 910B4 with 0.90 headroom gets 0.45.
    """
    headroom = Decimal(fraction)
    if memory_seen == "cap":
        value = headroom
    else:
        if card.card_memory_mib <= 0:
            raise DriverError("The card's memory is unknown; the ledger must give it before a vLLM pod is made.")
        # Each of several whole cards is seen as itself: its share is the whole card.
        value = Decimal(card.memory_mib // card.cards) / Decimal(card.card_memory_mib) * headroom
    value = value.quantize(Decimal("0.01"), rounding=ROUND_DOWN)
    if value <= 0:
        raise DriverError(f"NPU memory {card.memory_mib} MiB is too small for vLLM.")
    return str(min(value, Decimal("0.99")))


def is_whole_card(card: CardBinding) -> bool:
    """The share is the whole card (or several): all its cores and all its memory."""
    return card.cards > 1 or card.core_percent >= 100 and card.card_memory_mib > 0 and card.memory_mib >= card.card_memory_mib


def check_vllm_command(command: tuple[str, ...] | list[str]) -> None:
    """``DriverError`` unless ``command`` launches ``vllm serve`` (``launches_vllm_serve``); the
    template's validation refuses such a command first, this is the last guard."""
    if not launches_vllm_serve(command):
        raise DriverError(f"A vLLM lab must be launched with 'vllm serve MODEL', not {' '.join(command)!r}.")


def make_secret(spec: LaunchSpec, *, namespace: str) -> dict:
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": _metadata(spec, secret_name(spec.session_id), namespace),
        "type": "Opaque",
        # A session's secret never changes: immutable, no kubelet keeps a watch open on it (one
        # per lab on its node otherwise), and nobody can swap the token of a running lab.
        "immutable": True,
        "stringData": {SECRET_KEY: spec.secret},
    }


def _secret_env(name: str, spec: LaunchSpec) -> dict:
    return {"name": name, "valueFrom": {"secretKeyRef": {"name": secret_name(spec.session_id), "key": SECRET_KEY}}}


def _jupyter_container(spec: LaunchSpec, options: PodOptions, profile: DeviceProfile) -> dict:
    url = base_url(spec.session_id)
    api = {"httpGet": {"path": f"{url}api", "port": JUPYTER_PORT}}
    return {
        "command": list(spec.command) or ["jupyter", "lab"],
        "args": [
            "--no-browser",
            "--ServerApp.ip=0.0.0.0",
            f"--ServerApp.port={JUPYTER_PORT}",
            f"--ServerApp.base_url={url}",
            # The student's files: the persistent home when there is one, else a scratch volume
            # (the image's home is read-only).
            f"--ServerApp.root_dir={options.home_mount_path}",
            *spec.args,
        ],
        # Jupyter Server's IdentityProvider reads the token from the file JUPYTER_TOKEN_FILE
        # names when JUPYTER_TOKEN is unset: the secret stays out of the environment.
        "env": [{"name": "JUPYTER_TOKEN_FILE", "value": f"{SECRET_MOUNT_PATH}/{SECRET_KEY}"}],
        # /api answers without a token once the server is up.
        "readinessProbe": {**api, "periodSeconds": 2, "failureThreshold": 3},
        # Up within five minutes (an image pulled cold, a large home), then restarted by the
        # kubelet (restartPolicy OnFailure; the student's card says so) when it stops answering
        # for two minutes.
        "startupProbe": {**api, "periodSeconds": 2, "failureThreshold": 150},
        "livenessProbe": {**api, "periodSeconds": 30, "timeoutSeconds": 5, "failureThreshold": 4},
    }


def _vllm_container(spec: LaunchSpec, options: PodOptions, profile: DeviceProfile) -> dict:
    check_vllm_command(spec.command)
    utilization = vllm_memory_utilization(spec.card, options.vllm_memory_fraction, memory_seen=profile.memory_seen)
    enforce_eager = options.vllm_enforce_eager
    if enforce_eager is None:
        enforce_eager = not is_whole_card(spec.card)
    model = spec.model or options.vllm_model
    served = options.vllm_served_model_name or model.rstrip("/").rsplit("/", 1)[-1]
    args = [
        model,
        "--host=0.0.0.0",
        f"--port={VLLM_PORT}",
        f"--served-model-name={served}",
        f"--max-model-len={options.vllm_max_model_len}",
        f"--gpu-memory-utilization={utilization}",
        f"--max-num-batched-tokens={options.vllm_max_num_batched_tokens}",
    ]
    if spec.card.cards > 1:
        # Otherwise vLLM serves from the first card and the others sit idle.
        args.append(f"--tensor-parallel-size={spec.card.cards}")
    if enforce_eager:
        args.append("--enforce-eager")
    return {
        "command": list(spec.command) or ["vllm", "serve"],
        "args": [*args, *spec.args],
        # vLLM's OpenAI server requires this key as a bearer token when VLLM_API_KEY is set.
        "env": [_secret_env("VLLM_API_KEY", spec)],
        # A failed server's last log lines become its terminated state's message, where the driver
        # reads the vendor's errors ("[SqCqManage] Alloc sq cq fail", labs.domain.vllm).
        "terminationMessagePolicy": "FallbackToLogsOnError",
        "readinessProbe": {"httpGet": {"path": "/health", "port": VLLM_PORT}, "periodSeconds": 5, "failureThreshold": 3},
    }


TEMPLATES = {"jupyter": _jupyter_container, "vllm": _vllm_container}

# vLLM loads its model for minutes before /health answers: a startup probe holds the liveness
# probe back for up to 20 minutes, then a server that stops answering for two minutes fails.
_VLLM_HEALTH = {"httpGet": {"path": "/health", "port": VLLM_PORT}}
VLLM_STARTUP_PROBE = {**_VLLM_HEALTH, "periodSeconds": 10, "failureThreshold": 120}
VLLM_LIVENESS_PROBE = {**_VLLM_HEALTH, "periodSeconds": 30, "timeoutSeconds": 5, "failureThreshold": 4}
VLLM_HOME = "/home/lab"

# The directories each kind writes to, each an ``emptyDir`` (the root filesystem is read-only):
# volume name -> (mount path, why).
WRITABLE_DIRS: dict[str, dict[str, tuple[str, str]]] = {
    "jupyter": {
        "tmp": ("/tmp", "kernels' and libraries' temporary files"),
        "cache": ("/home/jovyan/.cache", "pip, matplotlib font and Hugging Face caches"),
        "config": ("/home/jovyan/.config", "user configuration written on first use (matplotlib, git)"),
        "local": ("/home/jovyan/.local", "pip --user installs and Jupyter's runtime files (connection files, server info)"),
        "jupyter": ("/home/jovyan/.jupyter", "JupyterLab's user settings and workspaces"),
        "ipython": ("/home/jovyan/.ipython", "IPython's profile and history database"),
    },
    "vllm": {
        "tmp": ("/tmp", "compiler and runtime temporary files (torch, CANN kernels)"),
        "home": (VLLM_HOME, "HOME: the model cache (~/.cache/huggingface, ~/.cache/vllm) and ~/.config/vllm"),
    },
}


def _mebibytes(mib: int) -> str:
    return f"{mib}Mi"


def host_resources(spec: LaunchSpec) -> tuple[dict[str, str], dict[str, str]]:
    """The pod's host requests and limits (CPU, memory, scratch disk) from the template."""
    host = spec.host
    storage = _mebibytes(host.ephemeral_storage_mib)
    requests = {"cpu": f"{host.cpu_request_millicores}m", "memory": _mebibytes(host.memory_request_mib)}
    limits = {"cpu": f"{host.cpu_limit_millicores}m", "memory": _mebibytes(host.memory_limit_mib)}
    requests["ephemeral-storage"] = limits["ephemeral-storage"] = storage
    return requests, limits


def make_pod(spec: LaunchSpec, *, profile: DeviceProfile, namespace: str, options: PodOptions) -> dict:
    """The session's pod: one unprivileged NPU container, scheduled by Volcano onto the ledger's node.

    ``DriverRefused`` for a spec without a container image: the API server refuses such a pod, and
    asking again cannot help."""
    try:
        template = TEMPLATES[spec.kind]
    except KeyError:
        raise DriverError(f"Unknown lab kind {spec.kind!r}; expected one of {', '.join(sorted(TEMPLATES))}.") from None
    if not spec.image.strip():
        raise DriverRefused(
            f"The {spec.kind} template names no container image, so its pod cannot be made; "
            "an operator must give the template (or its allow-list entry) an image."
        )
    device = profile.render(spec.card)
    container = template(spec, options, profile)
    extra_env = []
    if spec.kind == "vllm":
        container.setdefault("startupProbe", VLLM_STARTUP_PROBE)
        container.setdefault("livenessProbe", VLLM_LIVENESS_PROBE)
        extra_env = [{"name": "HOME", "value": VLLM_HOME}]
    container["env"] = [
        *({"name": key, "value": value} for key, value in sorted(spec.instance_environment().items())),
        *extra_env,
        *container["env"],
    ]
    port = port_for(spec.kind)
    host_requests, host_limits = host_resources(spec)
    container = {
        "name": "lab",
        "image": spec.image,
        **container,
        "ports": [{"name": "http", "containerPort": port, "protocol": "TCP"}],
        "resources": {"requests": {**host_requests, **device.resources}, "limits": {**host_limits, **device.resources}},
        "securityContext": {
            "runAsNonRoot": True,
            "allowPrivilegeEscalation": False,
            "privileged": False,
            "readOnlyRootFilesystem": True,
            "capabilities": {"drop": ["ALL"]},
            "seccompProfile": {"type": "RuntimeDefault"},
        },
    }
    writable = WRITABLE_DIRS[spec.kind]
    volumes: list[dict] = [{"name": name, "emptyDir": {}} for name in writable]
    mounts: list[dict] = [{"name": name, "mountPath": path} for name, (path, _why) in writable.items()]
    if spec.kind == "jupyter":
        # The token as a file, readable by the lab's group only (fsGroup).
        volumes.append(
            {
                "name": "token",
                "secret": {
                    "secretName": secret_name(spec.session_id),
                    "items": [{"key": SECRET_KEY, "path": SECRET_KEY}],
                    "defaultMode": 0o440,
                },
            }
        )
        mounts.append({"name": "token", "mountPath": SECRET_MOUNT_PATH, "readOnly": True})
        home = {"persistentVolumeClaim": {"claimName": _home_claim(spec, options)}} if options.home_pvc else {"emptyDir": {}}
        volumes.append({"name": "home", **home})
        mounts.append({"name": "home", "mountPath": options.home_mount_path})
    elif options.home_pvc:
        volumes.append({"name": "home", "persistentVolumeClaim": {"claimName": _home_claim(spec, options)}})
        mounts.append({"name": "home", "mountPath": options.home_mount_path})
    container["volumeMounts"] = mounts
    metadata = _metadata(spec, pod_name(spec.session_id), namespace)
    metadata["labels"] = {**options.extra_labels, **{k: label_value(v) for k, v in spec.labels.items()}, **metadata["labels"]}
    metadata["annotations"] = {**metadata["annotations"], **device.annotations}
    pod_spec: dict = {
        "schedulerName": options.scheduler_name,
        # OnFailure: a lab whose container fails is started again in the same pod, on the same
        # share. The CCE FlexNPU guide: "批量创建FlexNPU实例时，可能因资源初始化耗时较长导致Pod短暂重启，
        # 属正常现象，请耐心等待实例就绪" (when many instances are created at once, a pod may restart
        # briefly while its resources initialise; this is normal, wait for the instance to be ready).
        # The controller bounds those restarts (LAB_START_RESTARTS) and tells the student of a
        # running lab's (an OOM kill). Not Always: a JupyterLab the student shuts down, or a
        # vLLM server that exits cleanly, ends the lab and frees the share.
        "restartPolicy": "OnFailure",
        "automountServiceAccountToken": False,
        "enableServiceLinks": False,
        "nodeSelector": dict(device.node_selector),
        "tolerations": [
            {"key": taint, "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": int(options.node_lost_seconds)}
            for taint in NODE_LOST_TAINTS
        ],
        "securityContext": {
            "runAsNonRoot": True,
            "runAsUser": options.run_as_user,
            "runAsGroup": options.run_as_group,
            "fsGroup": options.run_as_group,
            "seccompProfile": {"type": "RuntimeDefault"},
        },
        "containers": [container],
        "volumes": volumes,
    }
    return {"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": pod_spec}


def _home_claim(spec: LaunchSpec, options: PodOptions) -> str:
    return dns_label(options.home_pvc.format(student=spec.student or "anonymous", course=spec.course_code))


def make_service(spec: LaunchSpec, *, namespace: str) -> dict:
    """A headless service in front of the session's pod, for the ingress or the portal's proxy.

    Headless (``clusterIP: None``): its name resolves to the pod's address once the pod is ready,
    and ingress-nginx routes to a service's endpoints, not to its cluster IP, so a cluster IP
    would serve nobody — and cost the API server an address allocation per lab (the slowest
    of a lab's objects to create) and every node's kube-proxy a set of rules per lab.
    """
    port = port_for(spec.kind)
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": _metadata(spec, service_name(spec.session_id), namespace),
        "spec": {
            "clusterIP": "None",
            "selector": {SESSION_LABEL: spec.session_id},
            "ports": [{"name": "http", "port": port, "targetPort": "http", "protocol": "TCP"}],
        },
    }


def ingress_name(session_id: str) -> str:
    return f"lab-{session_id}"


# What ingress-nginx needs for a lab: JupyterLab's kernel websockets stay open while a student
# works (nginx's default closes an idle one after 60 s), and notebooks upload files.
LAB_INGRESS_ANNOTATIONS = {
    "nginx.ingress.kubernetes.io/proxy-read-timeout": "3600",
    "nginx.ingress.kubernetes.io/proxy-send-timeout": "3600",
    "nginx.ingress.kubernetes.io/proxy-body-size": "100m",
}


def make_ingress(spec: LaunchSpec, *, namespace: str, host: str, class_name: str) -> dict:
    """The route from ``https://<host>/labs/<session>/`` to the session's service.

    JupyterLab serves under that path itself (its ``base_url``); vLLM serves at its root, so its
    route strips the prefix (ingress-nginx's ``rewrite-target``): ``/labs/<session>/v1/models``
    reaches vLLM as ``/v1/models``.
    """
    prefix = base_url(spec.session_id)
    annotations = dict(LAB_INGRESS_ANNOTATIONS)
    if spec.kind == "vllm":
        path, path_type = f"{prefix.rstrip('/')}(/|$)(.*)", "ImplementationSpecific"
        annotations |= {"nginx.ingress.kubernetes.io/use-regex": "true", "nginx.ingress.kubernetes.io/rewrite-target": "/$2"}
    else:
        path, path_type = prefix, "Prefix"
    metadata = _metadata(spec, ingress_name(spec.session_id), namespace)
    metadata["annotations"] |= annotations
    backend = {"service": {"name": service_name(spec.session_id), "port": {"number": port_for(spec.kind)}}}
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "Ingress",
        "metadata": metadata,
        "spec": {
            "ingressClassName": class_name,
            "rules": [{"host": host, "http": {"paths": [{"path": path, "pathType": path_type, "backend": backend}]}}],
        },
    }
