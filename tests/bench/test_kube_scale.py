"""bench.kube_scale's judgement of the portal's requests per session, and its arguments."""

from __future__ import annotations

import pytest

from bench.kube_scale import not_flat, parse_args


def result(k: int, **requests: int) -> dict:
    return {"k": k, "portal_requests": {key.replace("_", " ", 1): n for key, n in requests.items()}}


def test_requests_that_fall_or_stay_per_session_are_flat():
    results = [
        result(128, create_pods=128, list_pods=150, delete_pods=128),
        result(1024, create_pods=1024, list_pods=1100, delete_pods=1024),
    ]

    assert not_flat(results) == []


def test_a_list_per_session_per_round_is_not_flat():
    # 10 rounds at 128, 40 rounds at 1,024, each listing once per session.
    results = [result(128, list_pods=128 * 10), result(1024, list_pods=1024 * 40)]

    assert not_flat(results) == ["list pods: 40.00 a session at K=1024, 10.00 at K=128"]


def test_a_request_the_smallest_class_never_made_counts_against_the_slack():
    results = [result(128, create_pods=128), result(512, create_pods=512, list_events=100)]

    assert not_flat(results) == ["list events: 0.20 a session at K=512, 0.00 at K=128"]


def test_a_retry_of_every_create_is_not_flat():
    results = [result(128, create_pods=128), result(512, create_pods=2 * 512)]

    assert not_flat(results) == ["create pods: 2.00 a session at K=512, 1.00 at K=128"]


@pytest.mark.parametrize("classes", ["", "0", "128,x", "-5"])
def test_bad_class_sizes_are_refused(classes, capsys):
    with pytest.raises(SystemExit):
        parse_args(["--classes", classes])
    assert "--classes" in capsys.readouterr().err


def test_a_class_larger_than_the_nodes_hold_is_refused(capsys):
    with pytest.raises(SystemExit):
        parse_args(["--nodes", "1", "--classes", "129"])
    assert "larger than the nodes hold" in capsys.readouterr().err


def test_the_class_sizes_are_read_in_order():
    assert parse_args(["--classes", "512, 128"]).classes == [512, 128]
