"""Migration 0017 gives the templates that already exist the host resources of their kind."""

from __future__ import annotations

import pytest
from django.db import connection
from django.db.migrations.executor import MigrationExecutor

from labs.domain.units import HOST_DEFAULTS

BEFORE = [("labs", "0016_isolation_selftest")]
AFTER = [("labs", "0017_host_resources")]


@pytest.mark.django_db(transaction=True)
def test_existing_vllm_templates_get_the_vllm_defaults_and_jupyter_ones_the_jupyter_defaults():
    executor = MigrationExecutor(connection)
    executor.migrate(BEFORE)
    old = executor.loader.project_state(BEFORE).apps
    institution = old.get_model("labs", "Institution").objects.create(name="Old University", slug="old")
    LabTemplate = old.get_model("labs", "LabTemplate")
    for kind in ("jupyter", "vllm"):
        LabTemplate.objects.create(
            institution=institution, name=kind, slug=kind, kind=kind, image=f"{kind}:1", core_percent=25, memory_mib=16384
        )

    executor = MigrationExecutor(connection)
    executor.loader.build_graph()
    executor.migrate(AFTER)
    new = executor.loader.project_state(AFTER).apps.get_model("labs", "LabTemplate")
    fields = list(HOST_DEFAULTS["vllm"])
    for kind in ("jupyter", "vllm"):
        assert new.objects.filter(slug=kind).values(*fields).get() == HOST_DEFAULTS[kind]

    executor = MigrationExecutor(connection)
    executor.loader.build_graph()
    executor.migrate(executor.loader.graph.leaf_nodes())
