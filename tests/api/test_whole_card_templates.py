"""The API's templates say how many cards each takes: 1 for a share of one card, N for N whole cards."""

from __future__ import annotations

from tests.factories import TemplateFactory


def test_a_courses_templates_carry_their_card_count(world, api):
    course = world["course"]
    pair = TemplateFactory(institution=course.institution, name="pair", core_percent=100, memory_mib=65536, card_count=2)
    course.templates.add(pair)

    response = api.call("GET", f"/api/v1/courses/{course.pk}/templates/")

    assert response.status_code == 200
    by_name = {t["name"]: t for t in response.json()["results"]}
    assert by_name["small"]["card_count"] == 1
    assert (by_name["pair"]["card_count"], by_name["pair"]["core_percent"], by_name["pair"]["memory_mib"]) == (2, 100, 65536)


def test_a_courses_templates_say_whether_they_have_a_floor(world, api):
    course = world["course"]
    # Made where soft vNPU runs them (the model's clean() asks the cluster; the factory does not).
    explore = TemplateFactory(
        institution=course.institution, name="explore", core_percent=0, memory_mib=4096, share_policy="best-effort"
    )
    course.templates.add(explore)

    response = api.call("GET", f"/api/v1/courses/{course.pk}/templates/")

    by_name = {t["name"]: t for t in response.json()["results"]}
    assert (by_name["small"]["share_policy"], by_name["explore"]["share_policy"]) == ("elastic", "best-effort")
    assert by_name["explore"]["core_percent"] == 0
