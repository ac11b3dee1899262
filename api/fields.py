"""Body fields that take only the JSON type the schema names.

DRF's own fields coerce: a CharField reads ``2026`` as ``"2026"``, an IntegerField ``"12"`` as 12,
a BooleanField ``"yes"`` or ``1`` as true. The schema says string, integer, boolean; a client that
leans on the coercion would break on any stricter server, so a value of another type is refused
(400, with DRF's own message for the field) as the schema refuses it.
"""

from __future__ import annotations

from rest_framework import serializers


class StrictCharField(serializers.CharField):
    def to_internal_value(self, data):
        if not isinstance(data, str):
            self.fail("invalid")
        return super().to_internal_value(data)


class StrictIntegerField(serializers.IntegerField):
    def to_internal_value(self, data):
        # JSON Schema counts 3.0 as an integer (it equals 3); a string, a boolean or 3.5 is not one.
        if isinstance(data, bool) or not isinstance(data, int | float) or (isinstance(data, float) and not data.is_integer()):
            self.fail("invalid")
        return super().to_internal_value(data)


class StrictBooleanField(serializers.BooleanField):
    def to_internal_value(self, data):
        if not isinstance(data, bool):
            self.fail("invalid", input=data)
        return data
