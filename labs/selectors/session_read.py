"""The sessions a page's card is drawn from, read with one written-out statement.

Every published change (a student's stop, each batch of the controller) and every dashboard
reads sessions with their template, course and quota, student, allocation, card and node: the
columns ``session_event_payload`` uses. Composed by the ORM (``select_related`` over those
joins, ``only()`` of 54 columns), building that read and turning it into objects cost several
times running the statement (docs/framework-overrides.md, "The written-out reads"). Here the
statement is written out once per
process (names from the models) and the rows become model instances as the ORM makes them
(``Model.from_db``, the related objects cached on them), so the payload code and the templates
see the same objects, and reading a column not listed here fails loudly in the tests
(``django_assert_num_queries``) instead of costing a query. The instances are made as
``from_db`` leaves them without going through ``Model.__init__`` (``_made``): eight models a
row, for every session of every controller round's publish, and ``__init__`` (signals sent,
each field set through ``setattr``) cost more than the statement.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cache, cached_property

from django.contrib.auth import get_user_model
from django.db import connection
from django.db.models import Field, Model
from django.db.models.base import ModelState
from django.db.models.signals import post_init, pre_init

from labs.models import Allocation, Card, Course, CourseQuota, LabSession, LabTemplate, Node
from labs.selectors import rows
from labs.selectors.rows import Conversion, column, conversion, converted


@dataclass(frozen=True)
class _Part:
    """One model of the read: the fields it loads, in the model's order (``Model.from_db`` wants it)."""

    model: type[Model]
    fields: tuple[Field, ...]

    @classmethod
    def of(cls, model: type[Model], names: Sequence[str]) -> _Part:
        wanted = {model._meta.pk.name, *names}
        return cls(model, tuple(f for f in model._meta.concrete_fields if f.name in wanted))

    @cached_property
    def attnames(self) -> list[str]:
        return [f.attname for f in self.fields]

    @cached_property
    def pk_at(self) -> int:
        """Where the primary key is among ``fields``: NULL there is a left join that found nothing."""
        return self.fields.index(self.model._meta.pk)


@cache
def _parts() -> dict[str, _Part]:
    """What each joined model gives the payload, by the alias it has in the statement."""
    return {
        "s": _Part(LabSession, tuple(LabSession._meta.concrete_fields)),
        "t": _Part.of(LabTemplate, ["name", "core_percent", "memory_mib", "card_count", "max_lifetime_minutes"]),
        "c": _Part.of(Course, ["code"]),
        "q": _Part.of(CourseQuota, ["course", "max_session_minutes", "extensions_allowed", "extension_minutes"]),
        "u": _Part.of(get_user_model(), [get_user_model().USERNAME_FIELD]),
        "a": _Part.of(Allocation, ["session", "card", "cards", "released_at"]),
        "d": _Part.of(Card, ["index", "node"]),
        "n": _Part.of(Node, ["name", "card_truth"]),
    }


def sessions_read(where: str, params: Sequence[object], *, student=None) -> list[LabSession]:
    """The sessions ``s`` that ``where`` (SQL over the alias ``s``, with ``%s`` for ``params``)
    selects, with what their payloads read, in no particular order.

    ``student``: the user whose sessions these all are (the dashboard's): not joined again, set
    on each. Otherwise each session's student is read with it. Each carries ``read_at``, the
    time just before the read (``labs.selectors.sessions.read_at_ms``).
    """
    parts, plan = _layout(student is None)
    read_at = time.time()  # before the read: what it finds is at least this fresh (``read_at_ms``)
    with connection.cursor() as cursor:
        cursor.execute(_select_sql(student is None) + f" WHERE {where}", list(params))
        rows = cursor.fetchall()
    db = connection.alias
    makers = [(alias, part, _made if _plain(part.model) else _from_db) for alias, part in parts]
    found = []
    for row in converted(rows, plan):
        objects: dict[str, Model | None] = {}
        at = 0
        for alias, part, make in makers:
            values = row[at : at + len(part.fields)]
            at += len(part.fields)
            objects[alias] = None if values[part.pk_at] is None else make(part.model, db, part.attnames, values)
        session = _linked(objects, student)
        session.read_at = read_at
        found.append(session)
    return found


