"""`manage.py course_manifests` prints the course's namespace, policy and quota from the ledger's quota."""

from io import StringIO

import pytest
import yaml
from django.core.management import CommandError, call_command

from tests.factories import course_with_students


def render(code):
    out = StringIO()
    call_command("course_manifests", code, stdout=out)
    return {obj["kind"]: obj for obj in yaml.safe_load_all(out.getvalue())}


def test_the_quota_is_the_guarantee_plus_the_borrowing_limit(db):
    course, *_ = course_with_students(
        0,
        quota={
            "core_percent": 100,
            "memory_mib": 32768,
            "instance_count": 10,
            "cohort": "dept",
            "borrow_core_percent": 50,
            "borrow_memory_mib": 8192,
            "borrow_instances": 2,
        },
        code="AI101",
    )
    course_with_students(0, quota={"core_percent": 400, "memory_mib": 65536, "instance_count": 40, "cohort": "dept"}, code="LEND")
    objects = render("AI101")
    assert objects["Namespace"]["metadata"]["name"] == "lab-ai101"
    hard = objects["ResourceQuota"]["spec"]["hard"]
    assert hard["requests.volcano.sh/flexnpu-core.percentage"] == "150"
    assert hard["requests.volcano.sh/flexnpu-memory.128mi"] == str((32768 + 8192) // 128)
    policy = objects["NetworkPolicy"]["spec"]
    assert policy["podSelector"] == {} and "Ingress" in policy["policyTypes"]


def test_borrowing_is_bounded_by_what_the_cohort_could_lend(db):
    course_with_students(0, quota={"core_percent": 100, "memory_mib": 8192, "instance_count": 4, "cohort": "solo"}, code="ALONE")
    hard = render("ALONE")["ResourceQuota"]["spec"]["hard"]
    assert hard["requests.volcano.sh/flexnpu-core.percentage"] == "100"  # no other course to borrow from


def test_a_course_outside_a_cohort_is_capped_at_its_guarantee(db):
    course_with_students(0, quota={"core_percent": 40, "memory_mib": 8192, "instance_count": 4}, code="CS1")
    hard = render("CS1")["ResourceQuota"]["spec"]["hard"]
    assert hard["requests.volcano.sh/flexnpu-core.percentage"] == "40"


def test_an_unknown_course_is_a_clear_error(db):
    with pytest.raises(CommandError, match="Need exactly one course with code 'NOPE'; found none"):
        call_command("course_manifests", "NOPE", stdout=StringIO())


def test_the_portals_service_account_gets_the_lab_driver_role_in_the_namespace_only(db):
    course_with_students(0, quota={"core_percent": 40, "memory_mib": 8192, "instance_count": 4}, code="CS2")
    binding = render("CS2")["RoleBinding"]
    assert binding["metadata"]["namespace"] == "lab-cs2"
    assert binding["roleRef"]["kind"] == "ClusterRole"
    assert binding["roleRef"]["name"] == "npu-lab-portal-lab-driver"
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": "npu-lab-portal", "namespace": "npu-lab-portal"}]
