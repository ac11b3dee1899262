"""A course's quota through the API: checked as the console checks it, changed only with the current ETag."""

from __future__ import annotations

from labs.models import AuditEvent, CourseQuota

QUOTA = {
    "instance_count": 16,
    "core_percent": 160,
    "memory_mib": 64 * 1024,
    "sessions_per_student": 2,
    "max_session_minutes": 120,
}


def test_it_sets_the_quota_with_the_current_etag(api, world):
    url = f"/api/v1/courses/{world['course'].pk}/quota/"
    got = api.call("GET", url)
    assert got.status_code == 200
    assert got.json()["memory_mib"] == world["course"].quota.memory_mib
    response = api.call("PUT", url, QUOTA, headers={"If-Match": got["ETag"]})
    assert response.status_code == 200, response.content
    quota = CourseQuota.objects.get(course=world["course"])
    assert (quota.instance_count, quota.core_percent, quota.memory_mib, quota.sessions_per_student) == (16, 160, 65536, 2)
    assert response.json()["below_use"] == []
    assert AuditEvent.objects.filter(action="quota.set", actor_name="api-token:uni-test/lms").exists()
    assert api.call("PUT", url, {**QUOTA, "instance_count": 4}, headers={"If-Match": got["ETag"]}).status_code == 412
    assert api.call("PUT", url, QUOTA).status_code == 428


def test_the_consoles_rules_apply(api, world):
    """The 8-card node holds at most 128 development instances, and memory comes in 128 MiB steps."""
    url = f"/api/v1/courses/{world['course'].pk}/quota/"
    etag = api.call("GET", url)["ETag"]
    response = api.call("PUT", url, {**QUOTA, "instance_count": 500, "memory_mib": 1000}, headers={"If-Match": etag})
    assert response.status_code == 400
    fields = response.json()["error"]["fields"]
    assert {"instance_count", "memory_mib"} <= set(fields)
    # Said in the step, not in the GiB the console's form counts in ("no more than 3 decimal places").
    assert fields["memory_mib"] == ["Memory is reserved in steps of 0.125 GiB: use 0.875 GiB or 1 GiB."]
    assert CourseQuota.objects.get(course=world["course"]).instance_count == world["course"].quota.instance_count


def test_a_course_without_quota_takes_one_with_if_match_star(api, world):
    CourseQuota.objects.filter(course=world["course"]).delete()
    url = f"/api/v1/courses/{world['course'].pk}/quota/"
    assert api.call("GET", url).status_code == 404
    assert api.call("PUT", url, QUOTA, headers={"If-Match": "*"}).status_code == 200
    assert CourseQuota.objects.filter(course=world["course"]).exists()


def test_extensions_and_weekly_budgets_round_trip_and_a_put_replaces_them(api, world):
    url = f"/api/v1/courses/{world['course'].pk}/quota/"
    etag = api.call("GET", url)["ETag"]
    policy = {"extensions_allowed": 2, "extension_minutes": 45, "budget_core_percent_hours": 100, "budget_gib_hours": 80}
    response = api.call("PUT", url, {**QUOTA, **policy}, headers={"If-Match": etag})
    assert response.status_code == 200, response.content
    got = api.call("GET", url)
    assert {k: got.json()[k] for k in policy} == policy
    quota = CourseQuota.objects.get(course=world["course"])
    assert (quota.extensions_allowed, quota.extension_minutes, quota.budget_core_percent_hours) == (2, 45, 100)

    bad = api.call("PUT", url, {**QUOTA, "budget_gib_hours": 0, "extension_minutes": 0}, headers={"If-Match": got["ETag"]})
    assert bad.status_code == 400 and {"budget_gib_hours", "extension_minutes"} <= set(bad.json()["error"]["fields"])
    assert CourseQuota.objects.get(course=world["course"]).budget_gib_hours == 80  # nothing changed

    api.call("PUT", url, QUOTA, headers={"If-Match": got["ETag"]})  # left out: the defaults
    quota.refresh_from_db()
    assert (quota.extensions_allowed, quota.extension_minutes, quota.budget_core_percent_hours, quota.budget_gib_hours) == (
        0,
        30,
        None,
        None,
    )


def test_host_cpu_and_memory_caps_round_trip_and_a_negative_one_is_refused(api, world):
    url = f"/api/v1/courses/{world['course'].pk}/quota/"
    etag = api.call("GET", url)["ETag"]
    caps = {"host_cpu_cap_millicores": 64000, "host_memory_cap_mib": 256 * 1024}

    response = api.call("PUT", url, {**QUOTA, **caps}, headers={"If-Match": etag})

    assert response.status_code == 200, response.content
    got = api.call("GET", url)
    assert {k: got.json()[k] for k in caps} == caps
    bad = api.call("PUT", url, {**QUOTA, "host_memory_cap_mib": -1}, headers={"If-Match": got["ETag"]})
    assert bad.status_code == 400 and "host_memory_cap_mib" in bad.json()["error"]["fields"]
    assert CourseQuota.objects.get(course=world["course"]).host_memory_cap_mib == 256 * 1024


def test_a_cohort_of_another_institution_is_refused_and_one_of_its_own_is_not(api, world):
    """Courses of one cohort lend each other idle quota: naming another institution's cohort would borrow its guarantee."""
    from tests.factories import CourseFactory, CourseQuotaFactory, InstitutionFactory

    # Cohorts only: guarantees of the whole cluster would refuse the quota for another reason.
    nothing = {"instance_count": 0, "core_percent": 0, "memory_mib": 0}
    CourseQuotaFactory(course=CourseFactory(institution=InstitutionFactory(slug="elsewhere")), cohort="ai-dept", **nothing)
    CourseQuotaFactory(course=CourseFactory(institution=world["course"].institution), cohort="our-dept", **nothing)
    url = f"/api/v1/courses/{world['course'].pk}/quota/"

    etag = api.call("GET", url)["ETag"]
    refused = api.call("PUT", url, {**QUOTA, "cohort": "ai-dept"}, headers={"If-Match": etag})
    assert refused.status_code == 400
    assert "Another institution has a cohort of this name" in str(refused.json()["error"]["fields"]["cohort"])
    assert CourseQuota.objects.get(course=world["course"]).cohort != "ai-dept"
    assert api.call("PUT", url, {**QUOTA, "cohort": "our-dept"}, headers={"If-Match": etag}).status_code == 200


def test_a_guarantee_another_course_holds_is_a_400_on_the_field_naming_the_course(api, world):
    """The world's course guarantees the whole node; the token's institution is the same."""
    from tests.factories import CourseFactory, CourseQuotaFactory

    world["course"].code = "AI101"
    world["course"].save(update_fields=["code"])
    course = CourseFactory(institution=world["course"].institution, code="AI102")
    before = CourseQuotaFactory(course=course, instance_count=0, core_percent=0, memory_mib=0)
    url = f"/api/v1/courses/{course.pk}/quota/"
    etag = api.call("GET", url)["ETag"]

    refused = api.call("PUT", url, QUOTA, headers={"If-Match": etag})

    assert refused.status_code == 400
    fields = refused.json()["error"]["fields"]
    assert fields["instance_count"] == [
        "The cluster holds at most 128 development instances; other courses guarantee 128 of them "
        "(AI101: 128), so at most 0 can be guaranteed to this course."
    ]
    assert CourseQuota.objects.get(course=course).instance_count == before.instance_count == 0
