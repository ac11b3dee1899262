"""LTI context roles -> course roles."""

import pytest

from lti.services import role_from_claims

M = "http://purl.imsglobal.org/vocab/lis/v2/membership"


@pytest.mark.parametrize(
    ("roles", "expected"),
    [
        ([f"{M}#Learner"], "student"),
        ([f"{M}#Instructor"], "instructor"),
        ([f"{M}#Administrator"], "instructor"),
        ([f"{M}#Instructor", f"{M}/Instructor#TeachingAssistant"], "assistant"),
        ([f"{M}/Instructor#TeachingAssistant"], "assistant"),
        (["Learner"], "student"),
        (["Instructor"], "instructor"),
        ([f"{M}#Learner", f"{M}#Instructor"], "instructor"),
        (["http://purl.imsglobal.org/vocab/lis/v2/institution/person#Administrator"], None),
        (["http://purl.imsglobal.org/vocab/lis/v2/system/person#Administrator"], None),
        ([f"{M}#Mentor"], None),
        ([], None),
    ],
)
def test_context_roles_map_to_course_roles(roles, expected):
    assert role_from_claims(roles) == expected
