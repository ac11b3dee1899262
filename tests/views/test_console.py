"""The instructor console through Django's test client: set up a course from nothing and run it."""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta

import pytest
from django.core.exceptions import ValidationError
from django.core.files.uploadedfile import SimpleUploadedFile
from django.test import Client
from django.utils import timezone, translation

from labs.domain.reasons import Reason
from labs.drivers.kubernetes.builders import PodOptions, make_pod
from labs.drivers.kubernetes.profiles import get_profile
from labs.models import (
    Allocation,
    AllowedImage,
    Course,
    CourseQuota,
    Enrollment,
    Institution,
    InstitutionRole,
    LabSession,
    LabTemplate,
    UsageRecord,
)
from labs.services.allocation import allocation_pass
from labs.services.controller import launch_spec
from labs.services.courses import quota_set
from labs.services.sessions import LaunchRefused, session_launch, session_stop
from tests.drivers.kubernetes.test_builders import SESSION_ID, assert_golden
from tests.factories import TemplateFactory, UserFactory, affiliate, course_with_students, node_with_cards

GIB = 1024
VLLM_IMAGE = "registry.example.edu/npu-lab/vllm-ascend:v0.18.0"


def logged_in(user) -> Client:
    client = Client()
    client.force_login(user)
    return client


def url(course, part=""):
    return f"/courses/{course.pk}/{part}"


def quota_data(**overrides):
    data = {
        "instance_count": 32,
        "core_percent": 320,
        "memory_mib": "128",
        "sessions_per_student": 1,
        "max_session_minutes": 120,
        "cohort": "",
    }
    data.update(overrides)
    return {k: v for k, v in data.items() if v is not None}


def messages_of(response) -> list[str]:
    return [str(m) for m in response.context["messages"]] if response.context else []


# --- landing -------------------------------------------------------------------------------------


def test_an_instructor_lands_on_the_courses_they_teach_with_live_use(world):
    session_launch(student=world["students"][0], course=world["course"], template=world["medium"])
    allocation_pass()
    client = logged_in(world["instructor"])

    home = client.get("/")
    assert home.status_code == 302 and home["Location"] == "/teach/"
    page = client.get("/teach/").content.decode()
    assert world["course"].code in page
    assert 'data-use="instances">1<' in page and "8 GiB" in page and "4 students" in page
    use = client.get(url(world["course"], "use/")).json()
    assert use == {"instances": 1, "core_percent": 10, "memory_mib": 8 * GIB}


def test_a_student_lands_on_the_student_page(world):
    response = logged_in(world["students"][0]).get("/")
    assert response.status_code == 200 and "Launch a lab" in response.content.decode()


# --- course ---------------------------------------------------------------------------------------


def test_an_instructor_of_the_institution_creates_a_course_and_becomes_its_instructor(world):
    teacher = UserFactory(username="new-teacher")
    InstitutionRole.objects.create(user=teacher, institution=world["course"].institution, role="instructor")
    client = logged_in(teacher)

    response = client.post(
        "/teach/courses/new/",
        {"code": "AI201", "title": "Large models", "term": "2027 Spring", "starts_on": "2027-02-20", "ends_on": "2027-06-30"},
    )

    course = Course.objects.get(code="AI201")
    assert response.status_code == 302 and response["Location"] == url(course, "quota/")
    assert Enrollment.objects.get(course=course, user=teacher).role == "instructor"
    assert str(course.ends_on) == "2027-06-30"


def test_a_user_without_an_institution_role_cannot_create_courses(world):
    assert logged_in(world["students"][0]).get("/teach/courses/new/").status_code == 403
    assert logged_in(world["students"][0]).post("/teach/courses/new/", {"code": "X1"}).status_code == 403
    assert not Course.objects.filter(code="X1").exists()


