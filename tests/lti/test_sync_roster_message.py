"""After "Sync roster" the instructor reads what changed, as the CSV import reports it: who was
added, whose role changed, whose name or e-mail was updated and who was removed, the first few
by name and the rest counted, in their language. Over real HTTP against a platform."""

from __future__ import annotations

import pytest
from django.conf import settings

from lti.models import Context
from tests.lti.platform import INSTRUCTOR, LEARNER, TEACHING_ASSISTANT

pytestmark = pytest.mark.django_db(transaction=True)


def member(sub: str, given: str, family: str, roles=LEARNER, email: str = "") -> dict:
    return {
        "user_id": sub,
        "roles": roles,
        "status": "Active",
        "given_name": given,
        "family_name": family,
        "email": email or f"{sub}@lms.example",
    }


TEACHER = member("teacher-1", "Ada", "Lovelace", INSTRUCTOR)
FIRST = [
    TEACHER,
    member("s-1", "Ann", "Lee"),
    member("s-2", "Bo", "Li"),
    member("s-3", "Cy", "Wu"),
    member("s-4", "Dee", "Zhou"),
    member("s-5", "Eve", "Qian"),
]
SECOND = [
    TEACHER,
    member("s-1", "Ann", "Lee", email="ann.lee@lms.example"),  # a new e-mail
    member("s-2", "Bo", "Li", TEACHING_ASSISTANT),  # a new role
    member("s-4", "Dee", "Zhou"),
    member("s-5", "Eve", "Qian"),
    member("s-6", "Fay", "Sun"),  # s-3 is gone
]


def sync(browser, course) -> str:
    roster = browser.get(f"/courses/{course.pk}/roster/")
    answer = browser.post_form(f"/lti/courses/{course.pk}/roster-sync/", roster.text, {})
    assert answer.status_code == 302
    return browser.get(f"/courses/{course.pk}/roster/").text


@pytest.mark.parametrize(
    ("language", "first", "second", "again"),
    [
        (
            "en",
            "Roster synced from the LMS: 5 added (Ann Lee, Bo Li, Cy Wu and 2 more).",
            "Roster synced from the LMS: 1 added (Fay Sun); 1 role changed (Bo Li: student → assistant); "
            "1 name or e-mail updated (Ann Lee: e-mail s-1@lms.example → ann.lee@lms.example); 1 removed (Cy Wu).",
            "Roster synced from the LMS: nothing changed.",
        ),
        (
            "zh-hans",
            "已从 LMS 同步名单：新增 5 人（Ann Lee、Bo Li、Cy Wu 等另外 2 人）。",
            "已从 LMS 同步名单：新增 1 人（Fay Sun）；角色变更 1 人（Bo Li：学生 → 助教）；"
            "姓名或邮箱更新 1 人（Ann Lee：电子邮箱：s-1@lms.example → ann.lee@lms.example）；移除 1 人（Cy Wu）。",
            "已从 LMS 同步名单：没有变化。",
        ),
    ],
)
def test_sync_roster_says_who_was_added_changed_updated_and_removed(browser, platform, language, first, second, again):
    browser.http.cookies.set(settings.LANGUAGE_COOKIE_NAME, language)
    browser.launch(sub="teacher-1", roles=INSTRUCTOR)
    course = Context.objects.get().course

    platform.members = FIRST
    after_first = sync(browser, course)
    platform.members = SECOND
    after_second = sync(browser, course)
    after_again = sync(browser, course)

    assert first in after_first
    assert second in after_second
    assert again in after_again
