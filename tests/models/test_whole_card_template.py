"""A template's card count: 1 is a share of one card; more is that many whole cards, which the
model, the database and every form that saves a template hold to."""

from __future__ import annotations

import pytest
from django.core.exceptions import ValidationError
from django.db import IntegrityError, transaction

from labs.models import LabTemplate
from tests.factories import CARD_MIB, InstitutionFactory, TemplateFactory, node_with_cards


def template(**fields) -> LabTemplate:
    values = {"name": "pair", "slug": "pair", "image": "jupyter/base:latest", "core_percent": 100, "memory_mib": CARD_MIB}
    return LabTemplate(institution=InstitutionFactory(), **{**values, **fields})


def errors_of(lab: LabTemplate) -> dict[str, list[str]]:
    with pytest.raises(ValidationError) as caught:
        lab.full_clean()
    return caught.value.message_dict


def test_a_template_is_on_one_card_unless_it_says_otherwise(db):
    assert template(core_percent=10, memory_mib=4096).card_count == 1


def test_two_whole_cards_with_all_their_core_and_a_cards_memory_are_valid(db):
    node_with_cards(cards=8)
    lab = template(card_count=2)

    lab.full_clean()

    assert (lab.core_percent_total, lab.memory_mib_total) == (200, 2 * CARD_MIB)


def test_whole_cards_with_part_of_their_core_are_refused_saying_why(db):
    node_with_cards(cards=8)

    assert errors_of(template(card_count=2, core_percent=50))["core_percent"] == [
        "A lab on 2 whole cards has all of each card's AI Core: set 100 %, not 50 %."
    ]


def test_whole_cards_with_less_than_a_cards_memory_are_refused_saying_the_cards_sizes(db):
    node_with_cards(cards=8)

    assert errors_of(template(card_count=2, memory_mib=8192))["memory_mib"] == [
        "A lab on whole cards has each card's whole memory: 64 GiB, not 8 GiB."
    ]


def test_more_whole_cards_than_any_node_has_are_refused(db):
    node_with_cards("small", cards=2)
    node_with_cards("smaller", cards=1)

    assert errors_of(template(card_count=4))["card_count"] == [
        "No node has 4 cards; the largest has 2, and whole cards must be on one node."
    ]


def test_more_than_eight_cards_are_refused(db):
    assert "card_count" in errors_of(template(card_count=9))


def test_the_database_refuses_whole_cards_with_part_of_their_core(db):
    with pytest.raises(IntegrityError, match="template_whole_cards_take_all_core"), transaction.atomic():
        TemplateFactory(core_percent=50, memory_mib=CARD_MIB, card_count=2)
    assert not LabTemplate.objects.filter(card_count=2).exists()
