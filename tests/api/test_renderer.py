"""The API's renderer (``api.renderers``, orjson) writes what DRF's ``JSONRenderer`` writes, byte for byte."""

from __future__ import annotations

import decimal
import uuid
from datetime import UTC, date, datetime, time, timedelta
from zoneinfo import ZoneInfo

import pytest
from django.utils.translation import gettext_lazy
from rest_framework import renderers
from rest_framework.utils.serializer_helpers import ReturnDict, ReturnList

from api.renderers import JSONRenderer

MOMENT = datetime(2026, 11, 30, 9, 15, 42, 123456, tzinfo=UTC)

VALUES = [
    {"id": str(uuid.UUID(int=7)), "course": 3, "ok": True, "none": None, "ratio": 0.25, "big": 2**53},
    {"words": 'zh 实验 «lab» "quoted" \\ tab\t newline\n \u0001 emoji \U0001f600', "line separators": "a\u2028b\u2029c"},
    {"times": [MOMENT, MOMENT.replace(microsecond=0), MOMENT.astimezone(ZoneInfo("Asia/Shanghai"))]},
    {"zero offset, not UTC": MOMENT.astimezone(ZoneInfo("Europe/London"))},
    {"St John's": MOMENT.astimezone(ZoneInfo("America/St_Johns")), "naive": datetime(2026, 1, 2, 3, 4, 5)},
    {"summer in London": datetime(2026, 7, 1, tzinfo=UTC).astimezone(ZoneInfo("Europe/London"))},
    {"date": date(2026, 12, 4), "time": time(8, 30, 0, 5), "uuid": uuid.UUID(int=42), "span": timedelta(minutes=90)},
    {"decimal": decimal.Decimal("12.50"), "lazy": gettext_lazy("Launch"), 7: "an int key"},
    ReturnDict({"results": ReturnList([{"a": 1}, {"b": [1, 2, {"c": None}]}], serializer=None)}, serializer=None),
    [],
    {},
    "a bare string",
]


@pytest.mark.parametrize("value", VALUES, ids=range(len(VALUES)))
def test_the_bytes_are_drf_s(value):
    assert JSONRenderer().render(value) == renderers.JSONRenderer().render(value)


def test_an_indented_answer_and_no_data_are_drf_s():
    value = {"a": [1, {"b": MOMENT}]}
    indented = "application/json; indent=4"
    assert JSONRenderer().render(value, indented) == renderers.JSONRenderer().render(value, indented)
    assert b"\n    " in JSONRenderer().render(value, indented)
    assert JSONRenderer().render(None) == renderers.JSONRenderer().render(None) == b""


def test_a_value_neither_can_write_fails_as_drf_fails():
    with pytest.raises(TypeError) as ours:
        JSONRenderer().render({"x": object()})
    with pytest.raises(TypeError) as drf:
        renderers.JSONRenderer().render({"x": object()})
    assert str(ours.value) == str(drf.value)


def test_the_api_answers_through_it(api, world):
    response = api.call("GET", f"/api/v1/sessions/?course={world['course'].pk}")
    assert response.status_code == 200
    assert type(response.accepted_renderer) is JSONRenderer
    assert response.content == renderers.JSONRenderer().render(response.data)
