"""PostgreSQL plans a statement the portal runs again and again once per connection: psycopg
prepares it after ``DATABASE_PREPARE_THRESHOLD`` runs, its parameters bound on the server."""

from __future__ import annotations

import pytest
from django.conf import settings
from django.db import connection

from labs.models import Course
from portal.env import env_database
from tests.served import POSTGRESQL_ONLY


def prepared(table: str) -> list[str]:
    """The statements prepared on this connection that name ``table`` (not this one: its pattern is a parameter)."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT statement FROM pg_prepared_statements WHERE statement LIKE %s", [f'%"{table}"%'])
        return [statement for (statement,) in cursor.fetchall()]


@POSTGRESQL_ONLY
@pytest.mark.django_db
def test_an_orm_statement_is_prepared_on_its_pooled_connection_once_run_more_than_the_threshold():
    assert connection.pool is not None
    threshold = settings.DATABASES["default"]["OPTIONS"]["prepare_threshold"]
    assert threshold == 1  # the setting's default

    def read() -> list[int]:
        # A statement no other test runs: the pooled connection may hold earlier tests' prepared ones.
        return list(Course.objects.filter(code__in=["a", "b"], pk__lt=0).values_list("pk", flat=True))

    before = set(prepared("labs_course"))
    for _ in range(threshold):
        assert read() == []
    assert set(prepared("labs_course")) == before
    assert read() == []
    [statement] = set(prepared("labs_course")) - before
    assert "$1" in statement  # bound on the server: the values are not in the text
    for _ in range(5):
        read()
    assert set(prepared("labs_course")) - before == {statement}  # planned once for the connection, not once a call


def test_a_threshold_of_0_leaves_djangos_client_side_binding_for_a_pooler_by_transaction():
    url = "postgres://u:p@127.0.0.1:5432/db"
    options = env_database("X", url, pool_size=lambda: 0, prepare_threshold=lambda: 0)["OPTIONS"]
    assert "server_side_binding" not in options and "prepare_threshold" not in options
    options = env_database("X", url, pool_size=lambda: 0, prepare_threshold=lambda: 1)["OPTIONS"]
    assert options["server_side_binding"] is True and options["prepare_threshold"] == 1
