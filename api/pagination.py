"""Pages of a list: ``page`` (1, 2, ...) and ``page_size`` (1 to 500, default 50).

DRF's paginator answers a ``page_size`` it cannot read with the default size and one above the
maximum with the maximum, silently; here the schema says what a value may be, and a request with
any other is refused (400) rather than answered with a page the client did not ask for. A page
past the last one is 404, as DRF answers it.
"""

from __future__ import annotations

from django.utils.translation import gettext_lazy as _
from rest_framework import exceptions
from rest_framework.pagination import PageNumberPagination


class Pagination(PageNumberPagination):
    page_size = 50
    page_size_query_param = "page_size"
    max_page_size = 500
    last_page_strings = ()  # the schema says a page is a number

    def get_page_size(self, request) -> int:
        given = request.query_params.get(self.page_size_query_param)
        if given is None:
            return self.page_size
        return _whole_number(
            given,
            self.page_size_query_param,
            maximum=self.max_page_size,
            message=_("Send a whole number from 1 to %(maximum)d.") % {"maximum": self.max_page_size},
        )

    def get_page_number(self, request, paginator) -> int:
        given = request.query_params.get(self.page_query_param)
        if given is None:
            return 1
        return _whole_number(given, self.page_query_param, message=_("Send a whole number, 1 or more."))

    def get_paginated_response_schema(self, schema: dict) -> dict:
        # DRF writes OpenAPI 3.0's `nullable`, which 3.1 (this document's version) does not have.
        paginated = super().get_paginated_response_schema(schema)
        for name in ("next", "previous"):
            link = paginated["properties"][name]
            del link["nullable"]
            link["type"] = [link["type"], "null"]
        return paginated

    def get_schema_operation_parameters(self, view) -> list[dict]:
        parameters = super().get_schema_operation_parameters(view)
        bounds = {
            self.page_query_param: {"minimum": 1},
            self.page_size_query_param: {"minimum": 1, "maximum": self.max_page_size},
        }
        for parameter in parameters:
            parameter["schema"].update(bounds[parameter["name"]])
        return parameters


def _whole_number(given: str, name: str, *, message: str, maximum: int | None = None) -> int:
    digits = given.lstrip("0") if given.isascii() and given.isdigit() else ""
    # Python refuses int() of thousands of digits; the first 19 are past any page or size already.
    number = int(digits[:19]) if digits else 0
    if number < 1 or (maximum is not None and number > maximum):
        raise exceptions.ValidationError({name: [message]})
    return number
