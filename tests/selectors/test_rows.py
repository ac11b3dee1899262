"""labs.selectors.rows.one: the row a unique lookup finds, with no ORDER BY sent."""

from django.db import connection
from django.test.utils import CaptureQueriesContext

from labs.models import LabSession, LabTemplate
from labs.selectors.rows import one
from labs.services.sessions import session_launch


def test_one_reads_the_row_or_none_without_an_order_by(world):
    session = session_launch(student=world["students"][0], course=world["course"], template=world["small"])
    with CaptureQueriesContext(connection) as queries:
        found = one(LabSession.objects.select_related("template", "course").filter(pk=session.pk))
        missing = one(LabTemplate.objects.filter(pk=-1))  # a model with a default ordering
    assert found == session and found.template == world["small"]
    assert missing is None
    assert len(queries) == 2 and not any("ORDER BY" in q["sql"] for q in queries.captured_queries)
