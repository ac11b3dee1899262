"""Container image references: what a cluster can pull, and text that only looks like it."""

from __future__ import annotations

import pytest

from labs.domain.images import is_image_reference


@pytest.mark.parametrize(
    "reference",
    [
        "quay.io/ascend/vllm-ascend:v0.18.0",
        "swr.cn-south-1.myhuaweicloud.com/ascendhub/jupyterlab:latest",
        "localhost:5000/npu-lab/vllm_ascend:8.5.0-a3",
        "jupyter/base",
        "registry.example.edu/lab@sha256:" + "a" * 64,
    ],
)
def test_image_references_a_cluster_pulls_are_accepted(reference):
    assert is_image_reference(reference)


@pytest.mark.parametrize(
    "reference",
    [
        "",
        "quay.io/ascend/vllm ascend:v1",
        "Qwen/Qwen2.5-0.5B-Instruct",
        "quay.io/ascend/vllm-ascend:",
        "-lab:1",
        "lab:1 ",
        "a" * 256,
    ],
)
def test_other_text_is_not_an_image_reference(reference):
    assert not is_image_reference(reference)
