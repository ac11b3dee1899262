"""The object builders, checked against golden files (``UPDATE_GOLDEN=1`` rewrites them)."""

from __future__ import annotations

import json
import os
from dataclasses import replace
from pathlib import Path

import pytest

from labs.drivers.base import CardBinding, DriverError, DriverRefused, HostResources, LaunchSpec
from labs.drivers.kubernetes import builders, namespaces
from labs.drivers.kubernetes.profiles import get_profile

GOLDEN = Path(__file__).parent / "golden"
SESSION_ID = "0f8b3c2e-5d1a-4c47-9a6e-2b7f1e9d4c10"
CARD = CardBinding(
    node="npu-node-07",
    card_index=5,
    die_id="die-5b",
    chip_type="910B",
    core_percent=25,
    memory_mib=8192,
    scenario="development",
    card_memory_mib=65536,
)


def spec(kind: str, card: CardBinding = CARD, command: tuple[str, ...] = ()) -> LaunchSpec:
    return LaunchSpec(
        session_id=SESSION_ID,
        kind=kind,
        image=f"registry.example.edu/npu-lab/{kind}:1",
        secret="s3cr3t-token-never-in-the-pod",
        card=card,
        command=command,
        course_code="CS 231/Spring",
        student="Ada.Lovelace@example.edu",
        host=HostResources.for_kind(kind),
    )


def assert_golden(name: str, obj: object) -> None:
    text = json.dumps(obj, indent=2, sort_keys=True) + "\n"
    path = GOLDEN / f"{name}.json"
    if os.environ.get("UPDATE_GOLDEN") == "1":
        path.write_text(text)
    assert path.exists(), f"{path} is missing; run with UPDATE_GOLDEN=1 to write it"
    assert text == path.read_text(), f"{name} differs from {path}; if intended, run with UPDATE_GOLDEN=1"


@pytest.mark.parametrize("kind", ["jupyter", "vllm"])
@pytest.mark.parametrize("profile", ["flexnpu", "vnpu", "hami"])
def test_the_pod_matches_its_golden_file(profile: str, kind: str) -> None:
    pod = builders.make_pod(spec(kind), profile=get_profile(profile), namespace="lab-cs-231", options=builders.PodOptions())

    assert_golden(f"pod-{profile}-{kind}", pod)


def test_a_persistent_home_and_enforce_eager_match_their_golden_file() -> None:
    options = builders.PodOptions(home_pvc="home-{student}", vllm_enforce_eager=True, vllm_max_num_batched_tokens=1024)

    assert_golden(
        "pod-flexnpu-jupyter-home", builders.make_pod(spec("jupyter"), profile=get_profile(), namespace="ns", options=options)
    )
    assert_golden(
        "pod-flexnpu-vllm-eager", builders.make_pod(spec("vllm"), profile=get_profile(), namespace="ns", options=options)
    )


@pytest.mark.parametrize("kind", ["jupyter", "vllm"])
def test_the_secret_is_only_in_the_secret_object(kind: str) -> None:
    pod = builders.make_pod(spec(kind), profile=get_profile(), namespace="ns", options=builders.PodOptions())
    secret = builders.make_secret(spec(kind), namespace="ns")

    assert "s3cr3t-token-never-in-the-pod" not in json.dumps(pod)
    assert secret["stringData"]["token"] == "s3cr3t-token-never-in-the-pod"
    env = {item["name"]: item for item in pod["spec"]["containers"][0]["env"]}
    if kind == "vllm":  # vLLM takes its key only from --api-key or VLLM_API_KEY
        assert env["VLLM_API_KEY"]["valueFrom"]["secretKeyRef"] == {"name": secret["metadata"]["name"], "key": "token"}


def test_jupyter_reads_its_token_from_a_mounted_file_not_the_environment() -> None:
    pod = builders.make_pod(spec("jupyter"), profile=get_profile(), namespace="ns", options=builders.PodOptions())
    container = pod["spec"]["containers"][0]
    env = {item["name"]: item for item in container["env"]}
    volumes = {v["name"]: v for v in pod["spec"]["volumes"]}
    mounts = {m["name"]: m for m in container["volumeMounts"]}

    assert "JUPYTER_TOKEN" not in env
    assert not any("valueFrom" in item for item in container["env"])
    assert env["JUPYTER_TOKEN_FILE"]["value"] == f"{mounts['token']['mountPath']}/token"
    assert volumes["token"]["secret"]["secretName"] == builders.secret_name(SESSION_ID)
    assert mounts["token"]["readOnly"] is True