@pytest.mark.parametrize(
    ("data", "field", "message"),
    [
        ({"code": "AI 101!"}, "code", "Use letters, digits"),
        ({"starts_on": "2027-03-01", "ends_on": "2027-02-01"}, "ends_on", "cannot be before the first day"),
        ({"code": "__same__"}, "code", "already exists in"),
    ],
)
def test_course_values_are_checked_with_a_clear_message(world, data, field, message):
    course = world["course"]
    if data.get("code") == "__same__":
        other = Course.objects.create(institution=course.institution, code="DUP1", title="t", term=course.term)
        data = {"code": other.code}
    values = {"code": course.code, "title": course.title, "term": course.term, **data}

    response = logged_in(world["instructor"]).post(url(course, "edit/"), values)

    assert response.status_code == 200
    assert any(message in str(e) for e in response.context["form"].errors[field])
    course.refresh_from_db()
    assert course.code != values["code"] or data.get("code") is None


def test_archiving_stops_open_sessions_with_a_notice_keeps_history_and_refuses_launches(world):
    course, (s0, s1, *_) = world["course"], world["students"]
    first = session_launch(student=s0, course=course, template=world["small"])
    second = session_launch(student=s1, course=course, template=world["small"])
    allocation_pass()
    client = logged_in(world["instructor"])

    unconfirmed = client.post(url(course, "archive/"), {})
    assert unconfirmed.status_code == 200 and not Course.objects.get(pk=course.pk).archived
    client.post(url(course, "archive/"), {"confirm": "yes"})

    course.refresh_from_db()
    assert course.archived
    for session in (first, second):
        session.refresh_from_db()
        assert session.state in ("stopped", "stopping")
        with translation.override("zh-hans"):
            assert session.reason == f"已停止：{course.code} 已在学期结束时归档"
        assert session.reason_code == "session.course_archived"
    with pytest.raises(LaunchRefused, match="archived"):
        session_launch(student=s0, course=course, template=world["small"])
    assert LabSession.objects.filter(course=course).count() == 2  # history kept
    # an archived course cannot be changed until it is open again
    assert client.post(url(course, "quota/"), quota_data()).status_code == 302
    assert CourseQuota.objects.get(course=course).instance_count == 128
    client.post(url(course, "archive/"), {"action": "unarchive"})
    course.refresh_from_db()
    assert not course.archived


# --- quota ------------------------------------------------------------------------------------------


def test_the_quota_is_entered_in_gib_and_stored_on_the_128_mib_grid(world):
    course = world["course"]
    response = logged_in(world["instructor"]).post(url(course, "quota/"), quota_data(memory_mib="100.5", cohort="ai-dept"))
    assert response.status_code == 302
    quota = CourseQuota.objects.get(course=course)
    assert (quota.instance_count, quota.core_percent, quota.memory_mib, quota.cohort) == (32, 320, 100 * GIB + 512, "ai-dept")
    page = logged_in(world["instructor"]).get(url(course, "quota/")).content.decode()
    assert 'value="100.5"' in page


@pytest.mark.parametrize(
    ("overrides", "field", "message"),
    [
        ({"memory_mib": "3.3"}, "memory_mib", "Memory is reserved in steps of 0.125 GiB: use 3.25 GiB or 3.375 GiB."),
        (
            {"instance_count": 129},
            "instance_count",
            "8 healthy cards hold at most 128 development instances (16 per card, 128 per node)",
        ),
        ({"core_percent": 801}, "core_percent", "have 800 % of AI Core in all"),
        ({"memory_mib": "513"}, "memory_mib", "have 512 GiB of memory in all"),
        ({"lend_instances": 5, "cohort": "x", "instance_count": 4}, "lend_instances", "cannot lend more than it is guaranteed"),
        ({"borrow_instances": 5}, "borrow_instances", "inside a cohort"),
        ({"sessions_per_student": 0}, "sessions_per_student", "greater than or equal to 1"),
        ({"max_session_minutes": 99999}, "max_session_minutes", "less than or equal to 10080"),
        ({"instance_count": -1}, "instance_count", "greater than or equal to 0"),
    ],
)
def test_every_quota_value_is_checked_with_a_clear_message_and_nothing_changes(world, overrides, field, message):
    course = world["course"]
    before = CourseQuota.objects.filter(course=course).values().get()

    response = logged_in(world["instructor"]).post(url(course, "quota/"), quota_data(**overrides))

    assert response.status_code == 200
    errors = [str(e) for e in response.context["form"].errors[field]]
    assert any(message in e for e in errors), errors
    assert CourseQuota.objects.filter(course=course).values().get() == before


