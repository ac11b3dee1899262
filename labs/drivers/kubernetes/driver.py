"""``KubernetesDriver``: lab sessions as pods scheduled by Volcano, through the official client.

Chosen in settings::

    LAB_DRIVER = {
        "BACKEND": "labs.drivers.kubernetes.KubernetesDriver",
        "OPTIONS": {"api_url": "https://k8s.example.edu:6443", "token": "...", "profile": "flexnpu",
                    "url_pattern": "https://labs.example.edu/labs/{session_id}/"},
    }

Without ``api_url`` the driver uses the in-cluster service account, else the kubeconfig
(``kubeconfig`` option or the default file). Every object of a session carries the label
``npu-lab.portal/session-id``, so any process finds it again; the reference returned by
``create`` is the pod UID, which FlexNPU uses as the instance's entity-id.

Transient API failures (HTTP 429/500/502/503/504, connection errors, read timeouts) are
retried by urllib3's ``Retry`` on the client's connection pool, with exponential backoff; a
create that timed out after the server committed it comes back as 409 AlreadyExists, which
``create`` treats as success and reads the existing pod. Anything left is a ``DriverError``.
"""

from __future__ import annotations

import datetime as dt
import json
import logging
import os
import re
import threading
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import fields, replace
from decimal import Decimal, InvalidOperation
from typing import Any

import urllib3
from kubernetes import client, config
from kubernetes.client.exceptions import ApiException
from kubernetes.config.config_exception import ConfigException
from kubernetes.utils import parse_quantity
from urllib3.util.retry import Retry

from labs.domain import vllm
from labs.domain.reasons import Reason
from labs.drivers.base import (
    ClusterDriver,
    DriverError,
    DriverRefused,
    LaunchSpec,
    NodeBoot,
    NodePod,
    NodeStatus,
    Observed,
    PollResult,
    PollStatus,
)
from labs.drivers.kubernetes import builders, namespaces
from labs.drivers.kubernetes.profiles import (
    HOSTNAME_LABEL,
    PROFILES,
    VNPU_REGISTER_ANNOTATION,
    DeviceProfile,
    get_profile,
    parse_vnpu_register,
)
from labs.drivers.statefile import canonical_session_id

logger = logging.getLogger(__name__)
RETRY_STATUSES = frozenset({429, 500, 502, 503, 504})
# Answers that say the API server did nothing with the request: priority and fairness turned
# it away (429). Only these are sent again for a create.
NOT_DONE_STATUSES = frozenset({429})


class _Retry(Retry):
    """urllib3's retries, except that a create (POST) is sent again only when the API server
    said it did nothing with it (429).

    A create that timed out or was answered 5xx may have been stored, and a pod's second create
    is charged to the course namespace's ResourceQuota again (admission counts it before the
    name is checked) until the quota controller recounts, minutes later: the class's last
    students would be refused "exceeded quota". The driver looks for the pod instead
    (``KubernetesDriver._create_pod``).
    """

    def _is_method_retryable(self, method: str) -> bool:
        # Read errors (a timeout, a dropped connection) after the request went out: a create
        # may have been done. Connection errors (nothing sent) are retried for every verb.
        return method.upper() != "POST" and super()._is_method_retryable(method)

    def is_retry(self, method: str, status_code: int, has_retry_after: bool = False) -> bool:
        if method.upper() == "POST" and status_code in NOT_DONE_STATUSES:
            return status_code in (self.status_forcelist or ())
        return super().is_retry(method, status_code, has_retry_after)


REFUSED_STATUSES = frozenset({400, 403, 422})
# Threads making labs' secrets, services and routes (three a lab, side by side), and the
# connections kept open to the API server: enough for the controller's pool to make its labs'
# parts at once without opening (a TLS handshake each) and dropping connections.
PARTS_THREADS = 24
CONNECTIONS = 48
IMAGE_PULL_FAILURES = frozenset({"ErrImagePull", "ImagePullBackOff", "InvalidImageName", "ErrImageNeverPull"})
# Not CrashLoopBackOff: that is a container waiting to be restarted, which the controller judges
# (``Observed.restarts``), as it does a terminated container that its pod's restart policy restarts.
START_FAILURES = frozenset({"CreateContainerConfigError", "CreateContainerError", "RunContainerError"})
STARTING = frozenset({"ContainerCreating", "PodInitializing"})
DETAIL_MAX_CHARS = 300  # of a terminated container's message, in the reason it ended for
DEFAULT_URL_PATTERN = builders.PodOptions.url_pattern
# The API server answers a list with only each object's metadata when asked for this.
PARTIAL_METADATA_LIST = "application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1"


def _as_bool(value: object) -> bool:
    if isinstance(value, str):
        if value.strip().lower() in {"1", "true", "yes", "on"}:
            return True
        if value.strip().lower() in {"0", "false", "no", "off", ""}:
            return False
        raise ValueError(f"not a boolean: {value!r}")
    return bool(value)


_HOST = re.compile(r"(?=.{1,253}$)[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?(\.[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?)*")
_DNS_NAME = re.compile(r"[a-z0-9]([a-z0-9.-]{0,251}[a-z0-9])?")


def _api_message(exc: ApiException) -> str:
    try:
        body = json.loads(exc.body or "")
    except (TypeError, ValueError):
        body = None
    message = body.get("message") if isinstance(body, dict) else None
    return f"{exc.status} {exc.reason}" + (f": {message}" if message else "")


