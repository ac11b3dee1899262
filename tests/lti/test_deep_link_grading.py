"""The instructor's grading choice on the deep-linking page: a choice the page does not offer, or a
target out of range, is refused with a message and sends the LMS nothing."""

from __future__ import annotations

import pytest

from tests.lti.conftest import hidden_inputs
from tests.lti.platform import INSTRUCTOR

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.mark.parametrize(
    ("choice", "message"),
    [
        ({"score": "npu_time", "target_minutes": "0"}, "The target is a whole number of minutes from 1 to 10000."),
        ({"score": "npu_time", "target_minutes": "1.5"}, "The target is a whole number of minutes from 1 to 10000."),
        ({"score": "npu_time", "target_minutes": ""}, "The target is a whole number of minutes from 1 to 10000."),
        ({"score": "bonus", "target_minutes": "60"}, "Choose how the activity is graded."),
    ],
)
def test_a_grading_choice_the_page_does_not_offer_is_refused(browser, platform, catalogue, choice, message):
    picker = browser.launch(sub="teacher-1", roles=INSTRUCTOR, **platform.deep_link_claims())
    launch_id = hidden_inputs(picker.text)["launch_id"]

    response = browser.post_form("/lti/deep-link/", picker.text, {"launch_id": launch_id, "template": catalogue[0].pk, **choice})

    assert response.status_code == 400
    assert message in response.text
    assert "deep-link-return" not in response.text


def test_a_lab_reported_score_is_offered_out_of_100_with_the_tools_tag(browser, platform, catalogue):
    picker = browser.launch(sub="teacher-1", roles=INSTRUCTOR, **platform.deep_link_claims())
    launch_id = hidden_inputs(picker.text)["launch_id"]

    response = browser.post_form(
        "/lti/deep-link/", picker.text, {"launch_id": launch_id, "template": catalogue[0].pk, "score": "lab"}
    )
    browser.http.post(platform.url + "/deep-link-return", data={"JWT": hidden_inputs(response.text)["JWT"]}, timeout=10)

    (item,) = platform.deep_link_responses[-1]["https://purl.imsglobal.org/spec/lti-dl/claim/content_items"]
    assert item["custom"]["npu_score_source"] == "lab" and item["custom"]["npu_score_on_end"] == "1"
    assert (item["lineItem"]["scoreMaximum"], item["lineItem"]["tag"]) == (100, "npu-lab")
