"""The vendor's supported-model list where a vLLM model is chosen: the instructor's template form
(an entry off the list is offered, and says so) and the operator's allow-list form."""

from __future__ import annotations

import html

from django.test import Client

from labs.domain.vllm import VENDOR_MODELS
from labs.models import AllowedImage, InstitutionRole, LabTemplate
from tests.factories import UserFactory

VLLM_IMAGE = "registry.example.edu/npu-lab/vllm-ascend:v0.18.0"
OFF_THE_LIST = "(not on the vendor's list of supported models)"


def logged_in(user) -> Client:
    client = Client()
    client.force_login(user)
    return client


def test_the_template_form_lists_the_vendors_models_and_marks_an_entry_off_the_list(world):
    course = world["course"]
    on_list = AllowedImage.objects.create(
        institution=course.institution, kind="vllm", reference="Qwen/Qwen3-8B", image=VLLM_IMAGE
    )
    off_list = AllowedImage.objects.create(
        institution=course.institution, kind="vllm", reference="Qwen/Qwen2.5-7B-Instruct", image=VLLM_IMAGE
    )
    client = logged_in(world["instructor"])

    form = client.get(f"/courses/{course.pk}/templates/").context["form"]
    page = html.unescape(client.get(f"/courses/{course.pk}/templates/").content.decode())
    choices = {value.value: label for value, label in form.fields["image"].choices}

    assert all(model in str(form.fields["image"].help_text) for model in VENDOR_MODELS)
    assert "deepseek-ai/DeepSeek-R1-Distill-Llama-8B" in page
    assert choices[off_list.pk] == f"vLLM: Qwen/Qwen2.5-7B-Instruct {OFF_THE_LIST}"
    assert choices[on_list.pk] == "vLLM: Qwen/Qwen3-8B"
    assert OFF_THE_LIST in page


def test_a_model_off_the_vendors_list_may_still_be_chosen(world):
    course = world["course"]
    off_list = AllowedImage.objects.create(
        institution=course.institution, kind="vllm", reference="Qwen/Qwen2.5-7B-Instruct", image=VLLM_IMAGE
    )
    data = {"action": "create", "name": "Qwen 2.5", "image": off_list.pk, "core_percent": 25, "memory_mib": "24"}
    data["scenario"] = "inference"

    response = logged_in(world["instructor"]).post(f"/courses/{course.pk}/templates/", data)

    assert response.status_code == 302
    assert LabTemplate.objects.get(name="Qwen 2.5").model == "Qwen/Qwen2.5-7B-Instruct"


def test_the_operators_allow_list_form_offers_the_vendors_models(world):
    operator = UserFactory(username="op")
    InstitutionRole.objects.create(user=operator, institution=world["course"].institution, role="operator")

    page = logged_in(operator).get("/ops/tenancy/").content.decode()

    assert 'list="vendor-models"' in page
    assert all(f'<option value="{model}">' in page for model in VENDOR_MODELS)
