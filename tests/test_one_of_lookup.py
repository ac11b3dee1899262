"""``field__one_of`` (labs.models.lookups): ``in``'s answers, one array parameter on PostgreSQL."""

from __future__ import annotations

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from labs.models import Allocation, LabSession
from labs.services.allocation import allocation_pass
from labs.services.sessions import session_launch


@pytest.fixture
def sessions(world):
    made = [session_launch(student=s, course=world["course"], template=world["small"]) for s in world["students"]]
    allocation_pass()
    return [str(s.pk) for s in made]


@pytest.mark.django_db
def test_one_of_finds_what_in_finds_for_keys_foreign_keys_and_integers(sessions):
    some = [sessions[0], sessions[2], None]  # None matches nothing, as with in
    for field, values in (("pk", some), ("session_id", some), ("pk", [])):
        model = LabSession if field == "pk" else Allocation
        in_rows = sorted(model.objects.filter(**{f"{field}__in": values}).values_list("pk", flat=True))
        assert sorted(model.objects.filter(**{f"{field}__one_of": values}).values_list("pk", flat=True)) == in_rows
        excluded = sorted(model.objects.exclude(**{f"{field}__in": values}).values_list("pk", flat=True))
        assert sorted(model.objects.exclude(**{f"{field}__one_of": values}).values_list("pk", flat=True)) == excluded
    allocations = list(Allocation.objects.values_list("pk", flat=True))
    assert Allocation.objects.filter(pk__one_of=allocations[:2]).count() == 2  # bigint keys
    assert LabSession.objects.filter(pk__one_of=[]).count() == 0
    assert LabSession.objects.filter(pk__one_of=LabSession.objects.filter(pk=sessions[1]).values("pk")).count() == 1
    assert LabSession.objects.filter(pk__one_of=sessions[:3]).update(access_url="https://lab.invalid/") == 3


@pytest.mark.django_db
def test_on_postgresql_one_statement_whatever_the_number_of_values(sessions):
    if connection.vendor != "postgresql":
        pytest.skip("elsewhere one_of is written as in")
    with CaptureQueriesContext(connection) as queries:
        list(LabSession.objects.filter(pk__one_of=sessions[:1]))
        list(LabSession.objects.filter(pk__one_of=sessions))
    first, every = (q["sql"] for q in queries.captured_queries)
    assert "= ANY(" in first and "IN (" not in first
    assert len(first) > 0 and first.split("ANY(")[0] == every.split("ANY(")[0]