class KubernetesDriver(ClusterDriver):
    """Lab sessions as pods: ``PENDING`` until the pod is Running and Ready, then ``RUNNING``.

    Options (all optional):

    * ``api_url``, ``token``, ``verify_ssl``, ``ca_cert`` — the API server and a bearer token;
      without ``api_url``: in-cluster service account, else ``kubeconfig`` (a path) or the default one.
    * ``namespace_prefix`` (``lab-``) — course namespaces are ``<prefix><course code>``;
      ``manage_namespaces`` (false) makes a missing one with its default-deny NetworkPolicy, which
      admits only ``portal_namespace`` and the ingress controller in ``ingress_namespace``.
    * ``profile`` (``flexnpu`` | ``vnpu`` | ``hami``) and ``profile_settings`` (e.g. ``{"mode": "hard"}``).
    * ``pool_profiles`` — another profile per node pool, by node label: ``"pool=research:vnpu,pool=x:hami"``,
      or with the pool's own profile options ``{"pool=research": {"profile": "vnpu", "mode": "hard"}}``.
    * ``ingress_host`` (empty: none) — the host students open labs on: each session gets an Ingress
      (``ingress_class_name``, ``nginx``) routing ``https://<host>/labs/<session>/`` to its service,
      owned by the pod, and the access URL is that address unless ``url_pattern`` says otherwise.
    * ``url_pattern`` — the access URL, with ``{session_id}`` (and ``{namespace}``, ``{service}``, ``{port}``).
    * ``pod_options`` — fields of ``builders.PodOptions`` (persistent home claim, vLLM settings, ...).
    * ``spawn_timeout_seconds`` (600) — a pod still pending after this is ``FAILED``.
    * ``request_timeout_seconds`` (10), ``retries`` (3) — per API request; a pod's create is sent
      again only after a 429 (see ``_Retry``). ``delete`` does not wait
      for the pod to be gone; ``delete_wait_seconds`` is accepted for old settings and unused.
    """

    option_names = frozenset(
        {
            "api_url",
            "token",
            "kubeconfig",
            "verify_ssl",
            "ca_cert",
            "namespace_prefix",
            "manage_namespaces",
            "portal_namespace",
            "ingress_namespace",
            "ingress_host",
            "ingress_class_name",
            "profile",
            "profile_settings",
            "pool_profiles",
            "url_pattern",
            "pod_options",
            "spawn_timeout_seconds",
            "request_timeout_seconds",
            "retries",
            "delete_wait_seconds",
        }
    )

    def __init__(
        self,
        *,
        api_url: str = "",
        token: str = "",
        kubeconfig: str = "",
        verify_ssl: bool | str = True,
        ca_cert: str = "",
        namespace_prefix: str = "lab-",
        manage_namespaces: bool | str = False,
        portal_namespace: str = "npu-lab-portal",
        ingress_namespace: str = "ingress-nginx",
        ingress_host: str = "",
        ingress_class_name: str = "nginx",
        profile: str = "flexnpu",
        profile_settings: dict[str, Any] | None = None,
        pool_profiles: dict[str, str | dict[str, Any]] | str | None = None,
        url_pattern: str = DEFAULT_URL_PATTERN,
        pod_options: dict[str, Any] | None = None,
        spawn_timeout_seconds: float = 600.0,
        request_timeout_seconds: float = 10.0,
        retries: int = 3,
        delete_wait_seconds: float = 60.0,
    ) -> None:
        for name, value in (
            ("spawn_timeout_seconds", spawn_timeout_seconds),
            ("request_timeout_seconds", request_timeout_seconds),
            ("delete_wait_seconds", delete_wait_seconds),
        ):
            if float(value) <= 0:
                raise ValueError(f"{name} must be > 0, got {value!r}")
        if int(retries) < 0:
            raise ValueError(f"retries must be >= 0, got {retries!r}")
        if ingress_host and not _HOST.fullmatch(ingress_host):
            raise ValueError(f"ingress_host must be a host name like labs.example.edu, no scheme or path; got {ingress_host!r}")
        if not _DNS_NAME.fullmatch(ingress_class_name):
            raise ValueError(f"ingress_class_name must be an IngressClass name such as nginx, got {ingress_class_name!r}")
        if ingress_host and url_pattern == DEFAULT_URL_PATTERN:
            url_pattern = f"https://{ingress_host}/labs/{{session_id}}/"
        try:
            url_pattern.format(session_id="s", namespace="n", service="svc", port=1)
        except (KeyError, IndexError, ValueError) as exc:
            raise ValueError(
                f"url_pattern {url_pattern!r} may use only {{session_id}}, {{namespace}}, {{service}}, {{port}}"
            ) from exc
        known = {f.name for f in fields(builders.PodOptions)}
        unknown = sorted(set(pod_options or {}) - known)
        if unknown:
            raise ValueError(f"unknown pod_options {unknown}; known: {sorted(known)}")
        _check_vllm_pod_options(pod_options or {})
        where = "profile_settings" if profile in PROFILES else "profile"
        self.profile: DeviceProfile = _device_profile(where, profile, profile_settings or {})
        self.pool_profiles = _pool_profiles(pool_profiles)
        self.pod_options = builders.PodOptions(**{**(pod_options or {}), "url_pattern": url_pattern})
        self.namespace_prefix = namespace_prefix
        self.manage_namespaces = _as_bool(manage_namespaces)
        self.portal_namespace = portal_namespace
        self.ingress_namespace = ingress_namespace
        self.ingress_host = ingress_host
        self.ingress_class_name = ingress_class_name
        self.spawn_timeout_seconds = float(spawn_timeout_seconds)
        self.request_timeout_seconds = float(request_timeout_seconds)
        self.delete_wait_seconds = float(delete_wait_seconds)
        self.api_client = client.ApiClient(
            self._configuration(api_url, token, kubeconfig, _as_bool(verify_ssl), ca_cert, int(retries))
        )
        self.core = client.CoreV1Api(self.api_client)
        self.networking = client.NetworkingV1Api(self.api_client)
        self.metadata_api = PodMetadataApi(self.api_client)
        self._ensured_namespaces: set[str] = set()
        self._parts: ThreadPoolExecutor | None = None
        self._parts_pid = 0
        self._parts_lock = threading.Lock()

    @staticmethod
    def _configuration(
        api_url: str, token: str, kubeconfig: str, verify_ssl: bool, ca_cert: str, retries: int
    ) -> client.Configuration:
        configuration = client.Configuration()
        if api_url:
            configuration.host = api_url.rstrip("/")
            if token:
                # The whole header value under the old key: client 36 looks the prefix up under
                # "BearerToken" only, so a prefix set apart sent the bare token (anonymous to the API server).
                configuration.api_key = {"authorization": f"Bearer {token}"}
            configuration.verify_ssl = verify_ssl
            if ca_cert:
                configuration.ssl_ca_cert = ca_cert
        else:
            try:
                if kubeconfig:
                    config.load_kube_config(config_file=kubeconfig, client_configuration=configuration)
                else:
                    try:
                        config.load_incluster_config(client_configuration=configuration)
                    except ConfigException:
                        config.load_kube_config(client_configuration=configuration)
            except (ConfigException, OSError) as exc:
                raise ValueError(f"no Kubernetes API: set api_url, run in a cluster or provide a kubeconfig ({exc})") from exc
        # Retries live on the connection pool, so every call of the client gets them.
        configuration.connection_pool_maxsize = CONNECTIONS
        configuration.retries = _Retry(
            total=retries,
            connect=retries,
            read=retries,
            status=retries,
            other=0,
            backoff_factor=0.2,
            backoff_max=5,
            status_forcelist=RETRY_STATUSES,
            allowed_methods=None,  # every verb but a create's second sending (see _Retry)
            raise_on_status=False,  # the last 5xx reaches the client as an ApiException
            respect_retry_after_header=True,
        )
        return configuration

    # -- API plumbing -------------------------------------------------------------------------

    def _call(self, what: str, method: Any, *args: Any, passthrough: tuple[int, ...] = (), **kwargs: Any) -> Any:
        """Call the API; statuses in ``passthrough`` re-raise ``ApiException``, all else becomes ``DriverError``."""
        try:
            return method(*args, _request_timeout=self.request_timeout_seconds, **kwargs)
        except ApiException as exc:
            if exc.status in passthrough:
                raise
            # A request the API server finds invalid or forbidden fails the same way next time.
            error = DriverRefused if exc.status in REFUSED_STATUSES else DriverError
            raise error(f"The cluster refused {what}: {_api_message(exc)}.") from exc
        except (urllib3.exceptions.HTTPError, OSError) as exc:
            raise DriverError(f"The cluster API did not answer while {what}; try again shortly.") from exc

    def _create(self, what: str, method: Any, namespace: str | None, body: dict) -> bool:
        """Create an object; ``False`` if it already existed."""
        args = (namespace, body) if namespace is not None else (body,)
        try:
            # Not turned into model objects (that costs the client more than the request), but
            # read to its end: only then does the connection go back to the pool for the next call.
            self._call(what, method, *args, passthrough=(409,), _preload_content=False).data  # noqa: B018
        except ApiException:
            return False
        return True

    def _create_pod(self, body: dict, *, look_first: bool) -> dict[str, Any]:
        """Create the lab pod unless it is there; the pod as the API server holds it.

        A pod's create is sent at most once a call, and not at all when the pod is there: each
        create is charged to the course namespace's ResourceQuota at admission, before the name
        is checked, and a second one for the same pod stays charged until the quota controller
        recounts, minutes later, refusing other students' labs "exceeded quota" meanwhile. So a
        create that may have been sent before (``look_first``: its lease ended, an earlier one
        failed) looks first — a read costs the quota nothing — and one whose answer is lost (a
        timeout, a 5xx: it may have been stored) looks afterwards instead of sending it again.
        Not found then, the create fails for the controller to try later, looking first.

        Read as plain JSON: the answer is only looked at for its identity, and turning it into
        the client's model objects would cost more than the request.
        """
        namespace, name = body["metadata"]["namespace"], body["metadata"]["name"]
        if look_first and (pod := self._read_pod(name, namespace)) is not None:
            return pod
        create, lost = self.core.create_namespaced_pod, (403, 409, *RETRY_STATUSES)
        try:
            answer = self._call("the lab pod", create, namespace, body, passthrough=lost, _preload_content=False)
        except ApiException as exc:
            # With the namespace's quota full of the class, a create sent again answers 403
            # "exceeded quota" for a pod that is there: only a pod not there makes it a refusal.
            if (pod := self._read_pod(name, namespace)) is not None:
                return pod
            if exc.status == 403:
                raise DriverRefused(f"The cluster refused the lab pod: {_api_message(exc)}.") from exc
            if exc.status == 409:
                raise DriverError("The lab pod disappeared right after it was created; try again.") from None
            raise DriverError(f"The cluster did not create the lab pod: {_api_message(exc)}; it is tried again shortly.") from exc
        except DriverRefused:
            raise
        except DriverError:
            if (pod := self._read_pod(name, namespace)) is not None:
                return pod
            raise
        return json.loads(answer.data)

    def _read_pod(self, name: str, namespace: str) -> dict[str, Any] | None:
        """The pod as plain JSON, or ``None`` if there is none of that name."""
        read = self.core.read_namespaced_pod
        try:
            answer = self._call("reading the lab pod", read, name, namespace, passthrough=(404,), _preload_content=False)
        except ApiException:
            return None
        return json.loads(answer.data)

    def _list_pods(self, selector: str) -> list[dict[str, Any]]:
        """The lab pods matching ``selector`` in every namespace, as the API server's JSON.

        Read as plain JSON, not the client's model objects: at a class's size (hundreds of pods,
        every controller round) building those costs the worker ten times the request.
        """
        listing = self.core.list_pod_for_all_namespaces
        answer = self._call("listing lab pods", listing, label_selector=selector, _preload_content=False)
        items = _list_items(answer, "the list of lab pods with something that is not a pod list")
        # Filtered here too: the selector is the API server's job, but a wrong pod here would be deleted.
        return [pod for pod in items if isinstance(pod, dict) and self._owns(pod.get("metadata") or {})]

    def pods_on(self, node: str) -> dict[str, NodePod]:
        """Every pod bound to ``node``, in every namespace and of every owner, read as metadata only.

        One list per call with ``fieldSelector=spec.nodeName=<node>``, under the cluster-wide pod
        reader the portal holds already (``deploy/base/rbac.yaml``): the portal's labs and
        anyone else's, so the reconciler can tell a residual instance (no pod of its UID) from
        a foreign one (another owner's pod) as the FlexNPU guide does.
        """
        if not _DNS_NAME.fullmatch(node):
            raise DriverError(f"Not a node name: {node!r}.")
        listing = self.metadata_api.list_pod_for_all_namespaces
        answer = self._call(f"listing the pods on node {node}", listing, field_selector=f"spec.nodeName={node}")
        items = _list_items(answer, f"the list of pods on {node} with something that is not a list")
        pods = {}
        for item in items:
            metadata = (item.get("metadata") if isinstance(item, dict) else None) or {}
            uid = metadata.get("uid")
            if uid:
                name = f"{metadata.get('namespace') or ''}/{metadata.get('name') or ''}"
                pods[uid] = NodePod(uid, name, portal=self._owns(metadata))
        return pods

    def nodes(self) -> dict[str, NodeBoot]:
        """Every node's ``status.nodeInfo.bootID`` and whether its pool's device profile's instance
        count (``volcano.sh/flexnpu-num``, ``huawei.com/vnpu-number``, ...) is allocatable, above 0.

        One list of nodes (``nodes: list``, ``deploy/base/rbac.yaml``), read as plain JSON. The
        controller asks only while a lab's pod shows failed or a node that restarted waits for its
        NPUs, and the reconciler once a period.
        """
        answer = self._call("listing the nodes", self.core.list_node, _preload_content=False)
        items = _list_items(answer, "the list of nodes with something that is not a list")
        boots = {}
        for item in items:
            if not isinstance(item, dict):
                continue
            metadata, status = item.get("metadata") or {}, item.get("status") or {}
            name = metadata.get("name")
            if not name:
                continue
            count = self.profile_of(metadata.get("labels") or {}).resource_names()[0]
            boots[name] = NodeBoot(
                boot_id=str((status.get("nodeInfo") or {}).get("bootID") or ""),
                npus_reported=_positive_quantity((status.get("allocatable") or {}).get(count)),
            )
        return boots

    def node_status(self, node: str) -> NodeStatus:
        """The node object, read as JSON (``get`` on nodes, the portal's one cluster-wide read besides pods).

        The profile is the pool's, by the node's labels as the cluster holds them; its resources
        are the node's ``status.allocatable`` (else ``capacity``) of the profile's instance,
        core and memory resources, 0 for one the device plugin has not registered.
        """
        if not _DNS_NAME.fullmatch(node):
            raise DriverError(f"Not a node name: {node!r}.")
        try:
            answer = self._call(f"reading node {node}", self.core.read_node, node, passthrough=(404,), _preload_content=False)
        except ApiException:
            return NodeStatus(profile=self.profile.name, exists=False)
        try:
            body = json.loads(answer.data)
            metadata = body.get("metadata") or {}
            labels = {str(k): str(v) for k, v in (metadata.get("labels") or {}).items()}
            register = str((metadata.get("annotations") or {}).get(VNPU_REGISTER_ANNOTATION) or "")
            status = body.get("status") or {}
            amounts = status.get("allocatable") or status.get("capacity") or {}
        except (ValueError, AttributeError) as exc:
            raise DriverError(f"The cluster API answered node {node} with something that is not a node.") from exc
        profile = self.profile_of(labels)
        resources = {name: _whole_quantity(amounts.get(name)) for name in profile.resource_names()[:3]}
        devices = parse_vnpu_register(register) if register else None
        if register and devices is None:
            logger.warning("node %s: %s is not in the expected format; its die ids are not used", node, VNPU_REGISTER_ANNOTATION)
        return NodeStatus(profile=profile.name, labels=labels, resources=resources, devices=devices or ())

    def _session_pods(self, session_id: str) -> list[dict[str, Any]]:
        pods = self._list_pods(f"{builders.SESSION_LABEL}={session_id}")
        return [pod for pod in pods if _labels(pod).get(builders.SESSION_LABEL) == session_id]

    def _owns(self, metadata: Mapping[str, Any]) -> bool:
        labels = metadata.get("labels") or {}
        return (
            all(labels.get(key) == value for key, value in builders.MANAGED_BY.items())
            and labels.get("app.kubernetes.io/component") == "lab-session"
            and str(metadata.get("namespace") or "").startswith(self.namespace_prefix)
        )

    # -- namespaces -------------------------------------------------------------------------------

    def ensure_course_namespace(self, course_code: str) -> str:
        """Make the course namespace and its default-deny NetworkPolicy if missing; return its name."""
        namespace = namespaces.make_namespace(course_code, namespace_prefix=self.namespace_prefix)
        name = namespace["metadata"]["name"]
        self._create(f"the course namespace {name}", self.core.create_namespace, None, namespace)
        policy = namespaces.make_network_policy(
            course_code,
            namespace_prefix=self.namespace_prefix,
            portal_namespace=self.portal_namespace,
            ingress_namespace=self.ingress_namespace,
        )
        self._create(f"the network policy of {name}", self.networking.create_namespaced_network_policy, name, policy)
        return name

    def profile_for(self, spec: LaunchSpec) -> DeviceProfile:
        """The device profile of the node pool the session's node belongs to (first match), else the default."""
        return self.profile_of(spec.card.node_labels)

    def profile_of(self, labels: Mapping[str, str]) -> DeviceProfile:
        """The device profile of the node pool a node with ``labels`` belongs to (first match), else the default."""
        labels = dict(labels)
        for (key, value), profile in self.pool_profiles:
            if labels.get(key) == value:
                return profile
        return self.profile

    def best_effort_nodes(self) -> dict[str, str] | None:
        """The first node pool whose profile runs best-effort instances, by its label; ``{}`` when
        the default profile does and no pool has another; else ``None``."""
        for (key, value), profile in self.pool_profiles:
            if profile.best_effort:
                return {key: value}
        return {} if self.profile.best_effort and not self.pool_profiles else None

    def device_profile(self, labels: Mapping[str, str]) -> str:
        """The name of the node pool's profile."""
        return self.profile_of(labels).name

    def card_truth(self, labels: Mapping[str, str], *, die_ids_known: bool) -> str:
        """The pool's profile says; a die-id profile pins the card only where the agent reports die ids."""
        truth = self.profile_of(labels).card_truth
        if truth == "pinned" and not die_ids_known:
            return "none"
        return truth

    def memory_seen(self, labels: Mapping[str, str]) -> str:
        """The pool's profile's ``memory_seen`` setting."""
        return self.profile_of(labels).memory_seen

    # -- the contract ----------------------------------------------------------------------------

    def create(self, spec: LaunchSpec) -> str:
        spec = replace(spec, session_id=canonical_session_id(spec.session_id))
        namespace = builders.namespace_name(spec.course_code, namespace_prefix=self.namespace_prefix)
        # Built first: a share the device plugin cannot express fails before anything is made.
        pod = builders.make_pod(spec, profile=self.profile_for(spec), namespace=namespace, options=self.pod_options)
        if self.manage_namespaces and namespace not in self._ensured_namespaces:
            self.ensure_course_namespace(spec.course_code)
            self._ensured_namespaces.add(namespace)
        # The pod first, then its secret and service owned by it: Kubernetes' garbage collector
        # removes them with the pod, so the portal never needs to list secrets or services
        # (least privilege). The kubelet retries a container whose secretKeyRef is not there yet.
        name = builders.pod_name(spec.session_id)
        current = self._create_pod(pod, look_first=spec.repeat)
        uid = current.get("metadata", {}).get("uid")
        if not uid:
            raise DriverError("The cluster returned the lab pod without a UID.")
        if current.get("metadata", {}).get("labels", {}).get(builders.SESSION_LABEL) != spec.session_id:
            raise DriverError(f"A pod named {name} that is not this session's already exists in {namespace}.")
        owner = {"apiVersion": "v1", "kind": "Pod", "name": name, "uid": uid, "blockOwnerDeletion": False}
        parts = [
            ("the lab's secret", self.core.create_namespaced_secret, builders.make_secret(spec, namespace=namespace)),
            ("the lab's service", self.core.create_namespaced_service, builders.make_service(spec, namespace=namespace)),
        ]
        if self.ingress_host:
            ingress = builders.make_ingress(spec, namespace=namespace, host=self.ingress_host, class_name=self.ingress_class_name)
            parts.append(("the lab's route (Ingress)", self.networking.create_namespaced_ingress, ingress))
        for _what, _method, body in parts:
            body["metadata"]["ownerReferences"] = [owner]
        # Side by side, not one after another: on a busy API server each create waits its turn
        # in the server's queue, and a lab's create takes two such waits instead of four.
        made = [self._parts_pool().submit(self._create, what, method, namespace, body) for what, method, body in parts]
        for future in made:
            future.result()
        return uid

    def _parts_pool(self) -> ThreadPoolExecutor:
        """The threads that make a lab's secret, service and route at once; made in the process that uses them."""
        with self._parts_lock:
            if self._parts is None or self._parts_pid != os.getpid():  # Celery forks its workers after import
                self._parts = ThreadPoolExecutor(max_workers=PARTS_THREADS, thread_name_prefix="k8s-parts")
                self._parts_pid = os.getpid()
            return self._parts

    def observe(self) -> dict[str, Observed]:
        """One list of every lab pod (all course namespaces), read into ``Observed`` records."""
        observed: dict[str, Observed] = {}
        for pod in self._list_pods(builders.SESSION_SELECTOR):
            try:
                session_id = canonical_session_id(_labels(pod).get(builders.SESSION_LABEL))
            except DriverError:
                continue  # a hand-made pod with our labels but no session id
            result = self._pod_result(pod, session_id)
            spec = pod.get("spec") or {}
            metadata = pod.get("metadata") or {}
            restarts, last_exit = _restarts(pod)
            observed[session_id] = Observed(
                session_id,
                result.status,
                ref=metadata.get("uid") or "",
                reason=result.reason,
                access_url=result.access_url,
                # Where it runs once scheduled, else where it is pinned.
                node=spec.get("nodeName") or (spec.get("nodeSelector") or {}).get(HOSTNAME_LABEL, ""),
                deleting=metadata.get("deletionTimestamp") is not None,
                restarts=restarts,
                last_exit=last_exit,
            )
        return observed

    def _pod_result(self, pod: dict[str, Any], session_id: str) -> PollResult:
        metadata, spec, status = pod.get("metadata") or {}, pod.get("spec") or {}, pod.get("status") or {}
        phase = status.get("phase") or "Pending"
        conditions = {c.get("type"): c for c in status.get("conditions") or [] if isinstance(c, dict)}
        if metadata.get("deletionTimestamp"):
            evicted = (conditions.get("DisruptionTarget") or {}).get("status") == "True" and (
                conditions["DisruptionTarget"].get("reason") == "DeletionByTaintManager"
            )
            if evicted:  # the node stopped answering for longer than the pod tolerates
                return PollResult(PollStatus.FAILED, reason=Reason.of("driver.node_lost", node=spec.get("nodeName") or "?"))
            return PollResult(PollStatus.FAILED, reason=Reason.of("driver.being_stopped"))
        if phase in {"Failed", "Succeeded"}:
            return PollResult(PollStatus.FAILED, reason=Reason.of("driver.lab_stopped", cause=self._stop_reason(pod, phase)))
        policy = spec.get("restartPolicy") or "Always"
        for container in status.get("containerStatuses") or []:
            state = container.get("state") or {}
            waiting, terminated = state.get("waiting") or {}, state.get("terminated")
            if waiting.get("reason") in IMAGE_PULL_FAILURES:
                reason = Reason.of("driver.image_pull_failed", detail=waiting.get("message") or waiting["reason"])
                return PollResult(PollStatus.FAILED, reason=reason)
            if waiting.get("reason") in START_FAILURES:
                reason = Reason.of("driver.container_not_started", detail=waiting.get("message") or waiting["reason"])
                return PollResult(PollStatus.FAILED, reason=reason)
            if terminated and not _restarted_after(terminated, policy):
                reason = Reason.of("driver.lab_stopped", cause=_terminated_reason(terminated, pod))
                return PollResult(PollStatus.FAILED, reason=reason)
        if phase == "Running":
            if (conditions.get("Ready") or {}).get("status") == "True":
                kind = _labels(pod).get(builders.KIND_LABEL, "jupyter")
                url = builders.access_url(
                    session_id, kind=kind, namespace=metadata.get("namespace") or "", url_pattern=self.pod_options.url_pattern
                )
                return PollResult(PollStatus.RUNNING, access_url=url)
            return PollResult(PollStatus.PENDING, reason=Reason.of("driver.waiting_for_answer"))
        pending = self._pending_reason(pod, conditions)
        age = _age_seconds(metadata.get("creationTimestamp"))
        if age is not None and age > self.spawn_timeout_seconds:
            reason = Reason.of("driver.start_timeout", seconds=f"{self.spawn_timeout_seconds:g}", cause=pending)
            return PollResult(PollStatus.FAILED, reason=reason)
        return PollResult(PollStatus.PENDING, reason=pending)

    def _pending_reason(self, pod: dict[str, Any], conditions: dict[str, Any]) -> Reason:
        scheduled = conditions.get("PodScheduled")
        if scheduled is not None and scheduled.get("status") == "False":
            message, why = scheduled.get("message"), scheduled.get("reason")
            if why == "Unschedulable":
                if message:
                    return Reason.of("driver.waiting_for_npu", detail=message)
                return Reason.of("driver.waiting_for_npu_no_room")
            if message or why:
                return Reason.of("driver.waiting_to_be_scheduled_because", detail=message or why)
            return Reason.of("driver.waiting_to_be_scheduled")
        for container in (pod.get("status") or {}).get("containerStatuses") or []:
            waiting = (container.get("state") or {}).get("waiting") or {}
            if waiting.get("reason") in STARTING:
                return Reason.of("driver.starting_container")
        if scheduled is not None and scheduled.get("status") == "True":
            return Reason.of("driver.starting_container")
        # No condition yet: a scheduler that gave up may have said why only in an event.
        event = self._latest_warning(pod.get("metadata") or {})
        if event is not None and event.reason == "FailedScheduling":
            return Reason.of("driver.waiting_for_npu", detail=event.message or "")
        return Reason.of("driver.waiting_to_be_scheduled")

    def _latest_warning(self, metadata: Mapping[str, Any]) -> client.CoreV1Event | None:
        uid = metadata.get("uid")
        events = self._call(
            "reading the lab pod's events",
            self.core.list_namespaced_event,
            metadata.get("namespace"),
            field_selector=f"involvedObject.uid={uid}",
        ).items
        warnings = [
            event
            for event in events
            if event.type == "Warning" and event.involved_object is not None and event.involved_object.uid == uid
        ]
        if not warnings:
            return None

        def when(event: client.CoreV1Event) -> dt.datetime:
            stamp = event.last_timestamp or event.event_time or event.metadata.creation_timestamp
            return stamp if stamp is not None else dt.datetime.min.replace(tzinfo=dt.UTC)

        return max(warnings, key=when)

    def _stop_reason(self, pod: Mapping[str, Any], phase: str) -> Reason:
        status = pod.get("status") or {}
        for container in status.get("containerStatuses") or []:
            terminated = (container.get("state") or {}).get("terminated")
            if terminated:
                return _terminated_reason(terminated, pod)
        parts = [part for part in (status.get("reason"), status.get("message")) if part]
        if parts:
            return Reason.of("session.driver", message=": ".join(parts))
        return Reason.of("driver.pod_completed" if phase == "Succeeded" else "driver.pod_failed")

    def delete(self, session_id: str) -> None:
        session_id = canonical_session_id(session_id)
        for pod in self._session_pods(session_id):
            namespace = pod["metadata"]["namespace"]
            self._delete("the lab pod", self.core.delete_namespaced_pod, pod["metadata"]["name"], namespace)
            # Owned by the pod, so the garbage collector removes them anyway; deleting them by
            # name too frees them at once on clusters (and emulators) that collect lazily.
            parts = [
                ("the lab's service", self.core.delete_namespaced_service, builders.service_name(session_id)),
                ("the lab's secret", self.core.delete_namespaced_secret, builders.secret_name(session_id)),
            ]
            if self.ingress_host:
                parts.append(("the lab's route", self.networking.delete_namespaced_ingress, builders.ingress_name(session_id)))
            for what, deleter, name in parts:
                self._delete(what, deleter, name, namespace)
        # The NPU share is free only once the pod is gone, not when its deletion is accepted:
        # the controller sees that in observe() and only then releases the allocation.

    def _delete(self, what: str, method: Any, name: str, namespace: str) -> None:
        try:
            self._call(f"deleting {what}", method, name, namespace, passthrough=(404,), _preload_content=False).data  # noqa: B018
        except ApiException:
            pass  # already gone


