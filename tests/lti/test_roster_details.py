"""The LTI names and roles sync follows a member's name and e-mail in the LMS: the report says
who was updated and with what; an e-mail another account of the institution has is not taken."""

from __future__ import annotations

import pytest

from labs.models import AuditEvent, Enrollment
from lti.models import Identity
from lti.services import roster_sync
from tests.factories import UserFactory, affiliate

pytestmark = pytest.mark.django_db


def member(**fields) -> dict:
    return {"user_id": "u-7", "roles": ["Learner"], "status": "Active", **fields}


def test_a_changed_name_and_email_are_reported_and_saved(context):
    first = roster_sync(context=context, members=[member(email="li.wei@uni.example", given_name="Li", family_name="Wei")])
    assert first.added == 1
    report = roster_sync(context=context, members=[member(email="wei.li@uni.example", given_name="Lee", family_name="Wei")])
    assert (report.added, report.changed, report.removed) == (0, 1, 0)
    (line,) = report.updated
    assert "li.wei@uni.example → wei.li@uni.example" in line and "Li → Lee" in line
    user = Identity.objects.get(subject="u-7").user
    assert (user.email, user.first_name) == ("wei.li@uni.example", "Lee")
    assert AuditEvent.objects.filter(action="account.details").count() == 1
    again = roster_sync(context=context, members=[member(email="wei.li@uni.example", given_name="Lee", family_name="Wei")])
    assert (again.changed, again.updated) == (0, [])


def test_an_email_another_account_has_is_not_taken(world, context):
    other = UserFactory(username="zhang", email="taken@uni.example", first_name="Secret")
    affiliate([other], world["course"].institution)
    roster_sync(context=context, members=[member(email="li.wei@uni.example", given_name="Li")])
    report = roster_sync(context=context, members=[member(email="Taken@uni.example", given_name="Li")])
    (line,) = report.refused
    assert "Taken@uni.example is the e-mail of another account" in line
    assert "zhang" not in line and "Secret" not in line
    user = Identity.objects.get(subject="u-7").user
    assert user.email == "li.wei@uni.example"
    assert Enrollment.objects.filter(course=world["course"], user=user).exists()
