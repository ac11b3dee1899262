"""Writing rows for less CPU than the ORM's composing: many rows, each with values of its own, in
one statement (PostgreSQL); one new row from a statement composed once.

Django's ``bulk_update`` builds a ``CASE WHEN pk = ... THEN ...`` per row and field and resolves
every one of them as an expression: for the controller's rounds (hundreds of labs at a time)
that costs more CPU than the statement itself. ``rows_update`` sends ``UPDATE ... FROM unnest(...)``
instead: each column's values one array parameter, cast to the column's type.
"""

from __future__ import annotations

from collections import defaultdict
from functools import cache

from django.db import DEFAULT_DB_ALIAS, connection, connections, transaction
from django.db.models import Field, Model


def rows_update(model: type[Model], rows: dict[object, dict[str, object]]) -> int:
    """Set each row's own ``{field: value}`` (rows keyed by primary key); returns the rows updated.

    Rows that give the same fields go in one statement. Values are adapted as Django would
    (``get_db_prep_save``) and sent as parameters; names come from the model, never the caller.
    Elsewhere than PostgreSQL (the embedded SQLite demo) it is one ``UPDATE`` per row.
    """
    if connection.vendor != "postgresql":
        return sum(model._default_manager.filter(pk=pk).update(**values) for pk, values in rows.items() if values)
    by_fields: dict[tuple[str, ...], list[object]] = defaultdict(list)
    for pk, values in rows.items():
        if values:
            by_fields[tuple(sorted(values))].append(pk)
    updated = 0
    for names, pks in by_fields.items():
        fields, sql = _update_sql(model, names)
        pk_field = model._meta.pk
        params = [[pk_field.get_db_prep_save(pk, connection) for pk in pks]]
        params += [[f.get_db_prep_save(rows[pk][f.name], connection) for pk in pks] for f in fields]
        with connection.cursor() as cursor:
            cursor.execute(sql, params)
            updated += cursor.rowcount
    return updated


@cache
def _update_sql(model: type[Model], names: tuple[str, ...]) -> tuple[list[Field], str]:
    """The fields named and ``rows_update``'s statement for them: one array parameter per column, so
    the text is the same for any number of rows (psycopg parses it once and PostgreSQL can keep
    its plan, where a ``VALUES`` list of a placeholder per row and column was a new statement,
    split again in Python, for every batch)."""
    meta = model._meta
    quote = connection.ops.quote_name
    fields = [meta.get_field(name) for name in names]
    columns = [meta.pk, *fields]
    arrays = ", ".join(f"%s::{f.db_type(connection)}[]" for f in columns)
    aliases = ", ".join(quote(f.column) for f in columns)
    assignments = ", ".join(f"{quote(f.column)} = v.{quote(f.column)}" for f in fields)
    pk_column = quote(meta.pk.column)
    sql = (
        f"UPDATE {quote(meta.db_table)} AS t SET {assignments} "
        f"FROM unnest({arrays}) AS v({aliases}) WHERE t.{pk_column} = v.{pk_column}"
    )
    return fields, sql


def row_insert(instance: Model) -> None:
    """INSERT ``instance``, a new object its constructor filled (as ``objects.create`` makes it)
    with its primary key given, as ``instance.save(force_insert=True)`` would, from a statement
    composed once per model (``_insert_sql``). ``Model.save`` composes it again for every row,
    and for a model of many fields that costs more than sending it: a launch's session row
    (38 columns) took ~0.55 ms of the web process's CPU through ``objects.create``.

    The values are Django's own (``get_db_prep_save(pre_save(instance, add=True))``, so
    ``auto_now_add`` is set as it would be). No ``pre_save``/``post_save`` signal is sent: the
    portal connects none (``tests/services/test_row_insert.py`` checks that, and that the row is
    the one the ORM writes). A primary key the database picks, a value that is an expression or
    a field with a placeholder of its own go through ``Model.save``.
    """
    db = connections[DEFAULT_DB_ALIAS]  # not the proxy: the fields ask it for its operations many times
    fields, sql = _insert_sql(type(instance), db.vendor)
    if sql is None or instance.pk is None:
        instance.save(force_insert=True)
        return
    instance._prepare_related_fields_for_save(operation_name="save")  # as save(): no unsaved related object
    values = [f.pre_save(instance, True) for f in fields]
    if any(hasattr(v, "resolve_expression") for v in values):
        instance.save(force_insert=True)  # checks and pre_save again: only for an expression
        return
    params = [f.get_db_prep_save(v, db) for f, v in zip(fields, values, strict=True)]
    with transaction.mark_for_rollback_on_error(), db.cursor() as cursor:
        cursor.execute(sql, params)
    instance._state.adding = False
    instance._state.db = db.alias


@cache
def _insert_sql(model: type[Model], vendor: str) -> tuple[list[Field], str | None]:
    """The model's concrete fields and ``INSERT INTO table (their columns) VALUES (a parameter
    each)``; ``None`` for the statement if a field writes a placeholder of its own."""
    fields = list(model._meta.concrete_fields)
    if any(hasattr(f, "get_placeholder") for f in fields):
        return fields, None
    quote = connection.ops.quote_name
    columns = ", ".join(quote(f.column) for f in fields)
    placeholders = ", ".join(["%s"] * len(fields))
    return fields, f"INSERT INTO {quote(model._meta.db_table)} ({columns}) VALUES ({placeholders})"
