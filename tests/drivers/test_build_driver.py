"""build_driver: each backend takes only its own options, and a typo or a bad value stops it with a clear message."""

from __future__ import annotations

import inspect

import pytest
from django.core.exceptions import ImproperlyConfigured

from labs.drivers import build_driver
from labs.drivers.kubernetes import KubernetesDriver
from labs.drivers.local import LocalDriver
from labs.drivers.simulator import SimulatorDriver

SIMULATOR = "labs.drivers.simulator.SimulatorDriver"
LOCAL = "labs.drivers.local.LocalDriver"
KUBERNETES = "labs.drivers.kubernetes.KubernetesDriver"


def simulator(tmp_path, **options):
    return build_driver({"BACKEND": SIMULATOR, "OPTIONS": {"state_dir": str(tmp_path), **options}})


def kubernetes(**options):
    return build_driver({"BACKEND": KUBERNETES, "OPTIONS": {"api_url": "http://127.0.0.1:9", **options}})


def test_a_typo_in_an_option_names_the_key_the_backend_the_closest_key_and_all_accepted_ones():
    with pytest.raises(ImproperlyConfigured) as refused:
        kubernetes(profiel="vnpu")

    message = str(refused.value)
    assert f"unknown option 'profiel' for {KUBERNETES}; did you mean 'profile'?" in message
    assert "accepted: api_url, ca_cert, delete_wait_seconds," in message


def test_an_option_with_no_close_match_lists_the_accepted_keys_without_a_guess(tmp_path):
    with pytest.raises(ImproperlyConfigured) as refused:
        simulator(tmp_path, colour="red")

    assert str(refused.value) == (
        f"LAB_DRIVER: unknown option 'colour' for {SIMULATOR}; "
        "accepted: access_url, create_delay_seconds, create_failure_rate, delete_failure_rate, fail_images, "
        "restart_fraction, start_delay_seconds, state_dir"
    )


@pytest.mark.parametrize(
    ("backend", "other_backends_option"),
    [(SIMULATOR, "host"), (LOCAL, "start_delay_seconds"), (SIMULATOR, "namespace_prefix"), (LOCAL, "profile")],
)
def test_an_option_of_another_backend_is_refused(tmp_path, backend, other_backends_option):
    config = {"BACKEND": backend, "OPTIONS": {"state_dir": str(tmp_path), other_backends_option: "x"}}

    with pytest.raises(ImproperlyConfigured, match=f"unknown option '{other_backends_option}' for {backend}"):
        build_driver(config)


@pytest.mark.parametrize(
    ("options", "message"),
    [
        (
            {"start_delay_seconds": "soon"},
            "option 'start_delay_seconds' for labs.drivers.simulator.SimulatorDriver must be float",
        ),
        ({"start_delay_seconds": True}, "option 'start_delay_seconds' .* must be float, got True"),
        ({"start_delay_seconds": -1}, "start_delay_seconds must be >= 0, got -1"),
        ({"create_delay_seconds": -0.5}, "create_delay_seconds must be >= 0"),
        ({"fail_images": 3}, "option 'fail_images' .* must be Iterable\\[str\\] | str, got 3"),
        ({"create_failure_rate": 1.5}, "create_failure_rate must be between 0 and 1, got 1.5"),
        ({"delete_failure_rate": -0.1}, "delete_failure_rate must be between 0 and 1, got -0.1"),
    ],
)
def test_a_bad_simulator_value_is_refused_naming_the_option(tmp_path, options, message):
    with pytest.raises(ImproperlyConfigured, match=message):
        simulator(tmp_path, **options)


def test_a_whole_number_is_a_valid_float_option(tmp_path):
    assert simulator(tmp_path, start_delay_seconds=3).start_delay_seconds == 3.0


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"profile": "quantum"}, "profile: unknown device profile 'quantum'; choose one of flexnpu, hami, vnpu"),
        ({"profile": 7}, "option 'profile' for labs.drivers.kubernetes.KubernetesDriver must be str, got 7"),
        ({"retries": "3"}, "option 'retries' .* must be int, got '3'"),
        ({"spawn_timeout_seconds": 0}, "spawn_timeout_seconds must be > 0"),
        ({"pool_profiles": ["pool=a:vnpu"]}, "option 'pool_profiles' .* must be"),
        (
            {"profile": "vnpu", "profile_settings": {"mdoe": "hard"}},
            "profile_settings: unknown option 'mdoe' for device profile 'vnpu'; did you mean 'mode'\\? "
            "accepted: device_policy, hard_aicpu_level, memory_seen, mode, node_policy, policy",
        ),
        ({"profile": "vnpu", "profile_settings": {"mode": "strict"}}, "profile_settings: vNPU mode must be 'soft' or 'hard'"),
        ({"profile_settings": {"mode": "hard"}}, "unknown option 'mode' for device profile 'flexnpu'; accepted: memory_seen"),
        (
            {"profile_settings": {"memory_seen": "half"}},
            "memory_seen must be 'card' .* or 'cap' .*, got 'half'",
        ),
        ({"profile": "hami", "profile_settings": {"memory_seen": True}}, "option 'memory_seen' .* must be str, got True"),
        (
            {"pod_options": {"vllm_memory_fraction": "ninety"}},
            "vllm_memory_fraction must be a decimal in \\(0, 1\\]",
        ),
        ({"pod_options": {"vllm_memory_fraction": "1.5"}}, "vllm_memory_fraction must be a decimal in \\(0, 1\\]"),
        ({"pod_options": {"vllm_enforce_eager": "yes"}}, "pod_options: vllm_enforce_eager must be true, false or null"),
    ],
)
def test_a_bad_kubernetes_value_is_refused_naming_the_option(options, message):
    with pytest.raises(ImproperlyConfigured, match=message):
        kubernetes(**options)


def test_the_options_config_must_be_a_dict():
    with pytest.raises(ImproperlyConfigured, match="OPTIONS must be a dict, got list"):
        build_driver({"BACKEND": SIMULATOR, "OPTIONS": ["state_dir"]})


@pytest.mark.parametrize("cls", [LocalDriver, SimulatorDriver, KubernetesDriver])
def test_every_drivers_option_names_are_exactly_its_constructors_keywords(cls):
    keywords = {name for name, p in inspect.signature(cls).parameters.items() if p.kind is p.KEYWORD_ONLY}

    assert cls.option_names == keywords
