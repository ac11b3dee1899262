"""Bad requests get a JSON error with the reason; driver failures are 502 and never a stack trace."""

from __future__ import annotations

import pytest

from nodeagent.cards.base import DriverError
from nodeagent.cards.flexnpu_smi import FlexnpuSmiDriver
from nodeagent.cards.simulated import SimulatedDriver
from tests.agent.helpers import call, fake_cli, running

POD = {"entity_id": "pod-1", "card_index": 0, "core_percent": 25, "memory_mib": 8192}


@pytest.mark.parametrize("path", ["/", "/v1", "/v1/inventory/", "/v1/instances/pod-1/other", "/v2/instances"])
def test_an_unknown_path_is_404(agent, path):
    response = call(agent, "GET", path)

    assert response.status == 404
    assert response.json() == {"error": f"no such endpoint: {path}"}


def test_a_known_path_with_the_wrong_method_is_405(agent):
    response = call(agent, "PUT", "/v1/instances")

    assert response.status == 405
    assert response.headers["Allow"] == "GET, POST"
    assert response.json() == {"error": "PUT is not allowed on /v1/instances"}


@pytest.mark.parametrize(
    "raw, message",
    [
        (b"{not json", "request body is not JSON: Expecting property name enclosed in double quotes: line 1 column 2 (char 1)"),
        (b"", "request body is not JSON: Expecting value: line 1 column 1 (char 0)"),
        (b"\xff\xfe", "request body is not JSON: "),
        (b"[1, 2]", "request body must be a JSON object"),
        (b'{"entity_id": "pod-1"}', "missing field(s): card_index, core_percent, memory_mib"),
        (b'{"entity_id": "p", "card_index": "0", "core_percent": 25, "memory_mib": 1}', 'card_index must be an integer, got "0"'),
        (b'{"entity_id": "p", "card_index": 0, "core_percent": true, "memory_mib": 1}', "core_percent must be an integer"),
        (b'{"entity_id": 7, "card_index": 0, "core_percent": 25, "memory_mib": 8192}', "entity_id must be a string, got 7"),
        (b'{"entity_id": "p", "card_index": 0, "core_percent": 25, "memory_mib": 8192, "gpu": 1}', "unknown field(s): gpu"),
    ],
)
def test_a_malformed_register_body_is_400(agent, raw, message):
    response = call(agent, "POST", "/v1/instances", raw=raw, headers={"Content-Type": "application/json"})

    assert response.status == 400
    assert response.json()["error"].startswith(message)


@pytest.mark.parametrize(
    "fields, message",
    [
        ({"card_index": 8}, "card 8 does not exist: this node has cards 0..7"),
        ({"core_percent": 0}, "core_percent must be 1..100 with the elastic policy, got 0"),
        ({"memory_mib": 1000}, "memory_mib must be a positive multiple of 128 MiB, got 1000"),
        ({"memory_mib": 131072}, "card 0 has 65536 MiB of memory free, the instance needs 131072 MiB"),
        ({"policy": "greedy"}, "policy must be one of fixed-share, elastic, best-effort, got 'greedy'"),
    ],
)
def test_invalid_register_values_are_400_with_the_reason(agent, fields, message):
    response = call(agent, "POST", "/v1/instances", {**POD, **fields})

    assert response.status == 400
    assert response.json() == {"error": message}
    assert call(agent, "GET", "/v1/instances").json() == {"instances": []}


def test_a_duplicate_entity_id_is_409(agent):
    call(agent, "POST", "/v1/instances", POD)

    response = call(agent, "POST", "/v1/instances", {**POD, "card_index": 1})

    assert response.status == 409
    assert response.json() == {"error": "instance pod-1 is already registered (card 0)"}


def test_bad_demands_are_400_and_unknown_instances_404(agent):
    call(agent, "POST", "/v1/instances", POD)

    assert call(agent, "POST", "/v1/instances/pod-1/demand", {"demand_percent": 101}).json() == {
        "error": "demand_percent must be 0..100, got 101"
    }
    assert call(agent, "POST", "/v1/instances/pod-1/demand", {"memory_used_mib": 1}).status == 400
    assert call(agent, "POST", "/v1/instances/pod-1/demand", {"demand_percent": 1.5}).status == 400
    missing = call(agent, "POST", "/v1/instances/pod-9/demand", {"demand_percent": 10})
    assert (missing.status, missing.json()) == (404, {"error": "no instance pod-9 on this node"})


def test_a_body_over_64_kib_is_413(agent):
    response = call(agent, "POST", "/v1/instances", raw=b"{" + b" " * (64 * 1024) + b"}")

    assert response.status == 413
    assert response.json() == {"error": "request body is over 65536 bytes"}


def test_registering_on_a_real_node_is_405(tmp_path):
    flexnpu = fake_cli(tmp_path, "flexnpu-smi", "flexnpu_smi_info_several.txt")
    with running(FlexnpuSmiDriver(binary=str(flexnpu.path))) as agent:
        register = call(agent, "POST", "/v1/instances", POD)
        demand = call(agent, "POST", "/v1/instances/pod-1/demand", {"demand_percent": 5})

    assert register.status == 405
    assert register.json() == {
        "error": "the flexnpu-smi driver does not register instances: on a real node the device plugin does"
    }
    assert demand.status == 405


@pytest.mark.parametrize(
    "method, path",
    [("GET", "/v1/instances"), ("GET", "/v1/inventory"), ("DELETE", "/v1/instances/pod-1"), ("GET", "/metrics")],
)
def test_a_failing_vendor_command_is_502_with_its_message(tmp_path, method, path):
    flexnpu = fake_cli(tmp_path, "flexnpu-smi", "flexnpu_smi_info_several.txt", exit_code=1, stderr="aclserver unreachable\n")
    npu = fake_cli(tmp_path, "npu-smi", "npu_smi_info_910b.txt", exit_code=1, stderr="dcmi module initialize failed\n")
    with running(FlexnpuSmiDriver(binary=str(flexnpu.path), npu_smi=str(npu.path))) as agent:
        response = call(agent, method, path)

    assert response.status == 502
    assert set(response.json()) == {"error"}
    assert "exited with status 1" in response.json()["error"]
    assert "Traceback" not in response.body.decode()


def test_unparsable_vendor_output_is_502_and_nothing_is_unregistered(tmp_path):
    flexnpu = fake_cli(tmp_path, "flexnpu-smi", "flexnpu_smi_info_truncated.txt")
    with running(FlexnpuSmiDriver(binary=str(flexnpu.path))) as agent:
        response = call(agent, "DELETE", "/v1/instances/0b6f4c1e-5d1a-4f7e-9a53-2f4d8e1c7a10")

    assert response.status == 502
    assert "did not parse (line 9: output stops in the middle of a line (truncated?))" in response.json()["error"]
    assert flexnpu.unregister_calls() == []


class BrokenDriver(SimulatedDriver):
    def instances(self):
        raise DriverError("flexnpu-daemon is not running")

    def inventory(self):
        raise RuntimeError("a bug with a secret detail")


def test_a_driver_error_is_502_and_any_other_error_is_a_bare_500():
    with running(BrokenDriver()) as agent:
        driver_error = call(agent, "GET", "/v1/instances")
        bug = call(agent, "GET", "/v1/inventory")

    assert (driver_error.status, driver_error.json()) == (502, {"error": "flexnpu-daemon is not running"})
    assert (bug.status, bug.json()) == (500, {"error": "internal error in the agent; see its log"})
