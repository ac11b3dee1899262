"""Best-effort templates (no AI Core floor: cores 0, memory only) in the instructor console and the
API: offered only where the cluster runs them (openFuyao vNPU in soft mode), said as such."""

from __future__ import annotations

from typing import Any

import pytest
from django.test import Client

from labs.drivers import get_driver
from labs.models import AllowedImage, LabTemplate


@pytest.fixture
def soft_vnpu(settings: Any):
    """The Kubernetes driver on openFuyao vNPU in soft mode (nothing here calls its API)."""
    settings.LAB_DRIVER = {
        "BACKEND": "labs.drivers.kubernetes.KubernetesDriver",
        "OPTIONS": {"api_url": "https://127.0.0.1:9", "token": "t", "profile": "vnpu", "profile_settings": {"mode": "soft"}},
    }
    get_driver.cache_clear()
    yield
    get_driver.cache_clear()


def logged_in(user) -> Client:
    client = Client()
    client.force_login(user)
    return client


def form(course, **overrides) -> dict[str, object]:
    allowed = AllowedImage.objects.create(institution=course.institution, kind="jupyter", reference="jupyter/scipy")
    return {"action": "create", "name": "explore", "image": allowed.pk, "core_percent": 0, "memory_mib": "4", **overrides}


def test_an_instructor_makes_a_best_effort_template_where_the_cluster_runs_them(world, soft_vnpu):
    course = world["course"]
    client = logged_in(world["instructor"])
    data = form(course, share_policy="best-effort")
    assert 'name="share_policy"' in client.get(f"/courses/{course.pk}/templates/").content.decode()

    response = client.post(f"/courses/{course.pk}/templates/", data)

    assert response.status_code == 302
    made = LabTemplate.objects.get(name="explore")
    assert (made.share_policy, made.core_percent, made.memory_mib) == ("best-effort", 0, 4096)
    page = client.get(f"/courses/{course.pk}/templates/").content.decode()
    assert "best effort: no AI Core guaranteed (it uses what the card has idle), 4\u00a0GiB memory" in page


def test_a_best_effort_template_with_a_floor_is_refused_and_nothing_is_made(world, soft_vnpu):
    course = world["course"]
    client = logged_in(world["instructor"])

    response = client.post(f"/courses/{course.pk}/templates/", form(course, share_policy="best-effort", core_percent=10))

    assert response.status_code == 200
    assert "A best-effort instance has no AI Core floor: set it to 0." in response.content.decode()
    assert not LabTemplate.objects.filter(name="explore").exists()


def test_where_the_cluster_has_no_best_effort_the_field_is_absent_and_a_zero_floor_refused(world):
    course = world["course"]
    client = logged_in(world["instructor"])
    data = form(course, share_policy="best-effort")
    page = client.get(f"/courses/{course.pk}/templates/").content.decode()
    assert 'name="card_count"' in page and 'name="share_policy"' not in page

    response = client.post(f"/courses/{course.pk}/templates/", data)

    assert response.status_code == 200
    assert "An AI Core floor from 1 to 100 is needed; 0 means best effort." in response.content.decode()
    assert not LabTemplate.objects.filter(name="explore").exists()
