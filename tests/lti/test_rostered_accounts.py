"""A student a course roster made an account for (CSV, in a course linked to the LMS) signs in with
that account at their first launch or sync from the LMS: no second account. Only an account nobody
could have used is taken; anything else gets the LMS its own account, as before."""

from __future__ import annotations

import pytest
from django.contrib.auth import get_user_model
from django.contrib.auth.tokens import default_token_generator
from django.utils import timezone

from labs.models import AuditEvent, Enrollment, Institution
from labs.services.roster import roster_apply
from lti.models import Context, Identity
from lti.services import roster_sync
from tests.factories import UserFactory, affiliate

pytestmark = pytest.mark.django_db

CSV = "username,email,first_name\nli.wei,Li.Wei@uni.example,Wei\n"


def rostered(context: Context):
    plan = roster_apply(course=context.course, text=CSV)
    (row,) = plan.rows
    return get_user_model().objects.get(pk=row.user_id)


def sync(context: Context, email: str = "li.wei@uni.example") -> tuple:
    report = roster_sync(context=context, members=[{"user_id": "u-7", "roles": ["Learner"], "status": "Active", "email": email}])
    return report, Identity.objects.get(subject="u-7").user


def test_the_lms_signs_the_student_into_the_account_the_roster_made(context):
    account = rostered(context)
    invitation = default_token_generator.make_token(account)
    accounts = get_user_model().objects.count()

    _report, user = sync(context)

    assert user.pk == account.pk and get_user_model().objects.count() == accounts
    assert Enrollment.objects.filter(course=context.course, user=account).count() == 1
    account.refresh_from_db()
    assert not account.has_usable_password()
    assert not default_token_generator.check_token(account, invitation)  # an invitation made before ends
    assert AuditEvent.objects.filter(action="lti.roster_account.link", target__startswith="li.wei as u-7").exists()


def test_an_account_someone_signed_in_with_is_not_taken(context):
    account = rostered(context)
    get_user_model().objects.filter(pk=account.pk).update(last_login=timezone.now())

    _report, user = sync(context)

    assert user.pk != account.pk


def test_an_account_with_a_password_is_not_taken(context):
    account = rostered(context)
    account.set_password("a password someone knows")
    account.save()

    _report, user = sync(context)

    assert user.pk != account.pk


def test_an_account_another_institution_knows_is_not_taken(context):
    account = rostered(context)
    affiliate([account], Institution.objects.create(slug="other-uni", name="Other"))

    _report, user = sync(context)

    assert user.pk != account.pk


def test_two_accounts_with_the_email_take_neither(context):
    account = rostered(context)
    twin = UserFactory(username="li.wei.2", email="li.wei@uni.example")
    twin.set_unusable_password()
    twin.save()
    affiliate([twin], context.course.institution)
    Enrollment.objects.create(user=twin, course=context.course, role="student")

    _report, user = sync(context)

    assert user.pk not in (account.pk, twin.pk)


def test_an_account_of_a_course_not_linked_to_this_lms_is_not_taken(context):
    account = rostered(context)
    Enrollment.objects.filter(user=account).delete()  # no longer a member of the LMS's course

    _report, user = sync(context)

    assert user.pk != account.pk


def test_an_account_with_an_lms_identity_is_not_taken(context):
    account = rostered(context)
    Identity.objects.create(registration=context.registration, issuer=context.registration.issuer, subject="u-1", user=account)

    _report, user = sync(context)

    assert user.pk != account.pk