class PodMetadataApi:
    """The one call the generated client cannot make: a pod list answered as metadata only.

    ``CoreV1Api`` sets the ``Accept`` header itself, so it cannot ask for a
    ``PartialObjectMetadataList``; this asks the same endpoint (``GET /api/v1/pods``, the
    ``list`` verb on pods, nothing more) with that header. The answer is left unread
    (``_preload_content=False``): the caller reads its JSON.
    """

    def __init__(self, api_client: client.ApiClient) -> None:
        self.api_client = api_client

    def list_pod_for_all_namespaces(self, *, field_selector: str, _request_timeout: float) -> Any:
        return self.api_client.call_api(
            "/api/v1/pods",
            "GET",
            query_params=[("fieldSelector", field_selector)],
            header_params={"Accept": PARTIAL_METADATA_LIST},
            auth_settings=["BearerToken"],
            _return_http_data_only=True,
            _preload_content=False,
            _request_timeout=_request_timeout,
        )


def _positive_quantity(value: object) -> bool:
    """Whether a Kubernetes quantity (``"800"``, ``"1k"``) is above 0; ``False`` for none or nonsense."""
    if value is None:
        return False
    try:
        return parse_quantity(value) > 0
    except (ValueError, TypeError):
        return False


def _list_items(answer: Any, what: str) -> list[Any]:
    """The ``items`` of a list read as plain JSON (an empty list comes with ``"items": null``);
    ``DriverError`` "The cluster API answered <what>." when it is not a list."""
    try:
        items = json.loads(answer.data).get("items") or []
    except (ValueError, AttributeError) as exc:
        raise DriverError(f"The cluster API answered {what}.") from exc
    if not isinstance(items, list):
        raise DriverError(f"The cluster API answered {what}.")
    return items