def test_inference_templates_lower_the_instance_limit_to_8_per_card(world):
    course = world["course"]
    course.templates.add(TemplateFactory(institution=course.institution, scenario="inference", slug="inf"))
    response = logged_in(world["instructor"]).post(url(course, "quota/"), quota_data(instance_count=65))
    assert "at most 64 inference instances (8 per card, 64 per node)" in str(response.context["form"].errors["instance_count"])


def test_a_16_card_node_still_holds_at_most_128_development_and_64_inference_instances(world):
    course = world["course"]
    node_with_cards(name="n16", cards=16)  # beside the 8-card node: 24 cards, but 128 + 128 instances
    teacher = logged_in(world["instructor"])

    refused = teacher.post(url(course, "quota/"), quota_data(instance_count=257))
    assert "24 healthy cards hold at most 256 development instances (16 per card, 128 per node)" in str(
        refused.context["form"].errors["instance_count"]
    )
    assert teacher.post(url(course, "quota/"), quota_data(instance_count=256)).status_code == 302

    course.templates.add(TemplateFactory(institution=course.institution, scenario="inference", slug="inf"))
    refused = teacher.post(url(course, "quota/"), quota_data(instance_count=129))
    assert "24 healthy cards hold at most 128 inference instances (8 per card, 64 per node)" in str(
        refused.context["form"].errors["instance_count"]
    )


def test_the_institution_allotment_caps_the_sum_of_guarantees_and_the_page_shows_what_is_left(world):
    course = world["course"]
    other, *_ = course_with_students(0, code="OTHER1")  # same institution, 128 instances / 800 % / 512 GiB
    node_with_cards("n2")  # the cluster has room beside OTHER1's guarantee: the allotment is what refuses
    Institution.objects.filter(pk=course.institution_id).update(allot_instances=160, allot_core_percent=1000)

    page = logged_in(world["instructor"]).get(url(course, "quota/")).content.decode()
    assert "32 instances" in page and "200 %" in page  # left after OTHER1's guarantee
    response = logged_in(world["instructor"]).post(url(course, "quota/"), quota_data(instance_count=33))
    message = str(response.context["form"].errors["instance_count"])
    assert "may guarantee 160 in total; its other courses hold 128, so at most 32 is left" in message
    ok = quota_data(instance_count=32, core_percent=200)
    assert logged_in(world["instructor"]).post(url(course, "quota/"), ok).status_code == 302


def test_lowering_the_guarantee_below_use_stops_nothing_and_says_so(world):
    course = world["course"]
    sessions = [session_launch(student=s, course=course, template=world["small"]) for s in world["students"][:3]]
    allocation_pass()

    response = logged_in(world["instructor"]).post(url(course, "quota/"), quota_data(instance_count=1), follow=True)

    assert any("Nothing running is stopped" in m for m in messages_of(response))
    assert all(LabSession.objects.get(pk=s.pk).state == "admitted" for s in sessions)


# --- templates --------------------------------------------------------------------------------------


def test_templates_are_attached_from_the_catalogue_and_detached(world):
    course = world["course"]
    catalogue = TemplateFactory(institution=course.institution, name="big", slug="big", core_percent=50, memory_mib=32 * GIB)
    client = logged_in(world["instructor"])
    page = client.get(url(course, "templates/")).content.decode()
    assert "big" in page

    client.post(url(course, "templates/"), {"action": "attach", "template": catalogue.pk})
    assert course.templates.filter(pk=catalogue.pk).exists()
    client.post(url(course, "templates/"), {"action": "detach", "template": catalogue.pk})
    assert not course.templates.filter(pk=catalogue.pk).exists()
    other = TemplateFactory(name="foreign", slug="foreign")  # another institution's
    response = client.post(url(course, "templates/"), {"action": "attach", "template": other.pk}, follow=True)
    assert "not available" in " ".join(messages_of(response)) and not course.templates.filter(pk=other.pk).exists()


