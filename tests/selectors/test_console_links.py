"""The header's console links come from one query and agree with the consoles' own checks."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import Group, Permission
from django.db import connection
from django.test.utils import CaptureQueriesContext

from labs.models import Enrollment, InstitutionRole
from labs.selectors.console import console_links, is_teacher
from labs.selectors.operations import operator_scope
from tests.factories import CourseFactory, InstitutionFactory, UserFactory

pytestmark = pytest.mark.django_db


def _grant_platform(user, *, through_group: bool) -> None:
    permission = Permission.objects.get(codename="operate_platform", content_type__app_label="labs")
    if through_group:
        group = Group.objects.create(name=f"platform-{user.pk}")
        group.permissions.add(permission)
        user.groups.add(group)
    else:
        user.user_permissions.add(permission)


CASES = {
    "student": lambda u, c: Enrollment.objects.create(user=u, course=c, role=Enrollment.Role.STUDENT),
    "assistant": lambda u, c: Enrollment.objects.create(user=u, course=c, role=Enrollment.Role.ASSISTANT),
    "instructor": lambda u, c: Enrollment.objects.create(user=u, course=c, role=Enrollment.Role.INSTRUCTOR),
    "institution instructor": lambda u, c: InstitutionRole.objects.create(
        user=u, institution=c.institution, role=InstitutionRole.Role.INSTRUCTOR
    ),
    "institution operator": lambda u, c: InstitutionRole.objects.create(
        user=u, institution=c.institution, role=InstitutionRole.Role.OPERATOR
    ),
    "platform permission": lambda u, c: _grant_platform(u, through_group=False),
    "platform through a group": lambda u, c: _grant_platform(u, through_group=True),
    "inactive with the permission": lambda u, c: (_grant_platform(u, through_group=False), _deactivate(u)),
    "superuser": lambda u, c: _make_superuser(u),
    "nobody": lambda u, c: None,
}


def _deactivate(user) -> None:
    user.is_active = False
    user.save(update_fields=["is_active"])


def _make_superuser(user) -> None:
    user.is_superuser = True
    user.save(update_fields=["is_superuser"])


@pytest.mark.parametrize("case", sorted(CASES))
def test_links_agree_with_the_consoles_checks(case):
    course = CourseFactory(institution=InstitutionFactory())
    user = UserFactory()
    CASES[case](user, course)
    user = type(user).objects.get(pk=user.pk)  # no cached permissions

    links = console_links(user=user)

    fresh = type(user).objects.get(pk=user.pk)
    assert links.teaches == is_teacher(user=fresh)
    assert links.operates == (operator_scope(user=fresh) is not None)


def test_one_query():
    course = CourseFactory(institution=InstitutionFactory())
    user = UserFactory()
    Enrollment.objects.create(user=user, course=course, role=Enrollment.Role.INSTRUCTOR)
    with CaptureQueriesContext(connection) as queries:
        links = console_links(user=user)
    assert (links.teaches, links.operates) == (True, False)
    assert len(queries) == 1
