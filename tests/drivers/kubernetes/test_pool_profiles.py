"""A node pool (by node label) can use another device profile than the cluster's default."""

from dataclasses import replace

import pytest
from django.core.exceptions import ImproperlyConfigured

from labs.drivers import build_driver
from labs.drivers.kubernetes import builders
from tests.drivers.helpers import make_spec


def driver(**options):
    return build_driver(
        {"BACKEND": "labs.drivers.kubernetes.KubernetesDriver", "OPTIONS": {"api_url": "http://127.0.0.1:9", **options}}
    )


def spec_on(labels):
    spec = make_spec()
    return replace(spec, card=replace(spec.card, node_labels=tuple(labels.items())))


def test_a_node_in_a_listed_pool_gets_that_pools_profile():
    d = driver(profile="flexnpu", pool_profiles="pool=research:vnpu,pool=hami-nodes:hami")
    research = builders.make_pod(
        spec_on({"pool": "research"}),
        profile=d.profile_for(spec_on({"pool": "research"})),
        namespace="lab-x",
        options=d.pod_options,
    )
    limits = research["spec"]["containers"][0]["resources"]["limits"]
    assert "huawei.com/vnpu-cores" in limits and not any(k.startswith("volcano.sh/") for k in limits)
    assert type(d.profile_for(spec_on({"pool": "hami-nodes"}))).__name__.lower().startswith("hami")


def test_a_node_in_no_listed_pool_keeps_the_default_profile():
    d = driver(profile="flexnpu", pool_profiles={"pool=research": "vnpu"})
    assert d.profile_for(spec_on({"pool": "teaching"})) is d.profile
    assert d.profile_for(spec_on({})) is d.profile


@pytest.mark.parametrize("bad", ["research:vnpu", "pool=research:quantum"])
def test_a_bad_pool_setting_is_refused_at_start_up(bad):
    with pytest.raises(ImproperlyConfigured):
        driver(pool_profiles=bad)


def test_a_pool_profile_gets_its_own_options():
    d = driver(
        profile="vnpu",
        profile_settings={"mode": "soft"},
        pool_profiles={
            "pool=research": {"profile": "vnpu", "mode": "hard"},
            "pool=hami-nodes": {"profile": "hami", "device": "Ascend910B4"},
        },
    )

    assert d.profile.mode == "soft"
    assert d.profile_for(spec_on({"pool": "research"})).mode == "hard"
    assert d.profile_for(spec_on({"pool": "hami-nodes"})).device == "Ascend910B4"


def test_the_default_profile_settings_do_not_leak_into_a_pool_of_another_profile():
    d = driver(profile="vnpu", profile_settings={"mode": "hard"}, pool_profiles="pool=hami-nodes:hami,pool=research:vnpu")

    assert d.profile_for(spec_on({"pool": "hami-nodes"})).name == "hami"
    assert d.profile_for(spec_on({"pool": "research"})).mode == "soft"


@pytest.mark.parametrize(
    ("pool_profiles", "message"),
    [
        (
            {"pool=research": {"profile": "vnpu", "mdoe": "hard"}},
            "pool_profiles\\['pool=research'\\]: unknown option 'mdoe' for device profile 'vnpu'; did you mean 'mode'\\?"
            " accepted: device_policy, hard_aicpu_level, memory_seen, mode, node_policy, policy",
        ),
        ({"pool=research": {"profile": "flexnpu", "mode": "hard"}}, "unknown option 'mode' for device profile 'flexnpu'"),
        ({"pool=research": {"profile": "vnpu", "mode": 1}}, "option 'mode' for device profile 'vnpu' must be str, got 1"),
        ({"pool=research": {"profile": "vnpu", "policy": "greedy"}}, "pool_profiles\\['pool=research'\\]: vNPU policy"),
        ({"pool=research": {"profile": "quantum"}}, "pool_profiles\\['pool=research'\\]: unknown device profile 'quantum'"),
        ({"pool=research": {"profiel": "vnpu"}}, "pool_profiles\\['pool=research'\\] must be a profile name or"),
        ({"pool=research": 3}, "pool_profiles\\['pool=research'\\] must be a profile name or"),
        ("pool=research", "'pool=research' is not a label selector and a profile like pool=research:vnpu"),
    ],
)
def test_a_bad_per_pool_option_is_refused_naming_the_pool(pool_profiles, message):
    with pytest.raises(ImproperlyConfigured, match=message) as refused:
        driver(pool_profiles=pool_profiles)

    assert "labs.drivers.kubernetes.KubernetesDriver" in str(refused.value)


def test_each_pool_says_how_the_portal_learns_an_instances_card():
    d = driver(profile="flexnpu", pool_profiles="pool=research:vnpu,pool=hami-nodes:hami")
    # FlexNPU: the agent's flexnpu-smi lists each instance on its card.
    assert d.card_truth({"pool": "teaching"}, die_ids_known=False) == "reported"
    # vNPU pins the card by die id, but only where the agent reports the die ids.
    assert d.card_truth({"pool": "research"}, die_ids_known=True) == "pinned"
    assert d.card_truth({"pool": "research"}, die_ids_known=False) == "none"
    # HAMi's scheduler picks the card and nothing the portal reads tells it.
    assert d.card_truth({"pool": "hami-nodes"}, die_ids_known=True) == "none"


def test_drivers_that_register_instances_themselves_report_the_card():
    from labs.drivers.local import LocalDriver
    from labs.drivers.simulator import SimulatorDriver

    for cls in (LocalDriver, SimulatorDriver):
        assert cls.card_truth(object.__new__(cls), {}, die_ids_known=False) == "reported"


def test_each_pool_says_what_memory_a_lab_sees_and_a_pool_may_override_it():
    d = driver(
        profile="flexnpu",
        pool_profiles={"pool=research": {"profile": "vnpu", "memory_seen": "cap"}, "pool=hami-nodes": "hami"},
    )

    assert d.memory_seen({"pool": "teaching"}) == "card"  # FlexNPU: the runtime reports the whole card
    assert d.memory_seen({"pool": "research"}) == "cap"
    assert d.memory_seen({"pool": "hami-nodes"}) == "cap"  # HAMi hooks the memory query
