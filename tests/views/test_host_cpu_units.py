"""Host CPU is asked for in cores and host memory in GiB in every form: a template's CPU request
and limit, and a course quota's caps of its labs' CPU and RAM. Kept as millicores and MiB, exactly;
refused in cores; in either language, through the ASGI application."""

from __future__ import annotations

import re

import pytest

from labs.models import AllowedImage, CourseQuota, LabTemplate
from tests.asgi_client import AsgiClient

pytestmark = pytest.mark.django_db(transaction=True)  # the page is served in the ASGI handler's threads

LABELS = {
    "en": (
        "CPU request (cores)",
        "CPU limit (cores)",
        "Host CPU cap (cores, all sessions)",
        "Host memory cap (GiB, all sessions)",
    ),
    "zh-hans": ("CPU 请求（核）", "CPU 上限（核）", "主机 CPU 上限（核，所有会话合计）", "主机内存上限（GiB，所有会话合计）"),
}
LIMIT_BELOW = {
    "en": "The CPU limit (1 core) must be at least the request (1.5 cores).",
    "zh-hans": "CPU 上限（1 核）不能小于请求（1.5 核）。",
}


def shown(html: str) -> str:
    """What a reader sees of a page: its text, without tags (the fields' names keep their units)."""
    return re.sub(r"<[^>]*>", " ", html)


@pytest.fixture
def lab(world):
    return AllowedImage.objects.create(institution=world["course"].institution, kind="jupyter", reference="jupyter/scipy")


def template_post(world, lab, language: str, **host):
    client = AsgiClient(user=world["instructor"], language=language)
    data = {"action": "create", "name": "t", "image": lab.pk, "core_percent": 10, "memory_mib": "8", "scenario": "development"}
    return client.post(f"/courses/{world['course'].pk}/templates/", {**data, **host})


@pytest.mark.parametrize("language", ["en", "zh-hans"])
def test_the_forms_ask_for_cores_and_gib_never_millicores_or_mib(world, lab, language):
    client = AsgiClient(user=world["instructor"], language=language)
    course = world["course"]
    templates = client.get(f"/courses/{course.pk}/templates/").text
    quota = client.get(f"/courses/{course.pk}/quota/").text

    request, limit, cpu_cap, memory_cap = LABELS[language]
    assert request in templates and limit in templates
    assert cpu_cap in quota and memory_cap in quota
    for html in (templates, quota):
        assert not re.search(r"millicore|毫核|\(MiB|（MiB", shown(html))
    field = re.search(r'<input [^>]*name="cpu_request_millicores"[^>]*>', templates).group(0)
    assert 'step="0.001"' in field, field


def test_cores_are_kept_as_exact_millicores(world, lab):
    answer = template_post(world, lab, "en", cpu_request_millicores="1.5", cpu_limit_millicores="2.25")

    assert answer.status_code == 302
    made = LabTemplate.objects.get(name="t")
    assert (made.cpu_request_millicores, made.cpu_limit_millicores) == (1500, 2250)


@pytest.mark.parametrize("language", ["en", "zh-hans"])
def test_a_cpu_limit_below_the_request_is_refused_in_cores(world, lab, language):
    below = template_post(world, lab, language, cpu_request_millicores="1.5", cpu_limit_millicores="1")
    finer = template_post(world, lab, language, cpu_request_millicores="0.0005")

    assert below.status_code == 200 and LIMIT_BELOW[language] in below.text
    assert finer.status_code == 200 and 'name="cpu_request_millicores"' in finer.text
    assert "millicore" not in shown(below.text + finer.text)
    assert not LabTemplate.objects.filter(name="t").exists()


def test_the_quota_caps_are_typed_in_cores_and_gib_and_shown_so_again(world):
    from tests.views.test_console import quota_data

    course = world["course"]
    client = AsgiClient(user=world["instructor"], language="en")
    saved = client.post(f"/courses/{course.pk}/quota/", quota_data(host_cpu_cap_millicores="12.5", host_memory_cap_mib="96.5"))
    off_grid = client.post(f"/courses/{course.pk}/quota/", quota_data(host_memory_cap_mib="0.1"))

    assert saved.status_code == 302
    quota = CourseQuota.objects.get(course=course)
    assert (quota.host_cpu_cap_millicores, quota.host_memory_cap_mib) == (12500, 98816)
    assert "Host memory is given in steps of 0.125 GiB: use 0 GiB or 0.125 GiB." in off_grid.text
    page = client.get(f"/courses/{course.pk}/quota/").text
    assert re.search(r'name="host_cpu_cap_millicores"[^>]*value="12.5"', page)
    assert re.search(r'name="host_memory_cap_mib"[^>]*value="96.5"', page)
