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