def _labels(pod: Mapping[str, Any]) -> dict[str, str]:
    return (pod.get("metadata") or {}).get("labels") or {}


def _terminated_reason(terminated: Mapping[str, Any], pod: Mapping[str, Any]) -> Reason:
    """Why the container of ``pod`` ended, e.g. "OOMKilled, exit code 137": its reason and message in
    Kubernetes's words, or a vendor error its log names (``labs.domain.vllm``)."""
    exit_code = terminated.get("exitCode")
    if isinstance(exit_code, bool) or not isinstance(exit_code, int | str):
        exit_code = "?"
    if terminated.get("reason"):
        reason = Reason.of("driver.container_exit", reason=str(terminated["reason"]), exit_code=exit_code)
    else:
        reason = Reason.of("driver.container_exit_code", exit_code=exit_code)
    message = str(terminated.get("message") or "")
    if not message:
        return reason
    # A vLLM container's message is its log's tail (``terminationMessagePolicy: FallbackToLogsOnError``):
    # a known vendor error is said with the vendor's advice, anything else by its last line.
    vendor = vllm.log_reason(message, cause=reason, args=_container_args(pod))
    if vendor is not None:
        return vendor
    lines = [line.strip() for line in message.splitlines() if line.strip()]
    return Reason.of("driver.with_detail", reason=reason, detail=lines[-1][:DETAIL_MAX_CHARS]) if lines else reason


