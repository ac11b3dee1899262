"""A template's scenario when its author picks none: the FlexNPU guide's scenario for its kind."""

from __future__ import annotations

import pytest

from labs.domain.units import Scenario, default_scenario


def test_a_vllm_template_defaults_to_inference_and_a_jupyterlab_one_to_development() -> None:
    assert (default_scenario("vllm"), default_scenario("jupyter")) == (Scenario.INFERENCE, Scenario.DEVELOPMENT)


def test_an_unknown_kind_is_refused() -> None:
    with pytest.raises(ValueError, match="unknown template kind"):
        default_scenario("notebook")
