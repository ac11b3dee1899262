"""The usage spans a launch reads are one prepared statement on PostgreSQL: a pooled connection
keeps its plan, where planning its joins anew cost PostgreSQL ~15 times executing it."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from labs.selectors.usage import usage_spans
from tests.served import POSTGRESQL_ONLY

pytestmark = [POSTGRESQL_ONLY]


def prepared_usage_statements() -> int:
    """The usage spans' statements prepared on this connection (the one read of usage records that is a ``UNION ALL``)."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT count(*) FROM pg_prepared_statements WHERE statement LIKE %s AND statement LIKE %s",
            ["%labs_usagerecord%", "%UNION ALL%"],
        )
        return cursor.fetchone()[0]


@pytest.mark.django_db
def test_a_launchs_usage_read_is_prepared_once_per_connection_and_still_counted():
    now = timezone.now()
    # 0, or 1 when an earlier test in this process already ran the read on this pooled connection.
    assert prepared_usage_statements() <= 1
    with CaptureQueriesContext(connection) as queries:
        for _ in range(3):
            assert list(usage_spans(since=now - timedelta(days=7), until=now, courses=[1], students=[2], now=now)) == []
    assert prepared_usage_statements() == 1
    assert len(queries) == 3