def test_an_instructor_creates_a_vllm_template_from_the_allow_list(world):
    course = world["course"]
    model = AllowedImage.objects.create(
        institution=course.institution, kind="vllm", reference="Qwen/Qwen2.5-7B-Instruct", image=VLLM_IMAGE
    )
    data = {
        "action": "create",
        "name": "Qwen 7B",
        "image": model.pk,
        "core_percent": 25,
        "memory_mib": "24",
        "scenario": "inference",
    }

    response = logged_in(world["instructor"]).post(url(course, "templates/"), data)

    assert response.status_code == 302
    template = LabTemplate.objects.get(name="Qwen 7B")
    assert (template.kind, template.model, template.memory_mib, template.course_id) == (
        "vllm",
        model.reference,
        24 * GIB,
        course.pk,
    )
    assert course.templates.filter(pk=template.pk).exists()


def test_a_vllm_template_made_in_the_console_runs_its_models_serving_image_in_its_pod(world):
    course = world["course"]
    model = AllowedImage.objects.create(
        institution=course.institution, kind="vllm", reference="Qwen/Qwen2.5-0.5B-Instruct", image=VLLM_IMAGE
    )
    form = {"name": "Qwen", "image": model.pk, "core_percent": 25, "memory_mib": "16", "scenario": "inference"}

    logged_in(world["instructor"]).post(url(course, "templates/"), {"action": "create", **form})
    template = LabTemplate.objects.get(name="Qwen")
    session = session_launch(student=world["students"][0], course=course, template=template)
    allocation_pass()
    session.refresh_from_db()
    # The session's own names (its id, secret, student, course) vary from run to run; the rest
    # is what the console stored.
    spec = replace(launch_spec(session), session_id=SESSION_ID, secret="s3cr3t", student="student", course_code="AI101")

    assert (template.kind, template.image, template.model) == ("vllm", VLLM_IMAGE, "Qwen/Qwen2.5-0.5B-Instruct")
    pod = make_pod(spec, profile=get_profile("flexnpu"), namespace="lab-ai101", options=PodOptions())
    assert pod["spec"]["containers"][0]["image"] == VLLM_IMAGE
    assert_golden("pod-flexnpu-vllm-console", pod)


def test_a_vllm_model_allowed_without_an_image_runs_in_the_sites_vllm_image(world, settings):
    settings.LAB_VLLM_IMAGE = "mirror.example.edu/ascend/vllm-ascend:v0.18.0"
    course = world["course"]
    operator = UserFactory(username="op")
    InstitutionRole.objects.create(user=operator, institution=course.institution, role="operator")
    allow = {"action": "image-add", "institution": course.institution.pk, "kind": "vllm", "reference": "Qwen/Qwen3-0.6B"}
    logged_in(operator).post("/ops/tenancy/", allow)
    model = AllowedImage.objects.get(institution=course.institution, reference="Qwen/Qwen3-0.6B")
    form = {"name": "Qwen3", "image": model.pk, "core_percent": 10, "memory_mib": "8", "scenario": "inference"}

    logged_in(world["instructor"]).post(url(course, "templates/"), {"action": "create", **form})
    template = LabTemplate.objects.get(name="Qwen3")
    session = session_launch(student=world["students"][0], course=course, template=template)
    allocation_pass()
    session.refresh_from_db()
    pod = make_pod(launch_spec(session), profile=get_profile("flexnpu"), namespace="lab-x", options=PodOptions())

    assert (template.image, template.model) == ("mirror.example.edu/ascend/vllm-ascend:v0.18.0", "Qwen/Qwen3-0.6B")
    assert pod["spec"]["containers"][0]["image"] == "mirror.example.edu/ascend/vllm-ascend:v0.18.0"


