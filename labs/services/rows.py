"""Writing many rows, each with values of its own, in one statement (PostgreSQL).

Django's ``bulk_update`` builds a ``CASE WHEN pk = ... THEN ...`` per row and field and resolves
every one of them as an expression: for the controller's rounds (hundreds of labs at a time)
that costs more CPU than the statement itself. ``rows_update`` sends ``UPDATE ... FROM (VALUES
...)`` instead, with every value a parameter cast to its column's type.
"""

from __future__ import annotations

from collections import defaultdict

from django.db import connection
from django.db.models import Model


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
    meta = model._meta
    table = connection.ops.quote_name(meta.db_table)
    pk_field = meta.pk
    updated = 0
    for names, pks in by_fields.items():
        fields = [meta.get_field(name) for name in names]
        columns = [pk_field, *fields]
        row_sql = "(" + ", ".join(f"%s::{f.db_type(connection)}" for f in columns) + ")"
        params: list[object] = []
        for pk in pks:
            params.append(pk_field.get_db_prep_save(pk, connection))
            params.extend(f.get_db_prep_save(rows[pk][f.name], connection) for f in fields)
        aliases = ", ".join(connection.ops.quote_name(f.column) for f in columns)
        assignments = ", ".join(
            f"{connection.ops.quote_name(f.column)} = v.{connection.ops.quote_name(f.column)}" for f in fields
        )
        pk_column = connection.ops.quote_name(pk_field.column)
        sql = (
            f"UPDATE {table} AS t SET {assignments} "
            f"FROM (VALUES {', '.join([row_sql] * len(pks))}) AS v({aliases}) WHERE t.{pk_column} = v.{pk_column}"
        )
        with connection.cursor() as cursor:
            cursor.execute(sql, params)
            updated += cursor.rowcount
    return updated
