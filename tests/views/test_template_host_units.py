"""The instructor's template form asks for host memory and scratch disk in GiB, as the quota form
asks for memory: on the 128 MiB grid, converted to MiB exactly, and refused in GiB, in either
language, through the ASGI application."""

from __future__ import annotations

import re

import pytest

from labs.models import AllowedImage, LabTemplate
from tests.asgi_client import AsgiClient

pytestmark = pytest.mark.django_db(transaction=True)  # the page is served in the ASGI handler's threads


@pytest.fixture
def lab(world):
    return AllowedImage.objects.create(institution=world["course"].institution, kind="jupyter", reference="jupyter/scipy")


def create(world, lab, language: str, **host):
    client = AsgiClient(user=world["instructor"], language=language)
    data = {"action": "create", "name": "t", "image": lab.pk, "core_percent": 10, "memory_mib": "8", "scenario": "development"}
    return client.post(f"/courses/{world['course'].pk}/templates/", {**data, **host})


@pytest.mark.parametrize(
    ("language", "labels"),
    [
        ("en", ["Host memory request (GiB)", "Host memory limit (GiB)", "Scratch disk (GiB)"]),
        ("zh-hans", ["主机内存请求（GiB）", "主机内存上限（GiB）", "临时磁盘（GiB）"]),
    ],
)
def test_the_form_asks_for_host_memory_and_scratch_disk_in_gib(world, lab, language, labels):
    page = AsgiClient(user=world["instructor"], language=language).get(f"/courses/{world['course'].pk}/templates/")

    assert page.status_code == 200
    assert all(label in page.text for label in labels)
    assert "(MiB)" not in page.text and "（MiB）" not in page.text
    for name in ("host_memory_request_mib", "host_memory_limit_mib", "ephemeral_storage_mib"):
        field = re.search(rf'<input [^>]*name="{name}"[^>]*>', page.text).group(0)
        assert 'step="0.125"' in field, field


def test_gib_are_stored_as_exact_mib(world, lab):
    answer = create(world, lab, "en", host_memory_request_mib="1.5", host_memory_limit_mib="2.125", ephemeral_storage_mib="20")

    assert answer.status_code == 302
    made = LabTemplate.objects.get(name="t")
    assert (made.host_memory_request_mib, made.host_memory_limit_mib, made.ephemeral_storage_mib) == (1536, 2176, 20480)


@pytest.mark.parametrize(
    ("language", "memory", "disk", "limit"),
    [
        (
            "en",
            "Host memory is given in steps of 0.125 GiB: use 1 GiB or 1.125 GiB.",
            "Scratch disk is given in steps of 0.125 GiB: use 0.25 GiB or 0.375 GiB.",
            "The memory limit (1 GiB) must be at least the request (1.5 GiB).",
        ),
        (
            "zh-hans",
            "主机内存按 0.125 GiB 的单位设置：请使用 1 GiB 或 1.125 GiB。",
            "临时磁盘按 0.125 GiB 的单位设置：请使用 0.25 GiB 或 0.375 GiB。",
            "内存上限（1 GiB）不能小于请求（1.5 GiB）。",
        ),
    ],
)
def test_amounts_off_the_grid_or_a_limit_below_the_request_are_refused_in_gib(world, lab, language, memory, disk, limit):
    off_grid = create(world, lab, language, host_memory_request_mib="1.1", ephemeral_storage_mib="0.3")
    below = create(world, lab, language, host_memory_request_mib="1.5", host_memory_limit_mib="1")

    assert off_grid.status_code == 200 and memory in off_grid.text and disk in off_grid.text
    assert below.status_code == 200 and limit in below.text
    assert "MiB" not in off_grid.text + below.text
    assert not LabTemplate.objects.filter(name="t").exists()
