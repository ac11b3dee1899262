"""The whole LTI 1.3 Advantage flow over HTTP against a real platform: login initiation, launch,
deep linking, the deep-linked template's launch, NRPS roster sync and the AGS score."""

from __future__ import annotations

import jwt
import pytest
import redis
from django.conf import settings
from django.contrib.auth import get_user_model

from labs.domain.reasons import Reason
from labs.models import Affiliation, AuditEvent, Course, CourseQuota, Enrollment, LabSession
from labs.services.sessions import session_stop
from lti.keys import active_key
from lti.models import Context, Identity, Score
from lti.tasks import score_post_task
from tests.lti.conftest import hidden_inputs
from tests.lti.platform import AGS_SCOPES, CLAIM, INSTRUCTOR, LEARNER, TEACHING_ASSISTANT

pytestmark = pytest.mark.django_db(transaction=True)


def test_the_login_page_checks_cookies_with_a_static_script_and_no_inline_one(browser, platform):
    params = platform.login_params(target_link_uri=browser.tool_url + "/lti/launch/")
    page = browser.http.get(browser.tool_url + "/lti/login/", params=params, timeout=10)

    assert page.status_code == 200
    assert '<script src="/static/lti/cookie_check.js"' in page.text
    assert "<script>" not in page.text and "onclick" not in page.text
    assert "'unsafe-inline'" not in page.headers["Content-Security-Policy"]
    assert f"frame-ancestors {platform.url}" in page.headers["Content-Security-Policy"]
    # The continued login is redirected to the platform, which CSP's form-action also governs.
    form_action = next(d for d in page.headers["Content-Security-Policy"].split(";") if "form-action" in d)
    assert platform.url in form_action.split()
    assert "X-Frame-Options" not in page.headers


def test_the_login_sends_state_and_nonce_to_the_platform_and_sets_the_state_cookie(browser, platform):
    redirect = browser.login()

    location = redirect.headers["Location"]
    assert location.startswith(platform.url + "/auth?")
    assert "response_mode=form_post" in location and "prompt=none" in location and "nonce=" in location
    assert any(name.startswith("lti1p3-state-") for name in browser.http.cookies.keys())


def test_the_jwks_publishes_the_tool_key_and_never_the_private_part(browser):
    keys = browser.get("/lti/jwks/").json()["keys"]

    assert len(keys) == 1
    assert keys[0]["kty"] == "RSA" and keys[0]["alg"] == "RS256" and keys[0]["kid"]
    assert "d" not in keys[0] and "p" not in keys[0]


def test_a_learner_launch_makes_the_account_course_and_enrolment_and_lands_on_the_student_page(browser, registration):
    response = browser.launch(sub="learner-7", roles=LEARNER)

    assert response.status_code == 302 and response.headers["Location"] == "/"
    identity = Identity.objects.get(issuer=registration.issuer, subject="learner-7")
    user = identity.user
    assert user.username.startswith("lti-") and not user.has_usable_password()
    assert (user.first_name, user.last_name, user.email) == ("Ada", "Lovelace", "learner-7@lms.example")
    context = Context.objects.get(registration=registration, context_id="ctx-101")
    assert context.course.institution == registration.institution
    assert context.course.code == "NPU101"
    assert Enrollment.objects.get(user=user, course=context.course).role == Enrollment.Role.STUDENT
    assert browser.get("/").status_code == 200  # logged in


@pytest.mark.parametrize(
    ("roles", "expected"),
    [(INSTRUCTOR, Enrollment.Role.INSTRUCTOR), (TEACHING_ASSISTANT, Enrollment.Role.ASSISTANT)],
)
def test_a_teacher_launch_lands_on_the_course_console(browser, registration, roles, expected):
    response = browser.launch(sub="teacher-1", roles=roles)

    course = Context.objects.get(registration=registration).course
    assert response.status_code == 302 and response.headers["Location"] == f"/courses/{course.pk}/"
    assert Enrollment.objects.get(course=course).role == expected
    assert browser.get(f"/courses/{course.pk}/").status_code == 200


