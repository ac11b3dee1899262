"""The planner's representations in the API: the query of a plan and of a what-if class, and what
comes back. Ranges from ``labs.domain.planner``; the dates' rule and the what-if's cross-field
rules from the console's forms (``labs.forms.planner``), which the view calls."""

from __future__ import annotations

from rest_framework import serializers

from api.serializers import BLANK_PARAMETER
from labs.domain.planner import DEFAULT_HISTORY_WEEKS, MAX_CLASS_SIZE, MAX_HISTORY_WEEKS, MAX_WEEKS, Verdict
from labs.forms.planner import plan_date_error

HH_MM = r"^([01][0-9]|2[0-3]):[0-5][0-9]$"


class _Query(serializers.Serializer):
    def to_internal_value(self, data):
        # DRF reads ?weeks= in a query string as if it were not sent; the schema says a number.
        blank = {name: [BLANK_PARAMETER] for name in self.fields if data.get(name) == ""}
        if blank:
            raise serializers.ValidationError(blank)
        return super().to_internal_value(data)

    @staticmethod
    def _plan_date(day):
        if day is not None and (error := plan_date_error(day)):
            raise serializers.ValidationError(error)
        return day


class PlanQuerySerializer(_Query):
    first = serializers.DateField(
        required=False,
        help_text="A day of the first week (planned from its Monday): a year back to two years ahead. Default: today.",
    )
    weeks = serializers.IntegerField(required=False, min_value=1, max_value=MAX_WEEKS, default=1, help_text="Weeks to plan.")
    history_weeks = serializers.IntegerField(
        required=False,
        min_value=1,
        max_value=MAX_HISTORY_WEEKS,
        default=DEFAULT_HISTORY_WEEKS,
        help_text="Past weeks of the usage ledger the usual use of each hour is learnt from (its 90th percentile).",
    )

    def validate_first(self, value):
        return self._plan_date(value)


class WhatIfQuerySerializer(_Query):
    template = serializers.IntegerField(min_value=1, max_value=2**63 - 1, help_text="A template offered in the course (its id).")
    count = serializers.IntegerField(min_value=1, max_value=MAX_CLASS_SIZE, help_text="Students in the new class.")
    weekday = serializers.IntegerField(min_value=0, max_value=6, help_text="0 = Monday … 6 = Sunday.")
    start = serializers.RegexField(HH_MM, help_text="HH:MM, the portal's time zone.")
    end = serializers.RegexField(HH_MM, help_text="HH:MM, after start.")
    first = serializers.DateField(help_text="The first date of the weeks to try: a year back to two years ahead.")
    last = serializers.DateField(help_text="The last date, at most 26 weeks after the first.")


class AmountsSerializer(serializers.Serializer):
    instances = serializers.IntegerField()
    core_percent = serializers.IntegerField()
    memory_mib = serializers.IntegerField()


class CardTypeHourSerializer(serializers.Serializer):
    chip_type = serializers.CharField()
    capacity = AmountsSerializer()
    booked = AmountsSerializer()
    usual = AmountsSerializer()


class PlanHourSerializer(serializers.Serializer):
    start = serializers.DateTimeField()
    load_percent = serializers.IntegerField(help_text="The largest of instances, AI Core and memory taken, over capacity.")
    fits = serializers.BooleanField(help_text="Everything found a card and every guarantee is covered.")
    capacity = AmountsSerializer()
    booked = AmountsSerializer(help_text="Class bookings placed on cards.")
    usual = AmountsSerializer(help_text="The usual self-paced use placed on cards.")
    guaranteed = AmountsSerializer(help_text="Guarantees beyond what their courses' placed instances use, held as totals.")
    unplaced = AmountsSerializer(help_text="Bookings and usual use that found no card (fragmentation included).")
    short = AmountsSerializer(help_text="The part of the guarantees the cluster's totals left do not cover.")
    yours = AmountsSerializer(help_text="What this course's placed instances take.")
    card_types = CardTypeHourSerializer(many=True)
    bookings = serializers.ListField(
        child=serializers.CharField(), help_text="The bookings in the hour; another institution's are not named."
    )


class PlanSerializer(serializers.Serializer):
    course = serializers.IntegerField()
    first = serializers.DateField(help_text="The Monday the plan starts on.")
    weeks = serializers.IntegerField()
    history_weeks = serializers.IntegerField()
    hours = PlanHourSerializer(many=True)


class ClassHourSerializer(serializers.Serializer):
    start = serializers.DateTimeField()
    verdict = serializers.ChoiceField(choices=[v.value for v in Verdict])
    placed = serializers.IntegerField(help_text="How many of the class's labs found a card.")
    reason_code = serializers.CharField(allow_blank=True, help_text="Why the quota rules refused it; empty when they did not.")
    reason = serializers.CharField(allow_blank=True, help_text="The same in words, in the request's language.")
    collisions = serializers.ListField(child=serializers.CharField(), help_text="The other bookings in the hour.")


class WhatIfSerializer(serializers.Serializer):
    course = serializers.IntegerField()
    verdict = serializers.ChoiceField(
        choices=[v.value for v in Verdict], help_text="The worst hour's: fits, fits_with_borrowing or does_not_fit."
    )
    slots = serializers.IntegerField(help_text="Classes in the weeks asked for.")
    hours = ClassHourSerializer(many=True)
