"""Courses through the API: list, create, read with an ETag, change only with a matching If-Match, archive."""

from __future__ import annotations

from labs.models import AuditEvent, Course


def test_it_lists_the_institutions_courses(api, world):
    response = api.call("GET", "/api/v1/courses/")
    assert response.status_code == 200
    body = response.json()
    assert body["count"] == 1
    assert body["results"][0]["code"] == world["course"].code


def test_it_creates_a_course_and_audits_it_with_the_token_as_actor(api, world):
    response = api.call("POST", "/api/v1/courses/", {"code": "AI201", "title": "Deep learning", "term": "2027 Spring"})
    assert response.status_code == 201, response.content
    course = Course.objects.get(pk=response.json()["id"])
    assert course.institution == world["course"].institution
    assert response["ETag"]
    event = AuditEvent.objects.get(action="course.create")
    assert event.actor is None and event.actor_name == "api-token:uni-test/lms"


def test_a_bad_course_is_refused_with_the_field_and_nothing_is_made(api, world):
    response = api.call(
        "POST",
        "/api/v1/courses/",
        {"code": "no spaces", "title": "x", "term": "t", "starts_on": "2027-02-01", "ends_on": "2027-01-01"},
    )
    assert response.status_code == 400
    error = response.json()["error"]
    assert error["code"] == "invalid"
    assert set(error["fields"]) == {"code", "ends_on"}
    assert Course.objects.count() == 1


def test_a_code_already_used_in_the_term_is_refused(api, world):
    course = world["course"]
    response = api.call("POST", "/api/v1/courses/", {"code": course.code, "title": "again", "term": course.term})
    assert response.status_code == 400
    assert "code" in response.json()["error"]["fields"]


def test_a_change_needs_the_current_etag(api, world):
    url = f"/api/v1/courses/{world['course'].pk}/"
    etag = api.call("GET", url)["ETag"]
    assert api.call("PATCH", url, {"title": "Renamed"}).status_code == 428
    assert api.call("PATCH", url, {"title": "Renamed"}, headers={"If-Match": '"stale"'}).status_code == 412
    world["course"].refresh_from_db()
    assert world["course"].title == "AI Practice"
    response = api.call("PATCH", url, {"title": "Renamed"}, headers={"If-Match": etag})
    assert response.status_code == 200
    assert response["ETag"] != etag
    # The old ETag is stale now: a second writer with it is refused.
    stale = api.call("PUT", url, {"code": "X1", "title": "Other", "term": "T"}, headers={"If-Match": etag})
    assert stale.status_code == 412
    assert stale.json()["error"]["code"] == "precondition_failed"
    world["course"].refresh_from_db()
    assert world["course"].title == "Renamed"


def test_delete_archives_the_course(api, world):
    response = api.call("DELETE", f"/api/v1/courses/{world['course'].pk}/")
    assert response.status_code == 200
    assert response.json()["archived_at"]
    world["course"].refresh_from_db()
    assert world["course"].archived


def test_another_institutions_course_is_not_found(api, world, elsewhere):
    other = Course.objects.create(institution=elsewhere, code="OTHER", title="t", term="t")
    response = api.call("GET", f"/api/v1/courses/{other.pk}/")
    assert response.status_code == 404
    assert response.json()["error"]["code"] == "not_found"


def test_an_id_that_cannot_be_one_is_not_found(api, world):
    for bad in ("abc", "-1", "0", str(2**70)):
        assert api.call("GET", f"/api/v1/courses/{bad}/").status_code == 404
