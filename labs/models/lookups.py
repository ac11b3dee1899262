"""``field__one_of=values``: Django's ``in`` lookup, sent to PostgreSQL as one array parameter.

Django writes ``field__in=values`` as ``IN (%s, %s, ...)``, a placeholder per value. The
controller's rounds match hundreds of sessions at a time, so every such statement had a text of
its own length: psycopg parses a statement in Python on every call unless it is under 4 KiB and 50
parameters (``psycopg._queries``), and PostgreSQL plans it every time, a constant per value. On
PostgreSQL ``one_of`` writes ``= ANY(%s::type[])`` with the values one array (cast to the
column's type, as psycopg sends a list of strings as text): one text whatever their number,
parsed once per process, prepared and planned once per connection like any other
(``DATABASE_PREPARE_THRESHOLD``). Everything else is ``in``'s: ``None`` dropped (it matches
nothing), an empty list matching nothing without a query, a subquery or another database (SQLite,
the embedded demo) written as ``in`` writes it. ``labs.selectors.rows.listed`` does the same for
the written-out statements.
"""

from __future__ import annotations

from django.db.models import Field
from django.db.models.fields.related import ForeignObject
from django.db.models.fields.related_lookups import RelatedIn
from django.db.models.lookups import In


class _AsArray:
    """``in``'s values as one array parameter on PostgreSQL (a list given, not a subquery)."""

    def _as_array(self, connection) -> bool:
        return connection.vendor == "postgresql" and self.rhs_is_direct_value()

    def process_rhs(self, compiler, connection):
        placeholders, params = super().process_rhs(compiler, connection)  # None dropped, EmptyResultSet when empty
        if not self._as_array(connection):
            return placeholders, params
        return f"ANY(%s::{self.lhs.output_field.cast_db_type(connection)}[])", [list(params)]

    def get_rhs_op(self, connection, rhs):
        return f"= {rhs}" if self._as_array(connection) else super().get_rhs_op(connection, rhs)


@Field.register_lookup
class OneOf(_AsArray, In):
    lookup_name = "one_of"


# A relation's lookups are its own (``ForeignObject.get_class_lookups`` stops there): ``in``'s
# there turns model instances into their keys first.
@ForeignObject.register_lookup
class RelatedOneOf(_AsArray, RelatedIn):
    lookup_name = "one_of"
