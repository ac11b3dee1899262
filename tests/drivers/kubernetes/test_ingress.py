"""A route per session (``ingress_host``): students open ``https://<host>/labs/<session>/``.

Against kmock's API emulator over HTTP, like the other driver tests; the test plays the kubelet.
"""

from __future__ import annotations

import pytest

from labs.drivers import PollStatus, build_driver
from labs.drivers.kubernetes import KubernetesDriver
from tests.drivers.helpers import make_spec
from tests.drivers.kubernetes.conftest import driver_config
from tests.drivers.kubernetes.emulator import EmulatorThread, Kubelet

HOST = "labs.example.edu"


@pytest.fixture
def routed(emulator: EmulatorThread) -> KubernetesDriver:
    config = driver_config(emulator.url, ingress_host=HOST)
    del config["OPTIONS"]["url_pattern"]  # the route's address is then the access URL
    driver = build_driver(config)
    assert isinstance(driver, KubernetesDriver)
    return driver


def test_a_jupyterlab_session_gets_its_route_and_its_address_is_the_lab_url(
    routed: KubernetesDriver, emulator: EmulatorThread, kubelet: Kubelet
) -> None:
    spec = make_spec()
    routed.create(spec)

    (ingress,) = emulator.objects("ingresses")
    (pod,) = emulator.objects("pods")
    assert ingress["spec"]["ingressClassName"] == "nginx"
    (rule,) = ingress["spec"]["rules"]
    assert rule["host"] == HOST
    (path,) = rule["http"]["paths"]
    assert (path["path"], path["pathType"]) == (f"/labs/{spec.session_id}/", "Prefix")  # JupyterLab's own base_url
    assert path["backend"]["service"] == {"name": f"lab-{spec.session_id}", "port": {"number": 8888}}
    assert ingress["metadata"]["ownerReferences"][0]["uid"] == pod["metadata"]["uid"]  # collected with the pod
    assert ingress["metadata"]["annotations"]["nginx.ingress.kubernetes.io/proxy-read-timeout"] == "3600"  # kernels' sockets
    kubelet.running(pod)
    result = routed.poll(spec.session_id)
    assert result.status == PollStatus.RUNNING
    assert result.access_url == f"https://{HOST}/labs/{spec.session_id}/"


def test_a_vllm_route_strips_the_prefix_vllm_serves_at_its_root(routed: KubernetesDriver, emulator: EmulatorThread) -> None:
    spec = make_spec(kind="vllm", image="npu-lab/vllm:1")
    routed.create(spec)

    (ingress,) = emulator.objects("ingresses")
    (path,) = ingress["spec"]["rules"][0]["http"]["paths"]
    assert (path["path"], path["pathType"]) == (f"/labs/{spec.session_id}(/|$)(.*)", "ImplementationSpecific")
    annotations = ingress["metadata"]["annotations"]
    assert annotations["nginx.ingress.kubernetes.io/rewrite-target"] == "/$2"
    assert annotations["nginx.ingress.kubernetes.io/use-regex"] == "true"
    assert path["backend"]["service"]["port"] == {"number": 8000}


def test_delete_removes_the_route_with_the_pod(routed: KubernetesDriver, emulator: EmulatorThread) -> None:
    keep, drop = make_spec(), make_spec()
    routed.create(keep)
    routed.create(drop)

    routed.delete(drop.session_id)

    assert [i["metadata"]["name"] for i in emulator.objects("ingresses")] == [f"lab-{keep.session_id}"]


def test_without_a_host_no_route_is_made(k8s_driver: KubernetesDriver, emulator: EmulatorThread) -> None:
    k8s_driver.create(make_spec())
    assert emulator.objects("ingresses") == []


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"ingress_host": "https://labs.example.edu/"}, "ingress_host must be a host name like labs.example.edu"),
        ({"ingress_host": "Labs_Example"}, "ingress_host must be a host name"),
        ({"ingress_class_name": "Nginx Class"}, "ingress_class_name must be an IngressClass name"),
    ],
)
def test_a_bad_host_or_class_is_refused_naming_the_option(emulator: EmulatorThread, options: dict, message: str) -> None:
    with pytest.raises(Exception, match=message):
        build_driver(driver_config(emulator.url, **options))
