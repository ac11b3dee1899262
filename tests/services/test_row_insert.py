"""``row_insert``: the row ``objects.create`` writes, from a statement composed once.

(On SQLite, ``make test-sqlite`` launches through the pages, which insert with it.)
"""

from datetime import timedelta

import pytest
from django.db import IntegrityError, transaction
from django.db.models import Value
from django.db.models.signals import post_save, pre_save
from django.utils import timezone

from labs.models import Institution, LabSession
from labs.services.rows import row_insert


def made(world, **fields) -> LabSession:
    values = {
        "student": world["students"][0],
        "course": world["course"],
        "template": world["small"],
        "state": "queued",
        "queue_at": timezone.now() + timedelta(seconds=30),
        "secret": "s3cret",
        "reason_code": "session.queued",
        "reason_params": {"place": 3, "who": "王"},
        "activity": {"requests": 7},
        "selftest_probe_exceeded": None,
        **fields,
    }
    return LabSession(**values)


def columns(session_id) -> dict:
    stored = LabSession.objects.get(pk=session_id)
    return {f.attname: getattr(stored, f.attname) for f in LabSession._meta.concrete_fields}


def test_the_row_is_the_one_the_orm_writes_column_for_column(world):
    queue_at = timezone.now() + timedelta(seconds=30)
    by_orm, by_statement = made(world, queue_at=queue_at), made(world, queue_at=queue_at)
    by_orm.save(force_insert=True)
    before = timezone.now()
    row_insert(by_statement)

    orm_row, written_row = columns(by_orm.pk), columns(by_statement.pk)
    different = {name for name in orm_row if orm_row[name] != written_row[name]}
    assert different == {"id", "created_at"}  # a key and a time of its own each
    assert before <= written_row["created_at"] <= timezone.now()  # auto_now_add, as the ORM sets it
    assert written_row["created_at"] == by_statement.created_at
    assert written_row["reason_params"] == {"place": 3, "who": "王"} and written_row["smaller_offer"] == {}


def test_the_object_is_saved_as_the_orm_leaves_it(world):
    session = made(world)
    row_insert(session)

    assert session._state.adding is False and session._state.db == "default"
    stored = LabSession.objects.get(pk=session.pk)
    for field in LabSession._meta.concrete_fields:
        assert getattr(stored, field.attname) == getattr(session, field.attname), field.name
    session.state = "admitted"
    session.save(update_fields=["state"])  # an UPDATE now, not a second INSERT
    assert LabSession.objects.get(pk=session.pk).state == "admitted"


def test_nothing_listens_for_the_signals_it_does_not_send():
    # Model.save sends pre_save and post_save; row_insert does not. A receiver connected to the
    # sessions' saves would miss the launches: this fails first.
    assert not pre_save.has_listeners(LabSession)
    assert not post_save.has_listeners(LabSession)


def test_a_key_the_database_picks_and_an_expression_go_through_model_save(world):
    institution = Institution(name="Elsewhere University", slug="elsewhere")
    assert institution.pk is None
    row_insert(institution)
    assert institution.pk is not None and Institution.objects.get(pk=institution.pk).name == "Elsewhere University"

    session = made(world, version=Value(5))
    row_insert(session)
    assert LabSession.objects.get(pk=session.pk).version == 5


def test_an_unsaved_related_object_is_refused_as_model_save_refuses_it(world):
    from labs.models import LabTemplate

    unsaved = LabTemplate(name="Not saved")
    with pytest.raises(ValueError, match="unsaved related object 'template'"):
        row_insert(made(world, template=unsaved))


def test_a_refused_row_raises_changes_nothing_and_marks_the_transaction_for_rollback(world):
    first = made(world)
    row_insert(first)
    count = LabSession.objects.count()

    with transaction.atomic():
        with pytest.raises(IntegrityError):
            row_insert(made(world, id=first.pk))  # the same key again
        assert transaction.get_rollback()
    assert LabSession.objects.count() == count