def _plain(model: type[Model]) -> bool:
    """Whether nothing listens for ``model``'s instances being made (``pre_init``, ``post_init``):
    then ``_made`` gives what ``Model.from_db`` does."""
    return not (pre_init.has_listeners(model) or post_init.has_listeners(model))


def _made(model: type[Model], db: str, attnames: list[str], values: Sequence[object]) -> Model:
    """``model.from_db(db, attnames, values)`` for a model nothing listens to (``_plain``), without
    ``Model.__init__``: the loaded fields put in the instance's ``__dict__`` (a fresh instance has
    nothing cached that setting a foreign key through its descriptor would clear), those not
    loaded left out (deferred, as ``from_db`` leaves them)."""
    instance = model.__new__(model)
    state = instance._state = ModelState()
    state.adding = False
    state.db = db
    instance.__dict__.update(zip(attnames, values, strict=True))
    return instance


def _from_db(model: type[Model], db: str, attnames: list[str], values: Sequence[object]) -> Model:
    return model.from_db(db, attnames, values)


@cache
def _layout(with_student: bool) -> tuple[tuple[tuple[str, _Part], ...], Conversion]:
    """The parts a read selects, by alias, in the order of their columns, and how those columns
    are converted: the same every time, worked out once per process."""
    parts = tuple((alias, part) for alias, part in _parts().items() if with_student or alias != "u")
    return parts, conversion([f for _, part in parts for f in part.fields])


def _linked(o: dict[str, Model | None], student) -> LabSession:
    """The session with its related objects cached on it (and each back on the other), as
    ``select_related`` leaves them: no attribute the payload reads costs a query."""
    session, course, quota, allocation, card = o["s"], o["c"], o["q"], o["a"], o["d"]
    LabSession._meta.get_field("template").set_cached_value(session, o["t"])
    LabSession._meta.get_field("course").set_cached_value(session, course)
    LabSession._meta.get_field("student").set_cached_value(session, student if student is not None else o["u"])
    Course.quota.related.set_cached_value(course, quota)
    if quota is not None:
        CourseQuota._meta.get_field("course").set_cached_value(quota, course)
    LabSession.allocation.related.set_cached_value(session, allocation)
    if allocation is not None:
        Allocation._meta.get_field("session").set_cached_value(allocation, session)
        Allocation._meta.get_field("card").set_cached_value(allocation, card)
        if card is not None:
            Card._meta.get_field("node").set_cached_value(card, o["n"])
    return session


@cache
def _select_sql(with_student: bool) -> str:
    """``SELECT`` every part's columns ``FROM`` the sessions and their joins (the ``WHERE`` is the caller's)."""
    parts = _parts()

    def col(alias: str, name: str) -> str:
        return column(parts[alias].model, name, alias)

    def table(alias: str) -> str:
        return rows.table(parts[alias].model, alias)

    aliases = [a for a in parts if with_student or a != "u"]
    user_pk = get_user_model()._meta.pk.name
    columns = ", ".join(column(parts[a].model, f.name, a) for a in aliases for f in parts[a].fields)
    joins = [
        f"INNER JOIN {table('t')} ON {col('t', 'id')} = {col('s', 'template')}",
        f"INNER JOIN {table('c')} ON {col('c', 'id')} = {col('s', 'course')}",
        f"LEFT OUTER JOIN {table('q')} ON {col('q', 'course')} = {col('c', 'id')}",
        *([f"INNER JOIN {table('u')} ON {col('u', user_pk)} = {col('s', 'student')}"] if with_student else []),
        f"LEFT OUTER JOIN {table('a')} ON {col('a', 'session')} = {col('s', 'id')}",
        f"LEFT OUTER JOIN {table('d')} ON {col('d', 'id')} = {col('a', 'card')}",
        f"LEFT OUTER JOIN {table('n')} ON {col('n', 'id')} = {col('d', 'node')}",
    ]
    return f"SELECT {columns} FROM {table('s')} " + " ".join(joins)