@pytest.mark.parametrize("kind", ["jupyter", "vllm"])
@pytest.mark.parametrize("home_pvc", ["", "home-{student}"])
def test_every_pod_asks_for_the_templates_host_resources_on_a_read_only_root(kind: str, home_pvc: str) -> None:
    host = HostResources(750, 1500, 3072, 6144, 4096)
    pod = builders.make_pod(
        replace(spec(kind), host=host), profile=get_profile(), namespace="ns", options=builders.PodOptions(home_pvc=home_pvc)
    )
    container = pod["spec"]["containers"][0]
    resources = container["resources"]

    assert {k: resources["requests"][k] for k in ("cpu", "memory", "ephemeral-storage")} == {
        "cpu": "750m",
        "memory": "3072Mi",
        "ephemeral-storage": "4096Mi",
    }
    assert {k: resources["limits"][k] for k in ("cpu", "memory", "ephemeral-storage")} == {
        "cpu": "1500m",
        "memory": "6144Mi",
        "ephemeral-storage": "4096Mi",
    }
    assert container["securityContext"]["readOnlyRootFilesystem"] is True
    assert container["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    assert pod["spec"]["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    assert {"livenessProbe", "readinessProbe", "startupProbe"} <= set(container)
    mounted = {m["mountPath"] for m in container["volumeMounts"]}
    assert "/tmp" in mounted
    # Every mount has its volume.
    assert {m["name"] for m in container["volumeMounts"]} <= {v["name"] for v in pod["spec"]["volumes"]}


def test_host_resources_refuse_a_limit_below_the_request() -> None:
    with pytest.raises(ValueError, match="memory limit is below the request"):
        HostResources(500, 1000, 4096, 2048, 1024)


def test_service_secret_namespace_policy_and_quota_match_their_golden_files() -> None:
    quota = namespaces.CourseQuota(
        guarantee_core_percent=400,
        guarantee_memory_mib=65536,
        guarantee_instances=16,
        borrow_core_percent=200,
        borrow_memory_mib=32768,
        borrow_instances=8,
    )

    assert_golden("service-jupyter", builders.make_service(spec("jupyter"), namespace="lab-cs-231"))
    assert_golden("secret-vllm", builders.make_secret(spec("vllm"), namespace="lab-cs-231"))
    assert_golden("namespace", namespaces.make_namespace("CS 231/Spring"))
    assert_golden("network-policy", namespaces.make_network_policy("CS 231/Spring"))
    for profile in ("flexnpu", "vnpu", "hami"):
        assert_golden(
            f"resource-quota-{profile}", namespaces.make_resource_quota("CS 231/Spring", quota, profile=get_profile(profile))
        )


def test_the_network_policy_admits_no_traffic_between_lab_pods() -> None:
    policy = namespaces.make_network_policy("NPU101")

    assert policy["spec"]["podSelector"] == {}
    assert policy["spec"]["policyTypes"] == ["Ingress"]
    for rule in policy["spec"]["ingress"]:
        assert all("namespaceSelector" in peer for peer in rule["from"])


def test_a_16_gib_share_of_a_32_gib_910b4_gets_0_45_of_the_card_in_its_pod() -> None:
    """The issue's bar: 16384 / 32768 x 0.90 = 0.45 (the card's memory from the ledger, no name table)."""
    card = replace(CARD, chip_type="Ascend910B4", memory_mib=16384, card_memory_mib=32768)
    pod = builders.make_pod(spec("vllm", card), profile=get_profile(), namespace="ns", options=builders.PodOptions())

    assert "--gpu-memory-utilization=0.45" in pod["spec"]["containers"][0]["args"]
    assert_golden("pod-flexnpu-vllm-910b4-16gib", pod)


@pytest.mark.parametrize(
    ("memory_mib", "card_memory_mib", "expected"),
    [(8192, 65536, "0.11"), (65536, 65536, "0.90"), (16384, 32768, "0.45"), (32768, 65536, "0.45"), (4096, 32768, "0.11")],
)
def test_vllm_memory_utilization_is_the_cap_as_a_fraction_of_the_card_rounded_down(
    memory_mib: int, card_memory_mib: int, expected: str
) -> None:
    card = replace(CARD, memory_mib=memory_mib, card_memory_mib=card_memory_mib)

    assert builders.vllm_memory_utilization(card) == expected


def test_where_the_runtime_reports_the_cap_the_fraction_is_the_headroom_of_the_cap() -> None:
    card = replace(CARD, memory_mib=16384, card_memory_mib=32768)
    pod = builders.make_pod(
        spec("vllm", card), profile=get_profile("vnpu", memory_seen="cap"), namespace="ns", options=builders.PodOptions()
    )

    assert builders.vllm_memory_utilization(card, "0.85", memory_seen="cap") == "0.85"
    assert "--gpu-memory-utilization=0.90" in pod["spec"]["containers"][0]["args"]


def test_a_card_of_unknown_memory_gets_no_vllm_pod() -> None:
    card = replace(CARD, card_memory_mib=0)

    with pytest.raises(DriverError, match="card's memory is unknown"):
        builders.make_pod(spec("vllm", card), profile=get_profile(), namespace="ns", options=builders.PodOptions())


@pytest.mark.parametrize("kind", ["jupyter", "vllm"])
@pytest.mark.parametrize("image", ["", "  "])
def test_a_spec_without_a_container_image_gets_no_pod_and_is_not_retried(kind: str, image: str) -> None:
    with pytest.raises(DriverRefused, match="names no container image"):
        builders.make_pod(replace(spec(kind), image=image), profile=get_profile(), namespace="ns", options=builders.PodOptions())


def test_a_shared_card_runs_vllm_eager_and_a_whole_card_may_capture_graphs() -> None:
    whole = replace(CARD, core_percent=100, memory_mib=65536)
    half_cores = replace(CARD, core_percent=50, memory_mib=65536)

    def args(card: CardBinding, **options: object) -> list[str]:
        pod = builders.make_pod(spec("vllm", card), profile=get_profile(), namespace="ns", options=builders.PodOptions(**options))
        return pod["spec"]["containers"][0]["args"]

    assert "--enforce-eager" in args(CARD)
    assert "--enforce-eager" in args(half_cores)
    assert "--enforce-eager" not in args(whole)
    assert "--enforce-eager" in args(whole, vllm_enforce_eager=True)
    assert "--enforce-eager" not in args(CARD, vllm_enforce_eager=False)


@pytest.mark.parametrize(
    "command", [("python", "-m", "vllm.entrypoints.openai.api_server"), ("python3", "-m", "vllm"), ("vllm",)]
)
def test_a_vllm_pod_is_refused_for_a_command_other_than_vllm_serve(command: tuple[str, ...]) -> None:
    with pytest.raises(DriverError, match="vllm serve MODEL"):
        builders.make_pod(spec("vllm", command=command), profile=get_profile(), namespace="ns", options=builders.PodOptions())


def test_a_vllm_pod_takes_vllm_serve_and_the_model_as_first_argument() -> None:
    pod = builders.make_pod(
        spec("vllm", command=("vllm", "serve")), profile=get_profile(), namespace="ns", options=builders.PodOptions()
    )

    assert pod["spec"]["containers"][0]["command"] == ["vllm", "serve"]
    assert pod["spec"]["containers"][0]["args"][0] == builders.PodOptions().vllm_model


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("ada", "ada"),
        ("NPU101", "NPU101"),
        ("Ada.Lovelace@example.edu", "Ada.Lovelace-example.edu-7d2d9a6c"),
        ("x" * 70, "x" * 54 + "-" + "7b58bff0"),
    ],
)
def test_label_values_are_made_safe_and_stay_distinct(value: str, expected: str) -> None:
    result = builders.label_value(value)

    assert len(result) <= 63
    assert result[:20] == expected[:20]
    assert builders.label_value(value) != builders.label_value(value + "!")


def test_namespace_names_are_lowercase_dns_labels() -> None:
    assert builders.namespace_name("NPU101") == "lab-npu101"
    assert builders.namespace_name("CS 231/Spring").startswith("lab-cs-231-spring-")
    assert builders.namespace_name("") == "lab-default"


def test_a_lab_tolerates_a_lost_node_for_the_configured_time_only() -> None:
    """Kubernetes would keep a pod on a node that stopped answering for 300 s; a lab is evicted
    after ``node_lost_seconds`` so its student can launch again elsewhere."""
    options = builders.PodOptions(node_lost_seconds=45)
    pod = builders.make_pod(spec("jupyter"), profile=get_profile("flexnpu"), namespace="ns", options=options)
    tolerations = {t["key"]: t for t in pod["spec"]["tolerations"]}
    assert set(tolerations) == {"node.kubernetes.io/unreachable", "node.kubernetes.io/not-ready"}
    assert {(t["effect"], t["operator"], t["tolerationSeconds"]) for t in tolerations.values()} == {("NoExecute", "Exists", 45)}
