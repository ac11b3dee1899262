"""Reading rows cheaply: the one row a query can match without ``.first()``'s ORDER BY, and the
rows of a statement written out (not composed by the ORM) converted as the ORM would.

Under any ORDER BY (``.first()`` adds one by primary key; a model's default ordering is one too)
Django 5.2 builds and hashes an expression for every selected column to match the ordering
against the select list. Over a few joined tables that costs more CPU than the query itself;
a lookup by a unique key needs no order.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from typing import TypeVar

from django.db import connection
from django.db.models import Field, Model, QuerySet

M = TypeVar("M", bound=Model)


def one(qs: QuerySet[M]) -> M | None:
    """The row of ``qs`` (filtered on a unique key: at most one matches), or ``None``."""
    return next(iter(qs.order_by()), None)


def converted(rows: Iterable[tuple], fields: Sequence[Field | None]) -> Iterator[tuple]:
    """The rows of a written-out statement, each value converted as the ORM converts the column of
    its field in ``fields`` (``None``: the value as the database gives it).

    PostgreSQL's values need no converting for most fields; SQLite (the embedded demo) gives
    datetimes as text and UUIDs as hex, which the backend's converters turn back.
    """
    cols = [None if f is None else f.get_col(f.model._meta.db_table) for f in fields]  # as the compiler: a key as its target
    steps = [[] if c is None else connection.ops.get_db_converters(c) + c.get_db_converters(connection) for c in cols]
    if not any(steps):
        yield from rows
        return
    columns = list(zip(steps, cols, strict=True))
    for row in rows:
        values = []
        for value, (converters, col) in zip(row, columns, strict=True):
            for convert in converters:
                value = convert(value, col, connection)
            values.append(value)
        yield tuple(values)
