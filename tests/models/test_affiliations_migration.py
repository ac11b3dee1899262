"""Migration 0018 affiliates every existing account with the institutions it is already part of:
those whose courses it is enrolled in, where it holds a role, and whose LTI registration knows it."""

from __future__ import annotations

import pytest
from django.db import connection
from django.db.migrations.executor import MigrationExecutor

BEFORE = [("labs", "0017_host_resources"), ("lti", "0001_initial")]
AFTER = [("labs", "0018_affiliations")]


@pytest.mark.django_db(transaction=True)
def test_existing_accounts_are_affiliated_with_the_institutions_they_are_part_of():
    executor = MigrationExecutor(connection)
    executor.migrate(BEFORE)
    old = executor.loader.project_state(BEFORE).apps
    User = old.get_model("auth", "User")
    Institution = old.get_model("labs", "Institution")
    a = Institution.objects.create(name="A University", slug="a")
    b = Institution.objects.create(name="B University", slug="b")
    student, operator, lms_user, both, nobody = (
        User.objects.create(username=name) for name in ("student", "operator", "lms", "both", "nobody")
    )
    Course = old.get_model("labs", "Course")
    course_a = Course.objects.create(institution=a, code="A1", title="t", term="2026")
    course_b = Course.objects.create(institution=b, code="B1", title="t", term="2026")
    Enrollment = old.get_model("labs", "Enrollment")
    for user, course in ((student, course_a), (both, course_a), (both, course_b)):
        Enrollment.objects.create(user=user, course=course, role="student")
    old.get_model("labs", "InstitutionRole").objects.create(user=operator, institution=b, role="operator")
    registration = old.get_model("lti", "Registration").objects.create(
        institution=b,
        name="LMS",
        issuer="https://lms.b.example",
        client_id="c",
        auth_login_url="https://lms.b.example/auth",
        auth_token_url="https://lms.b.example/token",
        keyset_url="https://lms.b.example/jwks",
    )
    Identity = old.get_model("lti", "Identity")
    Identity.objects.create(registration=registration, issuer=registration.issuer, subject="1", user=lms_user)

    executor = MigrationExecutor(connection)
    executor.loader.build_graph()
    executor.migrate(AFTER)
    Affiliation = executor.loader.project_state(AFTER).apps.get_model("labs", "Affiliation")
    assert set(Affiliation.objects.values_list("user__username", "institution__slug", "source")) == {
        ("student", "a", "enrolment"),
        ("both", "a", "enrolment"),
        ("both", "b", "enrolment"),
        ("operator", "b", "role"),
        ("lms", "b", "lti"),
    }
    assert not Affiliation.objects.filter(user__username="nobody").exists()

    executor = MigrationExecutor(connection)
    executor.loader.build_graph()
    executor.migrate(executor.loader.graph.leaf_nodes())