def _container_args(pod: Mapping[str, Any]) -> list[str]:
    """The command line of the pod's (only) container: its command and arguments."""
    containers = (pod.get("spec") or {}).get("containers") or [{}]
    return [str(part) for part in (containers[0].get("command") or []) + (containers[0].get("args") or [])]


def _restarted_after(terminated: Mapping[str, Any], policy: str) -> bool:
    """Whether the kubelet starts a container that ended so again, under the pod's ``restartPolicy``."""
    return policy == "Always" or (policy == "OnFailure" and terminated.get("exitCode") != 0)


def _restarts(pod: Mapping[str, Any]) -> tuple[int, Reason | None]:
    """How many times the pod's containers ended and were, or are about to be, started again, and
    why the last one ended (``Observed.restarts``, ``Observed.last_exit``).

    ``restartCount`` counts the restarts the kubelet made. A container that ended and waits for
    its restart counts once more: still ``terminated``, or ``waiting`` with the end as its
    ``lastState`` (CrashLoopBackOff), since the kubelet counts a restart only once it makes it.
    """
    policy = (pod.get("spec") or {}).get("restartPolicy") or "Always"
    restarts, last_exit = 0, None
    for container in (pod.get("status") or {}).get("containerStatuses") or []:
        count = container.get("restartCount")
        restarts += count if isinstance(count, int) and not isinstance(count, bool) and count > 0 else 0
        state = container.get("state") or {}
        previous = (container.get("lastState") or {}).get("terminated")
        ended = state.get("terminated")
        if ended and _restarted_after(ended, policy):
            restarts += 1
            previous = ended
        elif previous and state.get("waiting"):
            restarts += 1
        if previous:
            last_exit = _terminated_reason(previous, pod)
    return restarts, last_exit