def test_a_template_is_refused_an_image_off_the_allow_list_or_more_memory_than_a_card(world):
    course = world["course"]
    foreign = AllowedImage.objects.create(
        institution=Institution.objects.create(name="B", slug="b"), kind="jupyter", reference="x"
    )
    mine = AllowedImage.objects.create(institution=course.institution, kind="jupyter", reference="jupyter/scipy")
    client = logged_in(world["instructor"])
    base = {"action": "create", "name": "t", "core_percent": 10, "memory_mib": "8", "scenario": "development"}

    off_list = client.post(url(course, "templates/"), {**base, "image": foreign.pk})
    too_big = client.post(url(course, "templates/"), {**base, "image": mine.pk, "memory_mib": "65"})

    assert "image" in off_list.context["form"].errors
    assert "The largest card has 64 GiB of memory" in str(too_big.context["form"].errors["memory_mib"])
    assert not LabTemplate.objects.filter(name="t").exists()


def test_the_preview_says_how_many_fit_on_the_cluster_and_in_the_quota(world):
    course = world["course"]
    session_launch(student=world["students"][0], course=course, template=world["medium"])  # 10 %, 8 GiB
    allocation_pass()
    client = logged_in(world["instructor"])

    small = client.get(url(course, "templates/preview/"), {"core_percent": 5, "memory_mib": "4", "scenario": "development"})
    # 8 cards x 16 instances, but the card holding 8 GiB takes only 14 more of 4 GiB (64 GiB);
    # the quota (512 GiB with 8 GiB used) admits 126 more of 4 GiB
    assert small.json() == {"cluster": 126, "cluster_empty": 128, "quota": 126, "quota_total": 128, "capped": False}
    big = client.get(url(course, "templates/preview/"), {"core_percent": 50, "memory_mib": "32", "scenario": "inference"})
    assert big.json()["cluster_empty"] == 16 and big.json()["quota"] == 15
    bad = client.get(url(course, "templates/preview/"), {"core_percent": 0, "memory_mib": "3.3", "scenario": "x"})
    assert bad.status_code == 400 and set(bad.json()["errors"]) == {"core_percent", "memory_mib", "scenario"}


# --- roster -----------------------------------------------------------------------------------------

CSV = "username,email,role\ns-new-1,new1@example.edu,student\nta-new,,assistant\n{existing},,student\n,,\nbad user!,,student\n"


def test_a_csv_import_previews_per_row_writes_nothing_until_confirmed_and_is_idempotent(world):
    course = world["course"]
    existing = world["students"][0].username
    text = CSV.format(existing=existing)
    client = logged_in(world["instructor"])
    members_before = Enrollment.objects.filter(course=course).count()

    preview = client.post(url(course, "roster/import/"), {"file": SimpleUploadedFile("r.csv", text.encode())})

    plan = preview.context["plan"]
    assert [(r.line, r.action) for r in plan.rows] == [(2, "create"), (3, "create"), (4, "unchanged"), (6, "error")]
    assert "not a valid username" in plan.rows[-1].message
    assert Enrollment.objects.filter(course=course).count() == members_before  # nothing written

    client.post(url(course, "roster/import/"), {"step": "confirm", "csv": text})
    assert Enrollment.objects.get(course=course, user__username="s-new-1").role == "student"
    assert Enrollment.objects.get(course=course, user__username="ta-new").role == "assistant"
    assert Enrollment.objects.filter(course=course).count() == members_before + 2

    again = client.post(url(course, "roster/import/"), {"file": SimpleUploadedFile("r.csv", text.encode())})
    assert [r.action for r in again.context["plan"].rows] == ["unchanged", "unchanged", "unchanged", "error"]
    assert not again.context["plan"].writable


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("name,role\nx,student\n", "username or email"),
        ("username,role\nnobody,professor\n", "unknown role professor"),
        ("email\nnobody@example.edu\n", "no account has this e-mail"),
        ("username,email\nx,not-an-email\n", "is not an e-mail address"),
        ("username\ndup\ndup\n", "listed twice"),
    ],
)
def test_csv_errors_are_explained_per_row_or_for_the_file(world, text, message):
    response = logged_in(world["instructor"]).post(
        url(world["course"], "roster/import/"), {"file": SimpleUploadedFile("r.csv", text.encode())}
    )
    plan = response.context["plan"]
    found = [plan.error] + [r.message for r in plan.rows if r.action == "error"]
    assert any(message in m for m in found), found


