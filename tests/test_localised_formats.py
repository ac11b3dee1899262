"""Dates, numbers and sizes render in the reader's language; ids stay plain numbers."""

from __future__ import annotations

import datetime

import pytest
from django.template import Context, Template
from django.utils import translation

LAUNCHED = datetime.datetime(2026, 11, 30, 14, 5, tzinfo=datetime.UTC)


def render(text: str, language: str, **context) -> str:
    with translation.override(language):
        return Template("{% load units %}" + text).render(Context(context))


@pytest.mark.parametrize(
    ("language", "date", "moment"),
    [("en", "Nov. 30, 2026", "Nov. 30, 2026, 2:05 p.m."), ("zh-hans", "2026年11月30日", "2026年11月30日 14:05")],
)
def test_dates_and_times_use_the_readers_formats(language, date, moment):
    assert render("{{ d }}", language, d=LAUNCHED.date()) == date
    assert render("{{ t }}", language, t=LAUNCHED) == moment


@pytest.mark.parametrize(("language", "large", "fraction"), [("en", "1,536 GiB", "4.5 GiB"), ("zh-hans", "1536 GiB", "4.5 GiB")])
def test_sizes_are_grouped_as_the_reader_writes_numbers(language, large, fraction):
    assert render("{{ m|gib }}", language, m=1536 * 1024) == large
    assert render("{{ m|gib }}", language, m=4608) == fraction


@pytest.mark.parametrize("language", ["en", "zh-hans"])
def test_ids_and_counts_in_attributes_and_form_values_stay_plain_numbers(language):
    assert render('<input value="{{ pk }}">', language, pk=12345) == '<input value="12345">'
