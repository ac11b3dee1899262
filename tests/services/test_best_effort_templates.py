"""Best-effort templates (no AI Core floor: cores 0, memory only), which only openFuyao vNPU in soft
mode runs: refused with a clear message on a cluster that cannot run them, placed only on the
nodes that can, and said to students as best effort."""

from __future__ import annotations

from typing import Any

import pytest
from django.core.exceptions import ValidationError
from django.db import IntegrityError, transaction

from labs.drivers import get_driver
from labs.models import Allocation, LabSession, LabTemplate, Node
from labs.presentation import share_text
from labs.services.allocation import allocation_pass
from labs.services.sessions import session_launch
from tests.factories import TemplateFactory, course_with_students, node_with_cards

POOL = {"npu-lab.portal/device-profile": "vnpu"}


@pytest.fixture
def kubernetes_driver(settings: Any):
    """The Kubernetes driver as configured (no API call is made): ``use(**options)`` sets its options."""

    def use(**options: Any) -> None:
        settings.LAB_DRIVER = {
            "BACKEND": "labs.drivers.kubernetes.KubernetesDriver",
            "OPTIONS": {"api_url": "https://127.0.0.1:9", "token": "t", **options},
        }
        get_driver.cache_clear()

    yield use
    get_driver.cache_clear()


def best_effort(course, **fields: Any) -> LabTemplate:
    template = TemplateFactory.build(
        institution=course.institution, name="explore", slug="explore", core_percent=0, memory_mib=4096, **fields
    )
    template.share_policy = "best-effort"
    return template


def test_a_best_effort_template_is_refused_where_the_cluster_cannot_run_one(db, kubernetes_driver):
    course, *_ = course_with_students(0)
    kubernetes_driver(profile="flexnpu")

    with pytest.raises(ValidationError) as refused:
        best_effort(course).full_clean()

    assert refused.value.message_dict["share_policy"] == [
        "This cluster cannot run best-effort instances: only openFuyao vNPU in soft mode has them "
        "(FlexNPU and HAMi shares always have an AI Core floor)."
    ]
    kubernetes_driver(profile="vnpu", profile_settings={"mode": "hard"})
    with pytest.raises(ValidationError, match="cannot run best-effort instances"):
        best_effort(course).full_clean()


def test_a_best_effort_template_has_no_floor_and_a_floored_one_has_one(db, kubernetes_driver):
    course, *_ = course_with_students(0)
    kubernetes_driver(profile="vnpu")
    best_effort(course).full_clean()

    template = best_effort(course)
    template.core_percent = 5
    with pytest.raises(ValidationError, match="has no AI Core floor: set it to 0"):
        template.full_clean()
    template.share_policy, template.core_percent = "elastic", 0
    with pytest.raises(ValidationError, match="An AI Core floor from 1 to 100 is needed"):
        template.full_clean()
    template.slug = "floorless"
    with pytest.raises(IntegrityError), transaction.atomic():
        template.save()


def test_a_best_effort_session_is_placed_only_on_the_vnpu_pool(db, kubernetes_driver):
    kubernetes_driver(profile="flexnpu", pool_profiles={"npu-lab.portal/device-profile=vnpu": "vnpu"})
    flexnpu = node_with_cards(name="a-flexnpu")
    vnpu = node_with_cards(name="z-vnpu")
    Node.objects.filter(pk=vnpu.pk).update(labels=POOL, memory_granule_mib=1024)
    course, templates, students, _ = course_with_students(2)
    template = best_effort(course)
    template.full_clean()
    template.save()
    course.templates.add(template)

    sessions = [session_launch(student=s, course=course, template=template) for s in students]
    allocation_pass()

    assert set(LabSession.objects.values_list("state", flat=True)) == {"admitted"}
    placed = Allocation.objects.filter(session__in=sessions)
    assert {(a.card.node.name, a.core_percent, a.memory_mib) for a in placed} == {("z-vnpu", 0, 4096)}
    assert not Allocation.objects.filter(card__node=flexnpu).exists()


def test_students_read_a_best_effort_share_as_best_effort():
    assert share_text(0, 4096) == "best effort: no AI Core guaranteed (it uses what the card has idle), 4\u00a0GiB memory"
    assert share_text(5, 4096) == "5\u00a0% of one NPU's AI Core guaranteed, 4\u00a0GiB memory"