def test_a_gb18030_csv_from_a_chinese_spreadsheet_is_read(world):
    text = "username,first_name,role\nzhang3,张三,student\n"
    response = logged_in(world["instructor"]).post(
        url(world["course"], "roster/import/"), {"file": SimpleUploadedFile("r.csv", text.encode("gb18030"))}
    )
    assert response.context["plan"].rows[0].first_name == "张三"


def test_members_are_added_by_username_or_email_removed_and_promoted(world):
    course = world["course"]
    person = UserFactory(username="li", email="li@example.edu")
    affiliate([person], course.institution)  # an account of the course's institution
    client = logged_in(world["instructor"])

    client.post(url(course, "roster/"), {"action": "add", "identifier": "li@example.edu", "role": "student"})
    assert Enrollment.objects.get(course=course, user=person).role == "student"
    twice = client.post(url(course, "roster/"), {"action": "add", "identifier": "li", "role": "student"}, follow=True)
    assert "already a member" in " ".join(messages_of(twice))
    client.post(url(course, "roster/"), {"action": "role", "user": person.pk, "role": "assistant"})
    assert Enrollment.objects.get(course=course, user=person).role == "assistant"
    client.post(url(course, "roster/"), {"action": "remove", "user": person.pk})
    assert not Enrollment.objects.filter(course=course, user=person).exists()
    unknown = client.post(url(course, "roster/"), {"action": "add", "identifier": "ghost", "role": "student"}, follow=True)
    assert "ghost" in " ".join(messages_of(unknown))


def test_the_last_instructor_cannot_be_removed_or_demoted(world):
    course, me = world["course"], world["instructor"]
    client = logged_in(me)
    for data in ({"action": "remove", "user": me.pk}, {"action": "role", "user": me.pk, "role": "student"}):
        response = client.post(url(course, "roster/"), data, follow=True)
        assert "at least one instructor" in " ".join(messages_of(response))
    assert Enrollment.objects.get(course=course, user=me).role == "instructor"


# --- assistants and live sessions -------------------------------------------------------------------


@pytest.fixture
def assistant(world):
    user = UserFactory(username="ta")
    Enrollment.objects.create(user=user, course=world["course"], role="assistant")
    return user


def test_an_assistant_sees_everything_and_stops_sessions_but_changes_no_quota_or_roster(world, assistant):
    course = world["course"]
    client = logged_in(assistant)
    for part in ("", "templates/", "roster/", "usage/", "sessions/stop-all/"):
        assert client.get(url(course, part)).status_code == 200, part
    for part, data in (
        ("quota/", quota_data()),
        ("roster/", {"action": "add", "identifier": "ta", "role": "instructor"}),
        ("roster/import/", {"step": "confirm", "csv": "username\nta\n"}),
        ("templates/", {"action": "detach", "template": world["small"].pk}),
        ("edit/", {"code": "X"}),
        ("archive/", {"confirm": "yes"}),
    ):
        assert client.post(url(course, part), data).status_code == 403, part
    assert Enrollment.objects.get(user=assistant).role == "assistant"
    session = session_launch(student=world["students"][0], course=course, template=world["small"])
    client.post(url(course, "sessions/stop-all/"), {"confirm": "yes"})
    session.refresh_from_db()
    assert session.state == "stopped" and session.reason == "stopped by ta"


def test_stop_all_asks_for_confirmation_first(world):
    course = world["course"]
    session = session_launch(student=world["students"][0], course=course, template=world["small"])
    client = logged_in(world["instructor"])
    assert "1 session is open" in client.get(url(course, "sessions/stop-all/")).content.decode()
    client.post(url(course, "sessions/stop-all/"), {})
    session.refresh_from_db()
    assert session.state == "queued"


