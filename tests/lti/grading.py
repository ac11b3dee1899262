"""Helpers of the grade tests: a scored launch, a lab made to run, what the platform was posted."""

from __future__ import annotations

from labs.domain.reasons import Reason
from labs.models import CourseQuota, LabSession
from labs.services.controller import reconcile_once
from labs.services.sessions import session_stop
from lti.models import Context
from tests.conftest import wait_for
from tests.factories import node_with_cards
from tests.lti.platform import AGS_SCOPES, CLAIM, INSTRUCTOR, LEARNER

AGS = "https://purl.imsglobal.org/spec/lti-ags/claim/endpoint"


def course_from_lms(browser, *, node: bool = True):
    """The instructor's launch makes the course; it gets a quota (and the cluster a node)."""
    browser.launch(sub="teacher-1", roles=INSTRUCTOR)
    course = Context.objects.get().course
    CourseQuota.objects.create(course=course, core_percent=800, memory_mib=8 * 65536, instance_count=64)
    if node:
        node_with_cards()
    return course


def student_launch(
    browser, platform, template, *, sub: str = "student-1", link: str = "link-9", ags: dict | None = None, **custom
):
    """A student's launch of a link that posts grades (its custom parameters ``custom``)."""
    student = type(browser)(browser.tool_url, platform)
    landing = student.launch(
        sub=sub,
        roles=LEARNER,
        **{
            CLAIM + "resource_link": {"id": link},
            CLAIM + "custom": {"npu_template": str(template.pk), "npu_score_on_end": "1", **custom},
            AGS: ags or {"scope": AGS_SCOPES, "lineitem": platform.url + "/lineitems/3"},
        },
    )
    assert landing.status_code == 302, landing.text
    return LabSession.objects.filter(student__lti_identities__subject=sub).latest("created_at")


def run(session: LabSession) -> LabSession:
    """The controller's rounds, in this process, until the lab runs (the simulator driver)."""

    def running() -> bool:
        reconcile_once()
        session.refresh_from_db()
        return session.state == "running"

    wait_for(running, timeout=30, interval=0.2, message="the lab running")
    return session


def progress(platform) -> list[tuple[str, str]]:
    return [(s["activityProgress"], s["gradingProgress"]) for s in platform.scores]


def end(session: LabSession) -> LabSession:
    """The student stops the lab; the controller's rounds, in this process, until it has stopped."""
    assert session_stop(session_id=session.pk, reason=Reason.of("session.stopped_by", who="student"))

    def stopped() -> bool:
        reconcile_once()
        session.refresh_from_db()
        return session.state == "stopped"

    wait_for(stopped, timeout=30, interval=0.2, message="the lab stopped")
    return session
