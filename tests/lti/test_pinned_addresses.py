"""Every call the tool makes to the platform (PyLTI1p3's keyset fetch, access token, NRPS roster,
AGS score) connects to the address its name resolved to, once: the platform's names are in the
test's DNS (tests/dns.py), which gives another address to any second query for a name."""

from __future__ import annotations

import pytest

from labs.domain.reasons import Reason
from labs.models import CourseQuota, Enrollment, LabSession
from labs.services.sessions import session_stop
from lti.models import Context, Identity, Registration
from lti.services import NRPS_CLAIM, roster_sync_from_platform
from lti.tasks import score_post_task
from tests.lti.platform import AGS_SCOPES, CLAIM, INSTRUCTOR, LEARNER

pytestmark = pytest.mark.django_db(transaction=True)
AGS_CLAIM = "https://purl.imsglobal.org/spec/lti-ags/claim/endpoint"


def named_url(platform, host: str, path: str) -> str:
    return platform.url.replace("127.0.0.1", host) + path


def call_by_name(registration, platform, *, keyset: str | None = None, token: str | None = None) -> None:
    """The registration calls the platform's keyset and token services by these names."""
    fields = {}
    if keyset:
        fields["keyset_url"] = named_url(platform, keyset, "/jwks")
    if token:
        fields["auth_token_url"] = named_url(platform, token, "/token")
        fields["auth_audience"] = platform.url + "/token"  # what the platform expects the assertion to name
    Registration.objects.filter(pk=registration.pk).update(**fields)


def test_the_keyset_is_fetched_from_the_address_its_name_resolved_to(browser, platform, registration, dns):
    dns.rebind("keys.lms.test", "127.0.0.1", "127.0.0.2")
    call_by_name(registration, platform, keyset="keys.lms.test")

    landing = browser.launch(sub="learner-1", roles=LEARNER)

    assert landing.status_code == 302, landing.text
    assert Identity.objects.filter(subject="learner-1").exists()
    assert dns.asked == ["keys.lms.test"]


def test_the_token_and_the_roster_are_fetched_from_the_addresses_their_names_resolved_to(browser, platform, registration, dns):
    dns.rebind("token.lms.test", "127.0.0.1", "127.0.0.2")
    dns.rebind("roster.lms.test", "127.0.0.1", "127.0.0.2")
    call_by_name(registration, platform, token="token.lms.test")
    roster = {"context_memberships_url": named_url(platform, "roster.lms.test", "/memberships"), "service_versions": ["2.0"]}
    browser.launch(sub="teacher-1", roles=INSTRUCTOR, **{NRPS_CLAIM: roster})
    platform.members = [
        {"user_id": "teacher-1", "roles": INSTRUCTOR, "status": "Active"},
        {"user_id": "s-9", "roles": LEARNER, "status": "Active"},
    ]

    report = roster_sync_from_platform(context_id=Context.objects.get().pk)

    assert report.added == 1
    assert Enrollment.objects.filter(user__lti_identities__subject="s-9").exists()
    assert dns.asked == ["token.lms.test", "roster.lms.test"]


def test_a_score_is_posted_to_the_address_its_name_resolved_to(browser, platform, registration, catalogue, dns):
    dns.rebind("token.lms.test", "127.0.0.1", "127.0.0.2")
    dns.rebind("scores.lms.test", "127.0.0.1", "127.0.0.2")
    call_by_name(registration, platform, token="token.lms.test")
    browser.launch(sub="teacher-1", roles=INSTRUCTOR)
    CourseQuota.objects.create(course=Context.objects.get().course, core_percent=800, memory_mib=8 * 65536, instance_count=64)
    student = type(browser)(browser.tool_url, platform)
    student.launch(
        sub="student-1",
        roles=LEARNER,
        **{
            CLAIM + "resource_link": {"id": "link-9"},
            CLAIM + "custom": {"npu_template": str(catalogue[0].pk), "npu_score_on_end": "1"},
            AGS_CLAIM: {"scope": AGS_SCOPES, "lineitem": named_url(platform, "scores.lms.test", "/lineitems/3")},
        },
    )
    session = LabSession.objects.get()
    assert score_post_task.apply(args=[str(session.pk)]).get() is True  # the launch's progress
    dns.asked.clear()  # each post resolves the names again: the score's is rebound as well
    session_stop(session_id=session.pk, reason=Reason.of("session.stopped_by", who="student-1"))

    assert score_post_task.apply(args=[str(session.pk)]).get() is True

    assert [score["_lineitem"] for score in platform.scores] == ["/lineitems/3"] * 2
    assert dns.asked == ["token.lms.test", "scores.lms.test"]


def test_a_keyset_name_that_rebinds_to_a_local_address_after_the_check_is_never_fetched(
    browser, platform, registration, dns, settings
):
    settings.OUTBOUND_ALLOW_PRIVATE_ADDRESSES = False
    settings.LTI_HTTP_TIMEOUT_SECONDS = 1
    dns.rebind("keys.lms.test", "93.184.215.14", "127.0.0.1")  # public when checked, then the platform on 127.0.0.1
    call_by_name(registration, platform, keyset="keys.lms.test")

    response = browser.launch(sub="learner-1", roles=LEARNER)

    assert response.status_code == 400 and "could not be verified" in response.text
    assert not Identity.objects.exists()
    assert dns.asked == ["keys.lms.test"]