def test_a_second_launch_reuses_the_account_and_course_and_follows_a_role_change(browser, registration):
    browser.launch(sub="person-1", roles=LEARNER)
    browser.launch(sub="person-1", roles=TEACHING_ASSISTANT, given_name="Grace")

    assert get_user_model().objects.count() == 1
    assert Context.objects.count() == 1
    enrollment = Enrollment.objects.get()
    assert enrollment.role == Enrollment.Role.ASSISTANT and enrollment.user.first_name == "Grace"


def test_deep_link_then_launch_then_roster_sync_then_score(browser, platform, registration, catalogue, live_server):
    # 1. The instructor adds a lab through deep linking and picks a template, with a score.
    picker = browser.launch(sub="teacher-1", roles=INSTRUCTOR, **platform.deep_link_claims())
    assert picker.status_code == 200, picker.text
    assert "Jupyter small" in picker.text and "Jupyter large" in picker.text
    launch_id = hidden_inputs(picker.text)["launch_id"]
    chosen = catalogue[1]
    response = browser.post_form("/lti/deep-link/", picker.text, {"launch_id": launch_id, "template": chosen.pk, "score": "1"})
    assert response.status_code == 200, response.text
    assert '<script src="/static/lti/deep_link_response.js"' in response.text
    form = hidden_inputs(response.text)
    assert f'action="{platform.url}/deep-link-return"' in response.text
    # The platform receives the response and verifies it against the tool's JWKS.
    browser.http.post(platform.url + "/deep-link-return", data={"JWT": form["JWT"]}, timeout=10).raise_for_status()
    claims = platform.deep_link_responses[-1]
    assert claims[CLAIM + "message_type"] == "LtiDeepLinkingResponse"
    assert claims["https://purl.imsglobal.org/spec/lti-dl/claim/data"] == "opaque-platform-data"
    (item,) = claims["https://purl.imsglobal.org/spec/lti-dl/claim/content_items"]
    assert item["type"] == "ltiResourceLink" and item["url"] == live_server.url + "/lti/launch/"
    assert item["custom"]["npu_template"] == str(chosen.pk)
    assert item["lineItem"]["scoreMaximum"] == 1
    with pytest.raises(jwt.InvalidSignatureError):
        jwt.decode(form["JWT"], platform.key.public_key(), algorithms=["RS256"], audience=platform.url)
    course = Context.objects.get(registration=registration).course
    assert course.templates.filter(pk=chosen.pk).exists()
    CourseQuota.objects.create(course=course, core_percent=800, memory_mib=8 * 65536, instance_count=64)

    # 2. A student opens the link the platform made from the content item: the template launches.
    student = type(browser)(browser.tool_url, platform)
    lineitem = platform.url + "/lineitems/7"
    landing = student.launch(
        sub="student-1",
        roles=LEARNER,
        **{
            CLAIM + "resource_link": {"id": "link-from-deep-link"},
            CLAIM + "custom": item["custom"],
            "https://purl.imsglobal.org/spec/lti-ags/claim/endpoint": {"scope": AGS_SCOPES, "lineitem": lineitem},
        },
    )
    assert landing.status_code == 302 and landing.headers["Location"] == "/"
    session = LabSession.objects.get(student__lti_identities__subject="student-1")
    assert session.template == chosen and session.course == course
    assert chosen.name in student.get("/").text

    # 3. NRPS: the instructor syncs the roster from the platform.
    platform.members = [
        {"user_id": "teacher-1", "roles": INSTRUCTOR, "status": "Active", "name": "T"},
        {"user_id": "student-1", "roles": LEARNER, "status": "Active"},
        {"user_id": "student-2", "roles": LEARNER, "status": "Active", "given_name": "Bo", "email": "bo@lms.example"},
        {"user_id": "ta-1", "roles": TEACHING_ASSISTANT, "status": "Active"},
    ]
    roster = browser.get(f"/courses/{course.pk}/roster/")
    assert "Sync roster from the LMS" in roster.text
    synced = browser.post_form(f"/lti/courses/{course.pk}/roster-sync/", roster.text, {})
    assert synced.status_code == 302
    roles = {e.user.lti_identities.get().subject: e.role for e in Enrollment.objects.filter(course=course)}
    assert roles == {"teacher-1": "instructor", "student-1": "student", "student-2": "student", "ta-1": "assistant"}
    platform.members = platform.members[:2]  # student-2 and the TA leave the LMS course
    roster = browser.get(f"/courses/{course.pk}/roster/")
    browser.post_form(f"/lti/courses/{course.pk}/roster-sync/", roster.text, {})
    assert set(Enrollment.objects.filter(course=course).values_list("user__lti_identities__subject", flat=True)) == {
        "teacher-1",
        "student-1",
    }

    # 4. AGS: the session ends; the score task is queued on commit and posts, after the launch's
    # progress, 1.0 to the line item.
    broker = redis.Redis.from_url(settings.CELERY_BROKER_URL)
    broker.delete("celery")
    assert Score.objects.get(session=session, activity_progress="Completed").state == Score.State.PENDING
    assert session_stop(session_id=session.pk, reason=Reason.of("session.stopped_by", who="student-1"))
    assert any(b"lti.tasks.score_post" in message for message in broker.lrange("celery", 0, -1))
    assert score_post_task.apply(args=[str(session.pk)]).get() is True
    initialized, score = platform.scores
    assert (initialized["activityProgress"], initialized["gradingProgress"]) == ("Initialized", "NotReady")
    assert "scoreGiven" not in initialized
    assert score["_lineitem"] == "/lineitems/7"
    assert score["_content_type"] == "application/vnd.ims.lis.v1.score+json"
    assert (score["userId"], score["scoreGiven"], score["scoreMaximum"]) == ("student-1", 1.0, 1.0)
    assert score["activityProgress"] == "Completed" and score["gradingProgress"] == "FullyGraded"
    assert set(Score.objects.filter(session=session).values_list("state", flat=True)) == {Score.State.SENT}
    assert score_post_task.apply(args=[str(session.pk)]).get() is False  # sent once only
    assert len(platform.scores) == 2


