"""The roster import's plan (the preview) lists every problem of a row, its counts are what the
import then does, and it says how the accounts it makes get in: their LMS, or an invitation."""

from __future__ import annotations

import pytest
from django.contrib.auth import get_user_model

from labs.models import Enrollment
from labs.services.roster import Action, RosterCounts, SignIn, roster_apply, roster_plan
from lti.models import Context
from tests.factories import UserFactory, affiliate, lti_registration


def test_every_problem_of_a_row_is_listed_not_only_the_first(world):
    text = (
        f"username,email,role,first_name\nbad user!,not-an-email,professor,{'x' * 151}\n,,teacher,\ndup,,student,\ndup,,boss,\n"
    )

    plan = roster_plan(course=world["course"], text=text)

    bad, nameless, first, twice = plan.rows
    assert all(row.action == Action.ERROR for row in (bad, nameless, twice))
    assert bad.problems == [
        "bad user! is not a valid username",
        "not-an-email is not an e-mail address",
        "first name is longer than 150 characters",
        "unknown role professor: use student, assistant or instructor",
    ]
    assert nameless.problems == ["no username and no e-mail", "unknown role teacher: use student, assistant or instructor"]
    assert first.action == Action.CREATE and first.problems == []
    assert twice.problems == ["unknown role boss: use student, assistant or instructor", "listed twice in this file"]


def test_the_counts_of_the_preview_are_what_the_import_does(world):
    course = world["course"]
    students = world["students"]
    known = UserFactory(username="known")
    affiliate([known], course.institution)
    text = (
        "username,role\n"
        f"{students[0].username},student\n"  # unchanged
        f"{students[1].username},assistant\n"  # role changes
        "known,student\n"  # an existing account joins
        "new-1,student\n"  # a new account
        "new-2,assistant\n"  # a new account
        "bad user!,student\n"  # rejected
    )
    User = get_user_model()
    members = set(Enrollment.objects.filter(course=course).values_list("user_id", "role"))
    accounts = User.objects.count()

    preview = roster_plan(course=course, text=text).counts
    assert preview == RosterCounts(add=1, create=2, update=1, unchanged=1, rejected=1)

    done = roster_apply(course=course, text=text).counts
    assert done == preview
    after = set(Enrollment.objects.filter(course=course).values_list("user_id", "role"))
    joined = {user for user, _role in after} - {user for user, _role in members}
    changed = {user for user, role in after - members} - joined
    assert len(joined) == preview.joining
    assert User.objects.count() - accounts == preview.create
    assert len(changed) == preview.update
    assert len(after & members) == len(members) - preview.update  # the rest unchanged, nobody removed
    assert roster_plan(course=course, text=text).counts == RosterCounts(add=0, create=0, update=0, unchanged=5, rejected=1)


def test_new_accounts_get_an_invitation_unless_the_course_signs_in_through_an_lms(world):
    course = world["course"]
    plan = roster_plan(course=course, text="username\nnew-1\n")
    assert (plan.sign_in, plan.lms) == (SignIn.INVITATION, "")

    registration = lti_registration(course.institution, name="Moodle of Test University")
    Context.objects.create(registration=registration, context_id="ctx-1", course=course)
    plan = roster_plan(course=course, text="username\nnew-1\n")
    assert (plan.sign_in, plan.lms) == (SignIn.LMS, "Moodle of Test University")


@pytest.mark.parametrize("text", ["username\n" + "x" * 151 + "\n", "username,last_name\nok," + "y" * 151 + "\n"])
def test_a_value_longer_than_its_field_is_rejected_and_nothing_is_written(world, text):
    accounts = get_user_model().objects.count()
    plan = roster_apply(course=world["course"], text=text)
    assert plan.counts.rejected == 1 and "longer than 150 characters" in plan.rows[0].message
    assert get_user_model().objects.count() == accounts
