"""A vLLM template is in the inference scenario (8 per card, 64 per server) unless its author picks another."""

from __future__ import annotations

import pytest
from django.test import Client

from labs.models import AllowedImage, LabTemplate
from labs.services.catalog import catalogue_template_create
from tests.factories import InstitutionFactory, UserFactory

VLLM_IMAGE = "registry.example.edu/npu-lab/vllm-ascend:v0.18.0"


def logged_in(user) -> Client:
    client = Client()
    client.force_login(user)
    return client


def form(allowed: AllowedImage, name: str, **overrides: str) -> dict[str, object]:
    return {"action": "create", "name": name, "image": allowed.pk, "core_percent": 10, "memory_mib": "8", **overrides}


def test_a_vllm_template_made_in_the_console_without_a_scenario_is_inference(world):
    course = world["course"]
    model = AllowedImage.objects.create(
        institution=course.institution, kind="vllm", reference="Qwen/Qwen3-0.6B", image=VLLM_IMAGE
    )
    lab = AllowedImage.objects.create(institution=course.institution, kind="jupyter", reference="jupyter/scipy")
    client = logged_in(world["instructor"])

    page = client.get(f"/courses/{course.pk}/templates/").content.decode()
    client.post(f"/courses/{course.pk}/templates/", form(model, "served", scenario=""))
    client.post(f"/courses/{course.pk}/templates/", form(lab, "notebook", scenario=""))
    client.post(f"/courses/{course.pk}/templates/", form(model, "served, picked", scenario="development"))

    assert '<option value="" selected>' in page
    assert LabTemplate.objects.get(name="served").scenario == "inference"
    assert LabTemplate.objects.get(name="notebook").scenario == "development"
    assert LabTemplate.objects.get(name="served, picked").scenario == "development"


def test_the_fit_preview_of_a_vllm_entry_without_a_scenario_counts_inference_instances(world):
    course = world["course"]
    model = AllowedImage.objects.create(
        institution=course.institution, kind="vllm", reference="Qwen/Qwen3-0.6B", image=VLLM_IMAGE
    )
    client = logged_in(world["instructor"])
    share = {"core_percent": 1, "memory_mib": "0.125", "scenario": ""}

    served = client.get(f"/courses/{course.pk}/templates/preview/", {**share, "image": model.pk}).json()
    notebook = client.get(f"/courses/{course.pk}/templates/preview/", share).json()
    inference = client.get(f"/courses/{course.pk}/templates/preview/", {**share, "scenario": "inference"}).json()

    assert served["cluster_empty"] == inference["cluster_empty"] < notebook["cluster_empty"]


def test_a_template_made_by_a_service_without_a_scenario_gets_its_kinds(db):
    institution = InstitutionFactory(slug="uni-service")
    share = {"core_percent": 10, "memory_mib": 8192, "image": VLLM_IMAGE}

    served = catalogue_template_create(institution=institution, name="served", kind="vllm", model="Qwen/Qwen3-8B", **share)
    notebook = catalogue_template_create(institution=institution, name="notebook", kind="jupyter", **share)

    assert (served.scenario, notebook.scenario) == ("inference", "development")


@pytest.fixture
def admin_client(db) -> Client:
    client = Client()
    client.force_login(UserFactory(username="root", is_staff=True, is_superuser=True))
    return client


def test_a_vllm_template_added_in_the_admin_without_a_scenario_is_inference(admin_client):
    institution = InstitutionFactory(slug="uni-admin")
    page = admin_client.get("/admin/labs/labtemplate/add/")
    form = page.context["adminform"].form
    data = {name: "" if form[name].value() is None else str(form[name].value()) for name in form.fields}
    data.update(
        institution=str(institution.pk),
        name="Qwen3 8B",
        slug="qwen3-8b",
        kind="vllm",
        image=VLLM_IMAGE,
        model="Qwen/Qwen3-8B",
        core_percent="10",
        memory_mib="8192",
        scenario="",
        command="[]",
        args="[]",
    )

    response = admin_client.post("/admin/labs/labtemplate/add/", data)

    assert response.status_code == 302, response.context["adminform"].form.errors
    assert LabTemplate.objects.get(slug="qwen3-8b").scenario == "inference"
