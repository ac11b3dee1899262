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

import json
import os
import threading
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import fields, replace
from typing import Any

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from labs.drivers.base import ClusterDriver, DriverError, DriverRefused, LaunchSpec
from labs.drivers.kubernetes import builders, namespaces
from labs.drivers.kubernetes.api import RETRY_STATUSES, PodMetadataApi, api_message, client_configuration
from labs.drivers.kubernetes.options import (
    DNS_NAME,
    HOST,
    as_bool,
    check_vllm_pod_options,
    option_profile,
    parse_pool_profiles,
)
from labs.drivers.kubernetes.profiles import PROFILES, DeviceProfile
from labs.drivers.kubernetes.reading import ClusterReader
from labs.drivers.statefile import canonical_session_id

# Threads making labs' secrets, services and routes (three a lab, side by side): enough for the
# controller's pool to make its labs' parts at once.
PARTS_THREADS = 24
DEFAULT_URL_PATTERN = builders.PodOptions.url_pattern


class KubernetesDriver(ClusterReader, ClusterDriver):
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
        if ingress_host and not HOST.fullmatch(ingress_host):
            raise ValueError(f"ingress_host must be a host name like labs.example.edu, no scheme or path; got {ingress_host!r}")
        if not DNS_NAME.fullmatch(ingress_class_name):
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
        check_vllm_pod_options(pod_options or {})
        where = "profile_settings" if profile in PROFILES else "profile"
        self.profile: DeviceProfile = option_profile(where, profile, profile_settings or {})
        self.pool_profiles = parse_pool_profiles(pool_profiles)
        self.pod_options = builders.PodOptions(**{**(pod_options or {}), "url_pattern": url_pattern})
        self.namespace_prefix = namespace_prefix
        self.manage_namespaces = as_bool(manage_namespaces)
        self.portal_namespace = portal_namespace
        self.ingress_namespace = ingress_namespace
        self.ingress_host = ingress_host
        self.ingress_class_name = ingress_class_name
        self.spawn_timeout_seconds = float(spawn_timeout_seconds)
        self.request_timeout_seconds = float(request_timeout_seconds)
        self.delete_wait_seconds = float(delete_wait_seconds)
        self.api_client = client.ApiClient(
            client_configuration(api_url, token, kubeconfig, as_bool(verify_ssl), ca_cert, int(retries))
        )
        self.core = client.CoreV1Api(self.api_client)
        self.networking = client.NetworkingV1Api(self.api_client)
        self.metadata_api = PodMetadataApi(self.api_client)
        self._ensured_namespaces: set[str] = set()
        self._parts: ThreadPoolExecutor | None = None
        self._parts_pid = 0
        self._parts_lock = threading.Lock()

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
                raise DriverRefused(f"The cluster refused the lab pod: {api_message(exc)}.") from exc
            if exc.status == 409:
                raise DriverError("The lab pod disappeared right after it was created; try again.") from None
            raise DriverError(f"The cluster did not create the lab pod: {api_message(exc)}; it is tried again shortly.") from exc
        except DriverRefused:
            raise
        except DriverError:
            if (pod := self._read_pod(name, namespace)) is not None:
                return pod
            raise
        return json.loads(answer.data)

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
