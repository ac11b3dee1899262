"""Every template the instructor console can make, created for real: the API server accepts its pod.

The templates come from the console's own form (``TemplateForm``, as a course's instructor fills
it in) for each kind (JupyterLab, vLLM), each scenario, with the kind's default host resources
and with the instructor's own; each is launched by the portal's driver (deploy/base's
ServiceAccount, a namespace from ``course_manifests`` that enforces the ``restricted`` Pod
Security Standard) on each device profile's node.
"""

from __future__ import annotations

import dataclasses
import itertools
from typing import Any

import pytest
from kubernetes import client
from kubernetes.utils import parse_quantity

from labs.devcluster.cluster import DevCluster
from labs.devcluster.portal import portal_token
from labs.drivers import LaunchSpec, get_driver
from labs.drivers.kubernetes import builders
from labs.forms import TemplateForm
from labs.models import AllowedImage, Course, LabTemplate
from labs.selectors.console import ClusterFacts
from labs.services.controller import template_launch_fields
from tests.kube.conftest import PROFILES, lab_spec, make_lab_course, portal_driver_config

pytestmark = pytest.mark.kube

REFERENCES = {"jupyter": "registry.example.edu/jupyterlab:4", "vllm": "Qwen/Qwen2.5-0.5B-Instruct"}
# The image the allow-list names for serving the vLLM model (a console template takes it from there).
VLLM_IMAGE = "registry.example.edu/vllm-ascend:0.9"
OWN_HOST = {
    "cpu_request_millicores": "1.5",
    "cpu_limit_millicores": "6",
    "host_memory_request_mib": "4",
    "host_memory_limit_mib": "12",
    "ephemeral_storage_mib": "20",
}
FACTS = ClusterFacts(cards_by_node=(8,), largest_card_mib=65536, memory_total_mib=8 * 65536, memory_step_mib=1024)
CASES = list(itertools.product(("jupyter", "vllm"), ("development", "inference"), ("defaults", "own")))


def console_template(course: Course, kind: str, scenario: str, host: str) -> LabTemplate:
    """The template the console's form makes of this choice."""
    serving = {"image": VLLM_IMAGE} if kind == "vllm" else {}
    allowed = AllowedImage.objects.get_or_create(
        institution=course.institution, kind=kind, reference=REFERENCES[kind], defaults=serving
    )[0]
    data = {
        "name": f"{kind} {scenario} {host}",
        "image": allowed.pk,
        "core_percent": "10",
        "memory_mib": "8",
        "scenario": scenario,
        **(OWN_HOST if host == "own" else {}),
    }
    form = TemplateForm(data, institution=course.institution, facts=FACTS)
    assert form.is_valid(), form.errors
    assert form.template_fields()["image"] == (VLLM_IMAGE if kind == "vllm" else REFERENCES["jupyter"])
    return LabTemplate(institution=course.institution, course=course, **form.template_fields())


def template_spec(template: LabTemplate, base: LaunchSpec) -> LaunchSpec:
    """``labs.services.controller.launch_spec``'s reading of a template, on ``base``'s card."""
    return dataclasses.replace(base, kind=template.kind, image=template.image, **template_launch_fields(template))


@pytest.mark.parametrize("profile", PROFILES)
def test_the_api_server_accepts_every_template_the_console_makes(
    deployed: DevCluster, core: client.CoreV1Api, db: None, settings: Any, profile: str
) -> None:
    quota = {"core_percent": 800, "memory_mib": 131072, "instance_count": 32}
    course = make_lab_course(deployed, settings, profile=profile, quota=quota)
    # The portal's driver as its settings name it: the console's form asks it what the cluster runs.
    settings.LAB_DRIVER = portal_driver_config(deployed, portal_token(core), namespace_prefix=course.prefix, profile=profile)
    get_driver.cache_clear()
    try:
        driver = get_driver()
        made = {}
        for kind, scenario, host in CASES:
            template = console_template(Course.objects.get(code=course.code), kind, scenario, host)
            spec = template_spec(template, lab_spec(course, core_percent=10, memory_mib=8192, scenario=scenario))
            made[spec.session_id] = (template, driver.create(spec))

        pods = {p.metadata.uid: p for p in core.list_namespaced_pod(course.namespace).items}
        for session_id, (template, uid) in made.items():
            container = pods[uid].spec.containers[0]
            # The API server stores quantities in canonical form ("2000m" is "2"): compared as amounts.
            assert parse_quantity(container.resources.limits["cpu"]) * 1000 == template.cpu_limit_millicores, template
            assert parse_quantity(container.resources.requests["memory"]) == template.host_memory_request_mib * 2**20, template
            assert pods[uid].metadata.labels[builders.KIND_LABEL] == template.kind
            assert core.read_namespaced_service(builders.service_name(session_id), course.namespace)
        assert {t.kind for t, _uid in made.values()} == {"jupyter", "vllm"}
    finally:
        get_driver.cache_clear()
        core.delete_namespace(course.namespace)
