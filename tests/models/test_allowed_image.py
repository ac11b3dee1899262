"""An allow-list entry names what runs: a JupyterLab image, or a vLLM model and the image that serves it."""

from __future__ import annotations

import pytest
from django.core.exceptions import ValidationError
from django.db import IntegrityError, transaction

from labs.models import AllowedImage
from tests.factories import InstitutionFactory

VLLM_IMAGE = "quay.io/ascend/vllm-ascend:v0.18.0"


@pytest.fixture
def institution(db):
    return InstitutionFactory(slug="uni-test")


@pytest.mark.parametrize(
    ("kind", "image"),
    [("vllm", ""), ("jupyter", VLLM_IMAGE)],
    ids=["a vLLM model without an image", "a JupyterLab image with one"],
)
def test_the_database_refuses_an_entry_whose_image_does_not_fit_its_kind(institution, kind, image):
    with pytest.raises(IntegrityError), transaction.atomic():
        AllowedImage.objects.create(institution=institution, kind=kind, reference="Qwen/Qwen3-0.6B", image=image)


def test_a_vllm_model_cleaned_without_an_image_gets_the_sites_vllm_image(institution, settings):
    settings.LAB_VLLM_IMAGE = "mirror.example.edu/ascend/vllm-ascend:v0.18.0"
    entry = AllowedImage(institution=institution, kind="vllm", reference="Qwen/Qwen3-0.6B")

    entry.full_clean()
    entry.save()

    assert AllowedImage.objects.get(pk=entry.pk).image == "mirror.example.edu/ascend/vllm-ascend:v0.18.0"


@pytest.mark.parametrize(
    ("kind", "reference", "image", "field", "message"),
    [
        ("vllm", "Qwen/Qwen3-0.6B", "quay.io/ascend/vllm ascend", "image", "is not a container image reference"),
        ("vllm", "Qwen/Qwen3-0.6B", "Qwen/Qwen3-0.6B", "image", "is not a container image reference"),
        ("jupyter", "quay.io/jupyter/scipy-notebook", VLLM_IMAGE, "image", "needs no serving image"),
        ("jupyter", "Qwen/Qwen3-0.6B", "", "reference", "is not a container image reference"),
    ],
)
def test_an_entry_with_a_bad_image_fails_validation_saying_which(institution, kind, reference, image, field, message):
    entry = AllowedImage(institution=institution, kind=kind, reference=reference, image=image)

    with pytest.raises(ValidationError) as error:
        entry.full_clean()

    assert message in " ".join(error.value.message_dict[field])