def test_live_sessions_filter_by_state_template_and_student(world):
    course, (s0, s1, *_) = world["course"], world["students"]
    session_launch(student=s0, course=course, template=world["small"])
    session_launch(student=s1, course=course, template=world["medium"])
    client = logged_in(world["instructor"])

    by_template = client.get(url(course), {"template": world["medium"].pk}).context["sessions"]
    by_student = client.get(url(course), {"student": s0.username}).context["sessions"]
    by_state = client.get(url(course), {"state": "running"}).context["sessions"]

    assert [s.student_id for s in by_template] == [s1.pk]
    assert [s.student_id for s in by_student] == [s0.pk]
    assert by_state == []


def test_session_filters_take_any_text_a_nul_byte_or_a_digit_int_refuses_included(world):
    course, (s0, *_) = world["course"], world["students"]
    session_launch(student=s0, course=course, template=world["small"])
    client = logged_in(world["instructor"])

    for template, student in (("²", ""), ("", s0.username + "\x00"), ("\x00", "\x00")):
        response = client.get(url(course), {"template": template, "student": student, "state": "\x00"})

        assert response.status_code == 200
        assert [s.student_id for s in response.context["sessions"]] == [s0.pk]


# --- usage ------------------------------------------------------------------------------------------


def test_usage_counts_npu_time_per_student_this_week_and_term_and_exports_csv(world):
    course, student = world["course"], world["students"][0]
    session = session_launch(student=student, course=course, template=world["medium"])  # 10 %, 8 GiB
    allocation_pass()
    two_hours_ago = timezone.now() - timedelta(hours=2)
    LabSession.objects.filter(pk=session.pk).update(created_at=two_hours_ago)
    Allocation.objects.filter(session=session).update(created_at=two_hours_ago)  # admitted two hours ago
    client = logged_in(world["instructor"])
    open_row = next(u for u in client.get(url(course, "usage/")).context["usage"].students if u.username == student.username)
    assert (round(open_row.core_hours_term, 1), round(open_row.gib_hours_term, 1)) == (20.0, 16.0)  # held up to now
    session_stop(session_id=session.pk, reason=Reason.of("session.stopped_by", who="test"))  # released: its record
    assert UsageRecord.objects.get(session=session).core_percent_seconds == pytest.approx(10 * 7200, abs=10)

    usage = client.get(url(course, "usage/")).context["usage"]
    row = next(u for u in usage.students if u.username == student.username)
    assert (row.sessions_term, round(row.core_hours_term, 1), round(row.gib_hours_term, 1)) == (1, 20.0, 16.0)
    assert round(sum(usage.core_hours_by_day), 1) == 20.0

    csv_response = client.get(url(course, "usage/"), {"format": "csv"})
    assert csv_response["Content-Type"].startswith("text/csv")
    lines = csv_response.content.decode().splitlines()
    assert lines[0].startswith("username,name,sessions_this_week")
    assert any(line.startswith(f"{student.username},,") and ",20.00,16.00" in line for line in lines)


def test_a_course_used_before_its_first_day_counts_that_use_in_its_term(world):
    course = world["course"]
    Course.objects.filter(pk=course.pk).update(starts_on=timezone.localdate() + timedelta(days=60))
    session_launch(student=world["students"][0], course=course, template=world["small"])
    usage = logged_in(world["instructor"]).get(url(course, "usage/")).context["usage"]
    assert usage.term_start.date() == timezone.localdate()
    assert next(u for u in usage.students if u.username == world["students"][0].username).sessions_term == 1


def test_a_vllm_template_gets_the_host_defaults_of_its_kind_and_a_jupyter_one_its_own(world):
    course = world["course"]
    model = AllowedImage.objects.create(
        institution=course.institution, kind="vllm", reference="Qwen/Qwen2.5-0.5B-Instruct", image=VLLM_IMAGE
    )
    lab = AllowedImage.objects.create(institution=course.institution, kind="jupyter", reference="jupyter/scipy")
    client = logged_in(world["instructor"])
    base = {"action": "create", "core_percent": 10, "memory_mib": "8", "scenario": "development"}

    client.post(url(course, "templates/"), {**base, "name": "small model", "image": model.pk})
    client.post(
        url(course, "templates/"),
        {**base, "name": "big data", "image": lab.pk, "host_memory_request_mib": "16", "host_memory_limit_mib": "32"},
    )

    served = LabTemplate.objects.get(name="small model")
    assert (served.cpu_request_millicores, served.host_memory_request_mib, served.host_memory_limit_mib) == (2000, 8192, 16384)
    data = LabTemplate.objects.get(name="big data")
    assert (data.cpu_request_millicores, data.host_memory_request_mib, data.host_memory_limit_mib) == (500, 16384, 32768)