@pytest.mark.parametrize("roles", [LEARNER, TEACHING_ASSISTANT], ids=["learner", "assistant"])
def test_a_deep_linking_request_by_anyone_but_an_instructor_makes_and_enrols_nobody(browser, platform, roles):
    def counts():
        return [m.objects.count() for m in (get_user_model(), Identity, Affiliation, Enrollment, Context, Course, AuditEvent)]

    active_key()  # the tool's first key is made (and audited) by the first launch, whoever it is
    before = counts()

    response = browser.launch(sub="learner-1", roles=roles, **platform.deep_link_claims())

    assert response.status_code == 403
    assert "Only the course" in response.text and "Nothing was changed in the portal" in response.text
    assert counts() == before
    assert browser.http.get(browser.tool_url + "/", allow_redirects=False, timeout=10).status_code == 302  # not logged in


@pytest.mark.parametrize("template", ["", "²", "not-a-number", "\x00"])
def test_a_deep_linking_answer_naming_no_template_asks_for_one(browser, platform, catalogue, template):
    picker = browser.launch(sub="teacher-1", roles=INSTRUCTOR, **platform.deep_link_claims())
    launch_id = hidden_inputs(picker.text)["launch_id"]

    response = browser.post_form("/lti/deep-link/", picker.text, {"launch_id": launch_id, "template": template})

    assert response.status_code == 400
    assert "Choose one of the course" in response.text

def test_a_launch_inside_the_lms_iframe_offers_the_portal_in_a_new_window(browser, platform):
    browser.http.headers["Sec-Fetch-Dest"] = "iframe"

    response = browser.launch(sub="learner-1", roles=LEARNER)

    assert response.status_code == 200
    assert 'href="/" target="_blank"' in response.text
    assert f"frame-ancestors {platform.url}" in response.headers["Content-Security-Policy"]
    assert "X-Frame-Options" not in response.headers
    del browser.http.headers["Sec-Fetch-Dest"]
    assert browser.get("/").status_code == 200  # the new window has the session
