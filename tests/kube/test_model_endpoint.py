"""A course model endpoint's lab on the real control plane: a student's request queues it, the
allocation pass places it, and the portal's driver creates its vLLM pod and service, which the API
server accepts (the pod built by ``builders.make_pod``, as every vLLM lab's; golden files
``pod-*-vllm*.json``)."""

from __future__ import annotations

from typing import Any

import pytest
from kubernetes import client

from labs.devcluster.cluster import DevCluster
from labs.devcluster.portal import portal_token
from labs.drivers import get_driver
from labs.drivers.kubernetes import builders
from labs.models import Course, CourseEndpoint, LabSession, LabTemplate
from labs.services.allocation import allocation_pass
from labs.services.controller.creates import launch_spec
from labs.services.gateway import endpoint_key_issue
from tests.asgi_client import AsgiClient
from tests.factories import EnrollmentFactory, node_with_cards
from tests.kube.conftest import make_lab_course, portal_driver_config

pytestmark = pytest.mark.kube


def test_a_request_starts_the_endpoints_vllm_pod_on_the_control_plane(
    deployed: DevCluster, core: client.CoreV1Api, transactional_db: None, settings: Any
) -> None:
    lab_course = make_lab_course(deployed, settings, profile="flexnpu", code="LLM101")
    try:
        # The portal's driver from the start: the allocation pass asks it what the nodes run.
        settings.LAB_DRIVER = portal_driver_config(
            deployed, portal_token(core), namespace_prefix=lab_course.prefix, profile="flexnpu"
        )
        get_driver.cache_clear()
        course = Course.objects.get(code="LLM101")
        node_with_cards(name=lab_course.node, cards=1)
        template = LabTemplate.objects.create(
            institution=course.institution,
            name="Qwen3 8B",
            slug="qwen3-8b",
            kind=LabTemplate.Kind.VLLM,
            image="registry.example.edu/vllm-ascend:0.9",
            model="Qwen/Qwen3-8B",
            core_percent=50,
            memory_mib=32768,
            scenario="inference",
        )
        course.templates.add(template)
        endpoint = CourseEndpoint.objects.create(course=course, template=template, served_model_name="Qwen3-8B", upstream_url="")
        key = endpoint_key_issue(enrollment=EnrollmentFactory(course=course))
        body = {"model": "Qwen3-8B", "messages": [{"role": "user", "content": "hi"}]}
        response = AsgiClient().request(
            "POST", f"/gateway/{endpoint.pk}/v1/chat/completions", json=body, headers={"Authorization": f"Bearer {key}"}
        )
        assert response.status_code == 503
        allocation_pass()
        session = LabSession.objects.select_related("allocation__card__node", "template").get()
        assert session.state == "admitted", (session.reason_code, session.reason_params)

        uid = get_driver().create(launch_spec(session))
        pod = next(p for p in core.list_namespaced_pod(lab_course.namespace).items if p.metadata.uid == uid)
        container = pod.spec.containers[0]
        assert pod.metadata.labels[builders.KIND_LABEL] == "vllm"
        assert pod.metadata.labels[builders.SESSION_LABEL] == str(session.pk)
        assert "--served-model-name=Qwen3-8B" in container.args  # the name the endpoint's students send
        assert container.args[0] == "Qwen/Qwen3-8B"
        assert core.read_namespaced_service(builders.service_name(str(session.pk)), lab_course.namespace)
    finally:
        get_driver.cache_clear()
        core.delete_namespace(lab_course.namespace)
