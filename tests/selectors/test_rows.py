"""labs.selectors.rows: the row a unique lookup finds, with no ORDER BY sent; names for written-out statements."""

import pytest
from django.core.exceptions import FieldDoesNotExist
from django.db import connection
from django.test.utils import CaptureQueriesContext

from labs.models import LabSession, LabTemplate
from labs.selectors.rows import column, marks, one, table
from labs.services.sessions import session_launch


def test_one_reads_the_row_or_none_without_an_order_by(world):
    session = session_launch(student=world["students"][0], course=world["course"], template=world["small"])
    with CaptureQueriesContext(connection) as queries:
        found = one(LabSession.objects.select_related("template", "course").filter(pk=session.pk))
        missing = one(LabTemplate.objects.filter(pk=-1))  # a model with a default ordering
    assert found == session and found.template == world["small"]
    assert missing is None
    assert len(queries) == 2 and not any("ORDER BY" in q["sql"] for q in queries.captured_queries)


def test_written_out_statements_take_their_names_from_the_models():
    quote = connection.ops.quote_name
    assert column(LabSession, "course", "s") == f"s.{quote('course_id')}"  # a foreign key's column
    assert column(LabSession, "state") == quote("state")
    assert table(LabSession, "s") == f"{quote(LabSession._meta.db_table)} s"
    assert table(LabTemplate) == quote(LabTemplate._meta.db_table)
    assert marks(3) == "%s, %s, %s"


def test_a_field_the_model_does_not_have_is_an_error_not_a_guessed_column():
    with pytest.raises(FieldDoesNotExist):
        column(LabSession, "no_such_field", "s")
