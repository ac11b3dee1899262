"""A table of rows a selector computed, sorted by any of its columns and paged, on the server.

The query string says how: ``sort=KEY`` (ascending) or ``sort=-KEY`` (descending) and ``page=N``;
each column's header links to the table sorted by it (the other way round when it is already),
and the sorted column's header carries ``aria-sort``. Rows of equal value keep the selector's
order. An unknown ``sort`` shows the table in its usual order with a message saying so; a page
out of range shows the nearest one (``Paginator.get_page``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlencode

from django.contrib import messages
from django.core.paginator import Page, Paginator
from django.http import HttpRequest
from django.utils.translation import gettext

PER_PAGE = 50


@dataclass(frozen=True)
class Column:
    """A sortable column: ``key`` in the query string, ``label`` on its header, ``value`` of a row to sort by."""

    key: str
    label: str
    value: Callable[[Any], Any]


@dataclass(frozen=True)
class Header:
    key: str
    label: str
    href: str
    sort: str  # "ascending", "descending", or "" for a column the table is not sorted by


@dataclass(frozen=True)
class SortedTable:
    page: Page
    headers: dict[str, Header]
    query: str  # the query string of this order, without the page: a page link adds "page=N"


def sorted_table(
    request: HttpRequest,
    rows: Iterable[Any],
    columns: Sequence[Column],
    *,
    default: str,
    keep: Sequence[str] = (),
    per_page: int = PER_PAGE,
) -> SortedTable:
    """``rows`` sorted as ``request.GET["sort"]`` asks (by default, as given: ascending by the
    column ``default``) and the asked page of them; ``keep``: the other query parameters the
    links carry on (a period, a filter)."""
    by_key = {c.key: c for c in columns}
    asked = request.GET.get("sort", "")
    key, descending = asked.removeprefix("-"), asked.startswith("-")
    rows = list(rows)
    if key in by_key:
        rows.sort(key=by_key[key].value, reverse=descending)
    else:
        if asked:
            messages.warning(
                request, gettext("The table cannot be sorted by “%(sort)s”; it is shown in its usual order.") % {"sort": asked}
            )
        key, descending = default, False
    kept = [(name, request.GET[name]) for name in keep if request.GET.get(name)]
    headers = {}
    for column in columns:
        sort = ("descending" if descending else "ascending") if column.key == key else ""
        flip = "-" if sort == "ascending" else ""
        headers[column.key] = Header(column.key, column.label, "?" + urlencode([*kept, ("sort", flip + column.key)]), sort)
    order = [("sort", asked)] if asked and key == asked.removeprefix("-") else []
    page = Paginator(rows, per_page).get_page(request.GET.get("page"))
    return SortedTable(page, headers, urlencode([*kept, *order]))
