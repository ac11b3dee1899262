"""Reading the one row a query can match, without ``.first()``'s ORDER BY.

Under any ORDER BY (``.first()`` adds one by primary key; a model's default ordering is one too)
Django 5.2 builds and hashes an expression for every selected column to match the ordering
against the select list. Over a few joined tables that costs more CPU than the query itself;
a lookup by a unique key needs no order.
"""

from __future__ import annotations

from typing import TypeVar

from django.db.models import Model, QuerySet

M = TypeVar("M", bound=Model)


def one(qs: QuerySet[M]) -> M | None:
    """The row of ``qs`` (filtered on a unique key: at most one matches), or ``None``."""
    return next(iter(qs.order_by()), None)