def test_a_template_is_refused_a_host_limit_below_its_request_or_more_memory_than_any_node_has(world, settings):
    course = world["course"]
    settings.LAB_NODE_RESERVE_MEMORY_MIB = 12 * 1024
    world["node"].host_memory_mib = 44 * 1024  # 32 GiB for lab sessions
    world["node"].save(update_fields=["host_memory_mib"])
    lab = AllowedImage.objects.create(institution=course.institution, kind="jupyter", reference="jupyter/scipy")
    client = logged_in(world["instructor"])
    base = {"action": "create", "name": "t", "image": lab.pk, "core_percent": 10, "memory_mib": "8", "scenario": "development"}

    below = client.post(url(course, "templates/"), {**base, "cpu_request_millicores": "2", "cpu_limit_millicores": "1"})
    beyond = client.post(
        url(course, "templates/"), {**base, "host_memory_request_mib": "40", "host_memory_limit_mib": "40"}
    )

    assert "must be at least the request" in str(below.context["form"].errors["cpu_limit_millicores"])
    assert "No node can give 40 GiB of memory; the largest has 32 GiB" in str(
        beyond.context["form"].errors["host_memory_request_mib"]
    )
    assert not LabTemplate.objects.filter(name="t").exists()


def test_the_quota_may_cap_the_courses_host_cpu_and_memory_and_empty_means_no_cap(world):
    course = world["course"]
    client = logged_in(world["instructor"])

    capped = client.post(url(course, "quota/"), quota_data(host_cpu_cap_millicores="64", host_memory_cap_mib="256"))
    quota = CourseQuota.objects.get(course=course)
    assert capped.status_code == 302
    assert (quota.host_cpu_cap_millicores, quota.host_memory_cap_mib) == (64000, 262144)
    refused = client.post(url(course, "quota/"), quota_data(host_memory_cap_mib=-1))
    assert "host_memory_cap_mib" in refused.context["form"].errors
    client.post(url(course, "quota/"), quota_data())
    quota.refresh_from_db()
    assert (quota.host_cpu_cap_millicores, quota.host_memory_cap_mib) == (None, None)


@pytest.mark.parametrize("language", ["en", "zh-hans"])
def test_a_cohort_another_institution_uses_is_refused_in_the_readers_language(world, language):
    """Courses of one cohort lend each other idle quota: a course must not borrow another institution's guarantee."""
    from tests.factories import CourseFactory, CourseQuotaFactory, InstitutionFactory

    CourseQuotaFactory(course=CourseFactory(institution=InstitutionFactory(slug="elsewhere")), cohort="their-dept")
    course = world["course"]
    before = CourseQuota.objects.filter(course=course).values().get()
    client = logged_in(world["instructor"])
    client.cookies["django_language"] = language

    response = client.post(url(course, "quota/"), quota_data(cohort="their-dept"))

    assert response.status_code == 200
    expected = {"en": "Another institution has a cohort of this name", "zh-hans": "另一机构已有同名的资源组"}[language]
    assert expected in response.content.decode()
    assert CourseQuota.objects.filter(course=course).values().get() == before
    with pytest.raises(ValidationError):  # the service refuses it too (the admin's model check likewise)
        quota_set(course=course, values={**before_values(before), "cohort": "their-dept"}, in_use=None)


def before_values(row: dict) -> dict:
    from labs.services.courses import QUOTA_FIELDS

    return {name: row[name] for name in QUOTA_FIELDS}
