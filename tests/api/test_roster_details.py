"""The roster PUT follows the LMS's names and e-mails, through the ASGI application: a member
whose name or e-mail changed in the LMS is "updated" with what changed; an e-mail another
account has is refused with a reason naming nobody else, and the row changes nothing."""

from __future__ import annotations

import pytest
from django.contrib.auth import get_user_model

from labs.models import AuditEvent, Enrollment
from tests.asgi_client import AsgiClient

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def put(world, make_token):
    client = AsgiClient()
    token = make_token(world["course"].institution)
    teacher = {"username": world["instructor"].username, "role": "instructor"}

    def call(*members: dict) -> dict[str, dict]:
        response = client.request(
            "PUT",
            f"/api/v1/courses/{world['course'].pk}/roster/",
            headers={"Authorization": f"Bearer {token}"},
            json={"members": [teacher, *members]},
        )
        assert response.status_code == 200, response.text
        return {row["username"]: row for row in response.json()["rows"]}

    return call


def account(username: str):
    return get_user_model().objects.get(username=username)


def test_a_changed_name_and_email_are_an_update(put):
    put({"username": "lw", "email": "li.wei@uni.example", "first_name": "Li", "last_name": "Wei"})
    rows = put({"username": "lw", "email": "wei.li@uni.example", "first_name": "Lee", "last_name": "Wei"})
    assert rows["lw"]["result"] == "updated"
    assert rows["lw"]["email"] == "wei.li@uni.example"
    assert "li.wei@uni.example → wei.li@uni.example" in rows["lw"]["reason"]
    assert "Li → Lee" in rows["lw"]["reason"]
    user = account("lw")
    assert (user.email, user.first_name, user.last_name) == ("wei.li@uni.example", "Lee", "Wei")
    assert AuditEvent.objects.filter(action="account.details", target="account lw").count() == 1

    again = put({"username": "lw", "email": "wei.li@uni.example", "first_name": "Lee", "last_name": "Wei"})
    assert again["lw"]["result"] == "unchanged"


def test_a_role_and_a_name_change_together(put):
    put({"username": "lw", "email": "li.wei@uni.example", "first_name": "Li"})
    rows = put({"username": "lw", "email": "li.wei@uni.example", "first_name": "Lee", "role": "assistant"})
    assert rows["lw"]["result"] == "updated"
    assert "Li → Lee" in rows["lw"]["reason"]
    assert Enrollment.objects.get(user__username="lw").role == "assistant"


def test_an_email_another_account_has_is_refused(put):
    put(
        {"username": "lw", "email": "li.wei@uni.example", "first_name": "Li"},
        {"username": "zhang", "email": "taken@uni.example", "first_name": "Secret", "last_name": "Person"},
    )
    rows = put(
        {"username": "lw", "email": "TAKEN@uni.example", "first_name": "Lee", "role": "assistant"},
        {"username": "zhang", "email": "taken@uni.example", "first_name": "Secret", "last_name": "Person"},
    )
    row = rows["lw"]
    assert row["result"] == "rejected"
    assert row["reason"] == "TAKEN@uni.example is the e-mail of another account"
    assert "zhang" not in row["reason"] and "Secret" not in row["reason"]
    user = account("lw")
    assert (user.email, user.first_name) == ("li.wei@uni.example", "Li")
    assert Enrollment.objects.get(user__username="lw").role == "student"


def test_two_rows_cannot_take_the_same_new_email(put):
    put({"username": "a1", "email": "a1@uni.example"}, {"username": "a2", "email": "a2@uni.example"})
    rows = put({"username": "a1", "email": "new@uni.example"}, {"username": "a2", "email": "new@uni.example"})
    assert rows["a1"]["result"] == "updated"
    assert rows["a2"]["result"] == "rejected"
    assert account("a2").email == "a2@uni.example"


def test_an_account_with_a_password_keeps_its_email(world, put):
    student = world["students"][0]
    student.email = "own@uni.example"
    student.save(update_fields=["email"])
    rows = put({"username": student.username, "email": "lms@uni.example", "first_name": "Named"})
    assert rows[student.username]["result"] == "rejected"
    assert "changed only by its owner" in rows[student.username]["reason"]
    student.refresh_from_db()
    assert (student.email, student.first_name) == ("own@uni.example", "")
