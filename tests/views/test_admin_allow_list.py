"""The Django admin's allow-list inline: a vLLM model gets its serving image, or the site's."""

from __future__ import annotations

import pytest
from django.test import Client

from labs.models import AllowedImage
from tests.factories import InstitutionFactory, UserFactory


@pytest.fixture
def admin_client(db) -> Client:
    client = Client()
    client.force_login(UserFactory(username="root", is_staff=True, is_superuser=True))
    return client


def change_form(client: Client, url: str, **allowed: str) -> dict[str, str]:
    """The institution's change form as the page renders it, with one new allow-list row filled in."""
    page = client.get(url)
    data: dict[str, str] = {}
    form = page.context["adminform"].form
    for name in form.fields:
        value = form[name].value()
        data[name] = "" if value is None else str(value)
    for inline in page.context["inline_admin_formsets"]:
        formset = inline.formset
        management = formset.management_form
        for name in management.fields:
            data[f"{formset.prefix}-{name}"] = str(management[name].value())
        if formset.model is AllowedImage:
            data[f"{formset.prefix}-TOTAL_FORMS"] = str(len(formset.forms) + 1)
            row = f"{formset.prefix}-{len(formset.forms)}"
            data.update({f"{row}-{name}": value for name, value in allowed.items()})
    return data


def test_a_vllm_model_added_in_the_admin_without_an_image_runs_in_the_sites(admin_client, settings):
    settings.LAB_VLLM_IMAGE = "mirror.example.edu/ascend/vllm-ascend:v0.18.0"
    institution = InstitutionFactory(slug="uni-admin")
    url = f"/admin/labs/institution/{institution.pk}/change/"

    response = admin_client.post(url, change_form(admin_client, url, kind="vllm", reference="Qwen/Qwen3-0.6B", image=""))

    assert response.status_code == 302
    assert institution.allowed_images.get().image == "mirror.example.edu/ascend/vllm-ascend:v0.18.0"


def test_the_admin_refuses_a_serving_image_that_is_no_image_reference(admin_client):
    institution = InstitutionFactory(slug="uni-admin")
    url = f"/admin/labs/institution/{institution.pk}/change/"
    data = change_form(admin_client, url, kind="vllm", reference="Qwen/Qwen3-0.6B", image="quay.io/ascend/vllm ascend")

    page = admin_client.post(url, data)

    assert page.status_code == 200
    assert "is not a container image reference" in page.content.decode()
    assert not institution.allowed_images.exists()