def _whole_quantity(value: object) -> int:
    """An extended resource's amount (``"800"``, ``"1k"``) as a whole number; 0 when absent or not a quantity."""
    try:
        return max(0, int(parse_quantity(value))) if value is not None else 0
    except (ValueError, TypeError):
        return 0


def _age_seconds(created: str | None) -> float | None:
    """Seconds since an API timestamp (RFC 3339, e.g. ``2026-12-02T04:10:00Z``); ``None`` without one."""
    if not created:
        return None
    try:
        moment = dt.datetime.fromisoformat(created.replace("Z", "+00:00"))
    except ValueError:
        return None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=dt.UTC)
    return (dt.datetime.now(dt.UTC) - moment).total_seconds()


def _check_vllm_pod_options(pod_options: dict[str, Any]) -> None:
    fraction = pod_options.get("vllm_memory_fraction", "0.90")
    try:
        ok = isinstance(fraction, str) and 0 < Decimal(fraction) <= 1
    except InvalidOperation:
        ok = False
    if not ok:
        raise ValueError(
            f"pod_options: vllm_memory_fraction must be a decimal in (0, 1] written as a string like '0.90', got {fraction!r}"
        )
    if pod_options.get("vllm_enforce_eager") not in (None, True, False):
        raise ValueError(
            "pod_options: vllm_enforce_eager must be true, false or null (null: eager on a shared card), "
            f"got {pod_options['vllm_enforce_eager']!r}"
        )


