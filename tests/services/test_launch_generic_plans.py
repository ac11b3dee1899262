"""A launch's statements use their generic plan from their first prepared run on a connection
(``labs.services.sessions._generic_plans``): PostgreSQL would otherwise plan each anew for its
first five runs, and planning the launch's reads costs more than running them."""

from __future__ import annotations

import pytest
from django.db import connection, transaction

from labs.services.sessions import session_launch_of
from tests.served import POSTGRESQL_ONLY

pytestmark = [POSTGRESQL_ONLY, pytest.mark.django_db(transaction=True)]


def usage_read_plans() -> tuple[int, int] | None:
    """(generic, custom) plans of the launch's usage read prepared on this connection, if it is."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT generic_plans, custom_plans FROM pg_prepared_statements WHERE statement LIKE %s AND statement LIKE %s",
            ["%labs_usagerecord%", "%UNION ALL%"],
        )
        return cursor.fetchone()


def plan_cache_mode() -> str:
    with connection.cursor() as cursor:
        cursor.execute("SHOW plan_cache_mode")
        return cursor.fetchone()[0]


def test_a_launchs_statements_are_planned_once_per_connection_and_only_in_its_transaction(world):
    # A new server connection: what another test prepared on a pooled one is not counted.
    connection.close()
    if getattr(connection, "pool", None) is not None:
        connection.close_pool()
    assert usage_read_plans() is None
    course, template = world["course"], world["small"]
    for student in world["students"][:4]:
        with transaction.atomic():
            session_launch_of(student=student, course_id=course.pk, template_id=template.pk)
            assert plan_cache_mode() == "force_generic_plan"
        assert plan_cache_mode() == "auto"  # the launch's transaction only

    # The first run is not prepared (DATABASE_PREPARE_THRESHOLD 1); the three prepared runs use
    # one generic plan, where PostgreSQL's default made a custom plan for each.
    generic, custom = usage_read_plans()
    assert (generic, custom) == (3, 0)
