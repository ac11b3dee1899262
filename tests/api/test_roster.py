"""The roster bulk PUT: the roster becomes the body, row by row reported, in one transaction, idempotent."""

from __future__ import annotations

from django.contrib.auth import get_user_model
from django.db import connection
from django.test.utils import CaptureQueriesContext

from labs.models import AuditEvent, Enrollment


def results(response) -> dict[str, str]:
    return {row["username"] or row["email"]: row["result"] for row in response.json()["rows"]}


def test_the_roster_becomes_the_body(api, world):
    course = world["course"]
    teacher, kept, dropped = world["instructor"], world["students"][0], world["students"][1:]
    body = {
        "members": [
            {"username": teacher.username, "role": "instructor"},
            {"username": kept.username},
            {"username": "newcomer", "email": "newcomer@uni.example", "first_name": "New"},
            {"username": "bad name!"},
        ]
    }
    response = api.call("PUT", f"/api/v1/courses/{course.pk}/roster/", body)
    assert response.status_code == 200, response.content
    data = response.json()
    assert (data["added"], data["unchanged"], data["removed"], data["rejected"]) == (1, 2, len(dropped), 1)
    outcome = results(response)
    assert outcome["newcomer"] == "added"
    assert outcome["bad name!"] == "rejected"
    assert all(outcome[s.username] == "removed" for s in dropped)
    rejected = next(r for r in data["rows"] if r["result"] == "rejected")
    assert rejected["index"] == 3 and "valid username" in rejected["reason"]
    members = set(Enrollment.objects.filter(course=course).values_list("user__username", flat=True))
    assert members == {teacher.username, kept.username, "newcomer"}
    assert AuditEvent.objects.filter(action="roster.sync", actor_name="api-token:uni-test/lms").count() == 1


def test_sending_the_same_body_again_changes_nothing(api, world):
    url = f"/api/v1/courses/{world['course'].pk}/roster/"
    body = {"members": [{"username": world["instructor"].username, "role": "instructor"}, {"username": "s-new-1"}]}
    assert api.call("PUT", url, body).status_code == 200
    before = list(Enrollment.objects.filter(course=world["course"]).order_by("pk").values_list("pk", "user_id", "role"))
    users = get_user_model().objects.count()
    events = AuditEvent.objects.count()
    again = api.call("PUT", url, body)
    assert again.status_code == 200
    assert {r["result"] for r in again.json()["rows"]} == {"unchanged"}
    assert list(Enrollment.objects.filter(course=world["course"]).order_by("pk").values_list("pk", "user_id", "role")) == before
    assert (get_user_model().objects.count(), AuditEvent.objects.count()) == (users, events)


def test_the_last_instructor_is_never_removed(api, world):
    response = api.call("PUT", f"/api/v1/courses/{world['course'].pk}/roster/", {"members": []})
    assert response.status_code == 200
    rows = {r["username"]: r for r in response.json()["rows"]}
    assert rows[world["instructor"].username]["result"] == "rejected"
    assert Enrollment.objects.filter(course=world["course"]).count() == 1


def test_a_role_change_is_an_update(api, world):
    student = world["students"][0]
    body = {
        "members": [{"username": world["instructor"].username, "role": "instructor"}]
        + [{"username": s.username, "role": "assistant" if s == student else "student"} for s in world["students"]]
    }
    response = api.call("PUT", f"/api/v1/courses/{world['course'].pk}/roster/", body)
    assert results(response)[student.username] == "updated"
    assert Enrollment.objects.get(course=world["course"], user=student).role == "assistant"


def test_a_malformed_body_changes_nothing(api, world):
    url = f"/api/v1/courses/{world['course'].pk}/roster/"
    before = Enrollment.objects.count()
    for body in ({}, {"members": "everyone"}, {"members": [{"role": "dean"}]}):
        response = api.call("PUT", url, body)
        assert response.status_code == 400, body
        assert response.json()["error"]["code"] == "invalid"
    assert Enrollment.objects.count() == before


def test_the_read_lists_members(api, world):
    response = api.call("GET", f"/api/v1/courses/{world['course'].pk}/roster/")
    assert response.status_code == 200
    assert len(response.json()["members"]) == 5


def test_a_repeated_sync_of_a_large_roster_writes_nothing(api, world):
    url = f"/api/v1/courses/{world['course'].pk}/roster/"
    body = {"members": [{"username": world["instructor"].username, "role": "instructor"}]}
    body["members"] += [{"username": f"big-{i:04d}"} for i in range(300)]
    assert api.call("PUT", url, body).json()["added"] == 300
    with CaptureQueriesContext(connection) as queries:
        assert api.call("PUT", url, body).json()["unchanged"] == 301
    writes = [q["sql"] for q in queries.captured_queries if q["sql"].split()[0] in ("INSERT", "UPDATE", "DELETE")]
    # Only the token's last-used time may be written (at most once a minute).
    assert all("api_apitoken" in sql for sql in writes), writes