def _device_profile(where: str, name: str, settings: dict[str, Any]) -> DeviceProfile:
    """``get_profile``, its ``ValueError`` prefixed with the option that asked for the profile."""
    try:
        return get_profile(name, **settings)
    except ValueError as exc:
        raise ValueError(f"{where}: {exc}") from None


def _pool_profiles(option: dict[str, str | dict[str, Any]] | str | None) -> list[tuple[tuple[str, str], DeviceProfile]]:
    """Node pools by label and their profiles, first match first: ``[((label, value), profile)]``.

    ``"pool=research:vnpu,pool=lab:hami"``, ``{"pool=research": "vnpu"}``, or a pool's profile with
    its own options: ``{"pool=research": {"profile": "vnpu", "mode": "hard"}}``. A pool gets only
    its own options, never the default profile's ``profile_settings`` (they may not even apply).
    """
    if not option:
        return []
    if isinstance(option, dict):
        items = list(option.items())
    else:
        items = [tuple(item.strip().rsplit(":", 1)) for item in option.split(",") if item.strip()]
    result = []
    for item in items:
        if len(item) != 2:
            raise ValueError(f"pool_profiles: {item[0]!r} is not a label selector and a profile like pool=research:vnpu")
        selector, entry = item
        key, sep, value = str(selector).strip().partition("=")
        if not sep or not key or not value:
            raise ValueError(f"pool_profiles: {selector!r} is not a node label selector like pool=research")
        where = f"pool_profiles[{selector!r}]"
        if isinstance(entry, str):
            name, settings = entry.strip(), {}
        elif isinstance(entry, dict) and "profile" in entry:
            settings = {k: v for k, v in entry.items() if k != "profile"}
            name = entry["profile"]
        else:
            raise ValueError(f"{where} must be a profile name or {{'profile': name, ...its options}}, got {entry!r}")
        result.append(((key, value), _device_profile(where, name, settings)))
    return result
