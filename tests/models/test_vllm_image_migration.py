"""Migration 0021 gives allowed vLLM models the site's serving image, and the vLLM templates the
console stored with an empty image that image, before the database starts refusing empty ones."""

from __future__ import annotations

import pytest
from django.db import IntegrityError, connection, transaction
from django.db.migrations.executor import MigrationExecutor

BEFORE = [("labs", "0020_budget_reasons_say_the_grace")]
AFTER = [("labs", "0021_vllm_serving_image")]
SITE_IMAGE = "mirror.example.edu/ascend/vllm-ascend:v0.18.0"


def migrate(target):
    executor = MigrationExecutor(connection)
    executor.loader.build_graph()
    executor.migrate(target)
    return executor.loader.project_state(target).apps


def migrate_to_the_latest() -> None:
    executor = MigrationExecutor(connection)
    executor.loader.build_graph()
    executor.migrate(executor.loader.graph.leaf_nodes())


def old_rows(apps, *templates: tuple[str, str, str]):
    institution = apps.get_model("labs", "Institution").objects.create(name="Old University", slug="old")
    AllowedImage = apps.get_model("labs", "AllowedImage")
    AllowedImage.objects.create(institution=institution, kind="vllm", reference="Qwen/Qwen2.5-0.5B-Instruct")
    AllowedImage.objects.create(institution=institution, kind="jupyter", reference="quay.io/jupyter/scipy-notebook")
    LabTemplate = apps.get_model("labs", "LabTemplate")
    for slug, kind, image in templates:
        LabTemplate.objects.create(
            institution=institution, name=slug, slug=slug, kind=kind, image=image, core_percent=25, memory_mib=16384
        )


@pytest.mark.django_db(transaction=True)
def test_vllm_models_and_the_consoles_vllm_templates_get_the_sites_image_and_the_rest_is_kept(settings):
    settings.LAB_VLLM_IMAGE = SITE_IMAGE
    old_rows(
        migrate(BEFORE),
        ("console-vllm", "vllm", ""),
        ("admin-vllm", "vllm", "registry.example.edu/vllm:1"),
        ("lab", "jupyter", "quay.io/jupyter/scipy-notebook"),
    )

    new = migrate(AFTER)

    allowed = new.get_model("labs", "AllowedImage").objects.values_list("kind", "image")
    assert sorted(allowed) == [("jupyter", ""), ("vllm", SITE_IMAGE)]
    LabTemplate = new.get_model("labs", "LabTemplate")
    assert dict(LabTemplate.objects.values_list("slug", "image")) == {
        "console-vllm": SITE_IMAGE,
        "admin-vllm": "registry.example.edu/vllm:1",
        "lab": "quay.io/jupyter/scipy-notebook",
    }
    with pytest.raises(IntegrityError), transaction.atomic():
        LabTemplate.objects.filter(slug="lab").update(image="")
    migrate_to_the_latest()


@pytest.mark.django_db(transaction=True)
def test_a_jupyter_template_without_an_image_stops_the_migration_naming_it(settings):
    settings.LAB_VLLM_IMAGE = SITE_IMAGE
    old = migrate(BEFORE)
    old_rows(old, ("broken-lab", "jupyter", ""))

    with pytest.raises(RuntimeError, match="broken-lab"):
        migrate(AFTER)
    old.get_model("labs", "LabTemplate").objects.filter(slug="broken-lab").update(image="quay.io/jupyter/base-notebook")
    new = migrate(AFTER)

    assert new.get_model("labs", "AllowedImage").objects.get(kind="vllm").image == SITE_IMAGE
    migrate_to_the_latest()
