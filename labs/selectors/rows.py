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

from django.db import DEFAULT_DB_ALIAS, connection, connections
from django.db.models import Field, Model, QuerySet

M = TypeVar("M", bound=Model)


def one(qs: QuerySet[M]) -> M | None:
    """The row of ``qs`` (filtered on a unique key: at most one matches), or ``None``."""
    return next(iter(qs.order_by()), None)


def column(model: type[Model], name: str, alias: str = "", *, using: str = DEFAULT_DB_ALIAS) -> str:
    """The column of ``model``'s field ``name`` quoted for a written-out statement, as
    ``alias."column"`` (just ``"column"`` without an alias): names come from the models, never typed."""
    quoted = connections[using].ops.quote_name(model._meta.get_field(name).column)
    return f"{alias}.{quoted}" if alias else quoted


def table(model: type[Model], alias: str = "", *, using: str = DEFAULT_DB_ALIAS) -> str:
    """``model``'s table quoted, followed by ``alias`` when given (``"labs_labsession" s``)."""
    quoted = connections[using].ops.quote_name(model._meta.db_table)
    return f"{quoted} {alias}" if alias else quoted


def marks(count: int) -> str:
    """``count`` parameter placeholders for an ``IN (...)``: ``%s, %s, %s``."""
    return ", ".join(["%s"] * count)


def one_of(count: int | None) -> str:
    """What follows a column to match it against a list of values (``listed``): ``IN (%s, ...)``
    for ``count`` of them, or ``= ANY(%s)``, all of them in one array parameter, for ``None``."""
    return "= ANY(%s)" if count is None else f"IN ({marks(count)})"


def listed(values: list) -> tuple[int | None, list]:
    """``values`` for ``one_of``: its ``count`` and the parameters. On PostgreSQL one array
    parameter: the statement then has one length however many values it lists, and psycopg parses
    it once per process (it caches statements under 4 KiB and 50 parameters); a statement of
    hundreds of ``%s`` it parses anew every time, which cost a controller round's publish more
    than the statement did. Elsewhere (SQLite) one parameter each."""
    if connection.vendor == "postgresql":
        return None, [values]
    return len(values), values


Conversion = tuple[tuple[int, list, object], ...]


def conversion(fields: Sequence[Field | None]) -> Conversion:
    """How to convert the columns of a written-out statement as the ORM converts those of
    ``fields`` (``None``: the value as the database gives it): ``(index, converters, column)`` of
    the columns that need it, found as the compiler finds them (a foreign key's column as its
    target's). A statement's caller works it out once per process (its fields never change) and
    hands it to :func:`converted` on every read.

    PostgreSQL's values need no converting for most fields (JSON does); SQLite (the embedded
    demo) gives datetimes as text and UUIDs as hex, which the backend's converters turn back.
    """
    found = []
    for i, field in enumerate(fields):
        if field is None:
            continue
        col = field.get_col(field.model._meta.db_table)
        converters = connection.ops.get_db_converters(col) + col.get_db_converters(connection)
        if converters:
            found.append((i, converters, col))
    return tuple(found)


def converted(rows: Iterable[tuple], plan: Conversion) -> Iterator[tuple]:
    """The rows of a written-out statement with their values converted by ``plan`` (:func:`conversion`)."""
    if not plan:
        yield from rows
        return
    for row in rows:
        values = list(row)
        for i, converters, col in plan:
            value = values[i]
            for convert in converters:
                value = convert(value, col, connection)
            values[i] = value
        yield tuple(values)
