"""The HTML and JSON views, through Django's test client: who may see and change what."""

from __future__ import annotations

import pytest
from django.contrib import admin
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.urls import reverse
from django.utils import timezone, translation

from labs.domain.reasons import Reason
from labs.domain.states import SessionState
from labs.models import LabSession
from labs.services.allocation import allocation_pass
from labs.services.sessions import session_launch, session_stop, session_transition
from tests.factories import PASSWORD, InstitutionFactory, TemplateFactory, UserFactory, course_with_students, node_with_cards

LOGIN = "/accounts/login/"
LAUNCH = "/sessions/launch/"
LIMIT_ERROR = "already have 1 of 1 sessions open"


def post_json(client: Client, url: str, data: dict | None = None, **extra):
    return client.post(url, data or {}, HTTP_ACCEPT="application/json", **extra)


def get_json(client: Client, url: str):
    return client.get(url, HTTP_ACCEPT="application/json")


def logged_in(user) -> Client:
    client = Client()
    client.force_login(user)
    return client


def launch_data(world, template=None) -> dict:
    return {"course": world["course"].pk, "template": (template or world["small"]).pk}


def running_session(world, student) -> LabSession:
    """A session of ``student`` admitted by a real allocation pass and then marked running."""
    session = session_launch(student=student, course=world["course"], template=world["small"])
    allocation_pass()
    assert session_transition(session.pk, to=SessionState.STARTING)
    LabSession.objects.filter(pk=session.pk).update(
        state=SessionState.RUNNING, access_url=f"http://n1:9000/lab?token={session.secret}", running_at=timezone.now()
    )
    session.refresh_from_db()
    return session


def stop_url(session) -> str:
    return f"/sessions/{session.pk}/stop/"


def detail_url(session) -> str:
    return f"/sessions/{session.pk}/"


def course_url(course) -> str:
    return f"/courses/{course.pk}/"


# --- login and anonymous access ---------------------------------------------------------------


def test_the_login_page_renders(db, client):
    response = client.get(LOGIN)
    assert response.status_code == 200
    assert 'name="username"' in response.content.decode()


def test_a_student_logs_in_with_their_password_and_lands_on_the_dashboard(world, client):
    student = world["students"][0]
    response = client.post(LOGIN, {"username": student.username, "password": PASSWORD})
    assert response.status_code == 302
    assert response["Location"] == "/"
    assert client.get("/").status_code == 200


def test_an_anonymous_visitor_is_sent_to_the_login_page(db, client):
    response = client.get("/")
    assert response.status_code == 302
    assert response["Location"] == f"{LOGIN}?next=/"


def test_an_anonymous_launch_is_sent_to_the_login_page_and_creates_nothing(world, client):
    response = post_json(client, LAUNCH, launch_data(world))
    assert response.status_code == 302
    assert response["Location"].startswith(LOGIN)
    assert LabSession.objects.count() == 0


# --- CSRF ---------------------------------------------------------------------------------------


def test_a_launch_without_a_csrf_token_is_forbidden_and_creates_nothing(world):
    client = Client(enforce_csrf_checks=True)
    client.force_login(world["students"][0])
    response = post_json(client, LAUNCH, launch_data(world))
    assert response.status_code == 403
    assert LabSession.objects.count() == 0


def test_a_launch_with_the_csrf_token_from_the_dashboard_is_accepted(world):
    client = Client(enforce_csrf_checks=True)
    client.force_login(world["students"][0])
    assert client.get("/").status_code == 200
    token = client.cookies["csrftoken"].value
    response = post_json(client, LAUNCH, launch_data(world), HTTP_X_CSRFTOKEN=token)
    assert response.status_code == 201
    assert LabSession.objects.count() == 1


# --- launch -------------------------------------------------------------------------------------


def test_a_json_launch_returns_the_queued_session(world):
    student = world["students"][0]
    response = post_json(logged_in(student), LAUNCH, launch_data(world))
    assert response.status_code == 201
    payload = response.json()["session"]
    session = LabSession.objects.get()
    assert payload["id"] == str(session.pk)
    assert payload["state"] == "queued"
    assert payload["access_url"] == ""
    assert payload["student"] == student.username
    assert payload["template"] == "small"
    assert session.student == student


@pytest.mark.parametrize(
    "data",
    [
        {},
        {"course": "1"},
        {"template": "1"},
        {"course": "abc", "template": "1"},
        {"course": "1", "template": "1.5"},
        {"course": "0", "template": "0"},
    ],
    ids=["nothing", "no-template", "no-course", "course-not-a-number", "template-not-an-integer", "zero"],
)
def test_a_malformed_launch_is_refused_with_a_clear_error(world, data):
    response = post_json(logged_in(world["students"][0]), LAUNCH, data)
    assert response.status_code == 400
    assert response.json() == {"error": "Choose a course and a template to launch."}
    assert LabSession.objects.count() == 0


def test_a_launch_in_a_course_the_student_is_not_enrolled_in_does_not_reveal_that_the_course_exists(world):
    other, other_templates, _, _ = course_with_students(1)
    client = logged_in(world["students"][0])
    existing = post_json(client, LAUNCH, {"course": other.pk, "template": other_templates[0].pk})
    missing = post_json(client, LAUNCH, {"course": other.pk + 1000, "template": other_templates[0].pk})
    assert existing.status_code == missing.status_code == 400
    assert existing.json() == missing.json()
    assert "not enrolled" in existing.json()["error"]
    assert other.code not in existing.json()["error"]
    assert LabSession.objects.count() == 0


def test_a_launch_of_a_template_not_offered_in_the_course_is_refused(world):
    huge = TemplateFactory(institution=world["course"].institution, name="huge", slug="huge")
    response = post_json(logged_in(world["students"][0]), LAUNCH, launch_data(world, huge))
    assert response.status_code == 400
    assert response.json()["error"] == f"huge is not offered in {world['course'].code}."
    assert LabSession.objects.count() == 0


def test_a_launch_of_another_institutions_template_does_not_reveal_its_name(world):
    elsewhere = TemplateFactory(institution=InstitutionFactory(slug="uni-other"), name="secret-project", slug="secret-project")
    response = post_json(logged_in(world["students"][0]), LAUNCH, launch_data(world, elsewhere))
    assert response.status_code == 400
    assert "secret-project" not in response.json()["error"]
    assert (
        response.json()
        == post_json(logged_in(world["students"][0]), LAUNCH, {"course": world["course"].pk, "template": 999999}).json()
    )
    assert LabSession.objects.count() == 0


def test_a_launch_over_the_concurrent_session_limit_is_refused(world):
    client = logged_in(world["students"][0])
    assert post_json(client, LAUNCH, launch_data(world)).status_code == 201
    response = post_json(client, LAUNCH, launch_data(world, world["medium"]))
    assert response.status_code == 400
    assert LIMIT_ERROR in response.json()["error"]
    assert LabSession.objects.count() == 1


def test_a_form_launch_redirects_to_the_dashboard_and_says_it_launched(world):
    client = logged_in(world["students"][0])
    response = client.post(LAUNCH, launch_data(world))
    assert response.status_code == 302
    assert response["Location"] == "/"
    page = client.get("/").content.decode()
    assert "Launched small; it starts as soon as an NPU share is free." in page
    assert LabSession.objects.count() == 1


def test_a_refused_form_launch_redirects_to_the_dashboard_and_says_why(world):
    client = logged_in(world["students"][0])
    client.post(LAUNCH, launch_data(world))
    response = client.post(LAUNCH, launch_data(world), follow=True)
    assert response.redirect_chain == [("/", 302)]
    assert LIMIT_ERROR in response.content.decode()
    assert LabSession.objects.count() == 1


# --- stop ---------------------------------------------------------------------------------------


def test_a_student_can_stop_their_queued_session(world):
    student = world["students"][0]
    session = session_launch(student=student, course=world["course"], template=world["small"])
    response = post_json(logged_in(student), stop_url(session))
    assert response.status_code == 200
    assert response.json() == {"ok": True}
    session.refresh_from_db()
    assert session.state == "stopped"
    assert session.reason == f"stopped by {student.username}"


def test_a_student_cannot_stop_another_students_session(world):
    owner, other = world["students"][:2]
    session = session_launch(student=owner, course=world["course"], template=world["small"])
    response = post_json(logged_in(other), stop_url(session))
    assert response.status_code == 404
    after = LabSession.objects.get(pk=session.pk)
    assert (after.state, after.version, after.reason) == (session.state, session.version, session.reason)


def test_the_course_instructor_can_stop_a_students_session(world):
    session = session_launch(student=world["students"][0], course=world["course"], template=world["small"])
    response = post_json(logged_in(world["instructor"]), stop_url(session))
    assert response.status_code == 200
    session.refresh_from_db()
    assert session.state == "stopped"
    assert session.reason == f"stopped by {world['instructor'].username}"


def test_an_instructor_of_another_course_cannot_stop_the_session(world):
    _, _, _, other_instructor = course_with_students(1)
    session = session_launch(student=world["students"][0], course=world["course"], template=world["small"])
    assert post_json(logged_in(other_instructor), stop_url(session)).status_code == 404
    assert LabSession.objects.get(pk=session.pk).state == "queued"


def test_stopping_a_session_twice_says_it_is_already_ending(world):
    student = world["students"][0]
    session = session_launch(student=student, course=world["course"], template=world["small"])
    client = logged_in(student)
    assert post_json(client, stop_url(session)).status_code == 200
    response = post_json(client, stop_url(session))
    assert response.status_code == 409
    assert "already ending" in response.json()["error"]


def test_stopping_a_running_session_moves_it_to_stopping(world):
    student = world["students"][0]
    session = running_session(world, student)
    assert post_json(logged_in(student), stop_url(session)).status_code == 200
    assert LabSession.objects.get(pk=session.pk).state == "stopping"


def test_a_form_stop_returns_to_a_local_next_page_but_never_to_another_site(world):
    session = session_launch(student=world["students"][0], course=world["course"], template=world["small"])
    other = session_launch(student=world["students"][1], course=world["course"], template=world["small"])
    client = logged_in(world["instructor"])
    local = client.post(stop_url(session), {"next": course_url(world["course"])})
    assert local.status_code == 302
    assert local["Location"] == course_url(world["course"])
    offsite = client.post(stop_url(other), {"next": "//evil.example/"})
    assert offsite.status_code == 302
    assert offsite["Location"] == "/"


def test_stop_only_accepts_post(world):
    student = world["students"][0]
    session = session_launch(student=student, course=world["course"], template=world["small"])
    assert logged_in(student).get(stop_url(session)).status_code == 405
    assert LabSession.objects.get(pk=session.pk).state == "queued"


# --- session detail -----------------------------------------------------------------------------


def test_the_owner_sees_the_access_url_of_their_running_session(world):
    student = world["students"][0]
    session = running_session(world, student)
    response = get_json(logged_in(student), detail_url(session))
    assert response.status_code == 200
    payload = response.json()["session"]
    assert payload["state"] == "running"
    assert payload["access_url"] == session.access_url
    assert payload["placement"] == "n1 / NPU 0"


def test_the_instructor_sees_the_session_but_not_its_access_url(world):
    session = running_session(world, world["students"][0])
    assert session.access_url
    response = get_json(logged_in(world["instructor"]), detail_url(session))
    assert response.status_code == 200
    payload = response.json()["session"]
    assert payload["state"] == "running"
    assert payload["student"] == world["students"][0].username
    assert payload["access_url"] == ""
    assert session.secret not in response.content.decode()


def test_another_student_cannot_see_a_session(world):
    session = running_session(world, world["students"][0])
    assert get_json(logged_in(world["students"][1]), detail_url(session)).status_code == 404


def test_an_unknown_session_is_not_found(world):
    response = get_json(logged_in(world["students"][0]), "/sessions/00000000-0000-0000-0000-000000000000/")
    assert response.status_code == 404


# --- course page --------------------------------------------------------------------------------


def test_the_instructor_sees_enrolment_quota_use_and_open_sessions(world):
    course, (s0, s1, s2, s3) = world["course"], world["students"]
    session_launch(student=s0, course=course, template=world["small"])
    ended = session_launch(student=s1, course=course, template=world["small"])
    assert session_stop(session_id=ended.pk, reason=Reason.of("session.stopped_by", who="tester"))
    allocation_pass()
    session_launch(student=s2, course=course, template=world["small"])

    response = logged_in(world["instructor"]).get(course_url(course))
    assert response.status_code == 200
    html = response.content.decode()
    assert 'data-testid="students">4<' in html
    # guaranteed by the quota
    assert "<td>128</td>" in html
    assert "<td>800</td>" in html
    assert "<td>512 GiB</td>" in html  # memory in GiB, never a raw MiB count
    # in use: only the admitted session holds an allocation
    assert 'data-testid="use-instances">1<' in html
    assert 'data-testid="use-core">5<' in html
    assert 'data-testid="use-memory">4 GiB<' in html
    assert s0.username in html
    assert s2.username in html
    assert s1.username not in html
    assert s3.username not in html


def test_a_student_of_the_course_cannot_open_the_course_page(world):
    assert logged_in(world["students"][0]).get(course_url(world["course"])).status_code == 404


def test_a_user_of_another_course_cannot_open_the_course_page(world):
    _, _, (other_student,), other_instructor = course_with_students(1)
    assert logged_in(other_instructor).get(course_url(world["course"])).status_code == 404
    assert logged_in(other_student).get(course_url(world["course"])).status_code == 404


# --- query counts -------------------------------------------------------------------------------


def count_queries(user, url: str) -> int:
    client = logged_in(user)
    with CaptureQueriesContext(connection) as queries:
        response = client.get(url)
    assert response.status_code == 200
    return len(queries)


def test_the_dashboard_query_count_does_not_grow_with_sessions(db):
    node_with_cards()
    course, (small, medium), (few, many), _ = course_with_students(2, quota={"sessions_per_student": 10})
    session_launch(student=few, course=course, template=small)
    mine = [session_launch(student=many, course=course, template=t) for t in (small, medium, small, medium, small)]
    allocation_pass()
    assert session_transition(mine[0].pk, to=SessionState.STARTING)
    assert session_stop(session_id=mine[1].pk, reason=Reason.of("session.stopped_by", who="tester"))
    assert session_stop(session_id=mine[2].pk, reason=Reason.of("session.stopped_by", who="tester"))
    # A queued one each: their queue places are read in one query however many sessions queue.
    session_launch(student=many, course=course, template=small)
    session_launch(student=few, course=course, template=small)

    count_queries(few, "/")  # warm per-process caches (content types, templates)
    assert count_queries(many, "/") == count_queries(few, "/")


def test_the_course_page_query_count_does_not_grow_with_sessions(db):
    node_with_cards()
    small_course, small_templates, small_students, small_teacher = course_with_students(2)
    big_course, big_templates, big_students, big_teacher = course_with_students(10)
    for course, templates, students in (
        (small_course, small_templates, small_students),
        (big_course, big_templates, big_students),
    ):
        for student in students:
            session_launch(student=student, course=course, template=templates[0])
    allocation_pass()
    assert LabSession.objects.filter(state="admitted").count() == 12

    count_queries(small_teacher, course_url(small_course))
    assert count_queries(big_teacher, course_url(big_course)) == count_queries(small_teacher, course_url(small_course))


# --- language -----------------------------------------------------------------------------------


def test_the_language_switch_sets_simplified_chinese_and_pages_still_render(world):
    session_launch(student=world["students"][0], course=world["course"], template=world["small"])
    with translation.override("en"):
        for user, url in ((world["students"][0], "/"), (world["instructor"], course_url(world["course"]))):
            client = logged_in(user)
            switched = client.post("/i18n/setlang/", {"language": "zh-hans", "next": url})
            assert switched.status_code == 302
            assert switched["Location"] == url
            page = client.get(url)
            assert page.status_code == 200
            assert '<html lang="zh-hans">' in page.content.decode()


def test_the_login_page_renders_in_simplified_chinese(db):
    client = Client()
    with translation.override("en"):
        assert client.post("/i18n/setlang/", {"language": "zh-hans", "next": LOGIN}).status_code == 302
        page = client.get(LOGIN)
    assert page.status_code == 200
    assert '<html lang="zh-hans">' in page.content.decode()


# --- admin --------------------------------------------------------------------------------------


@pytest.fixture
def superuser_client(db):
    return logged_in(UserFactory(username="root", is_staff=True, is_superuser=True))


def test_a_superuser_can_open_the_list_of_every_registered_model(world, superuser_client):
    running_session(world, world["students"][0])
    session_launch(student=world["students"][1], course=world["course"], template=world["small"])
    for model in admin.site._registry:
        url = reverse(f"admin:{model._meta.app_label}_{model._meta.model_name}_changelist")
        response = superuser_client.get(url)
        assert response.status_code == 200, url


def test_lab_sessions_cannot_be_added_in_the_admin(world, superuser_client):
    add_url = reverse("admin:labs_labsession_add")
    assert superuser_client.get(add_url).status_code == 403
    changelist = superuser_client.get(reverse("admin:labs_labsession_changelist")).content.decode()
    assert add_url not in changelist


def test_the_lab_session_admin_page_never_shows_the_secret(world, superuser_client):
    session = running_session(world, world["students"][0])
    response = superuser_client.get(reverse("admin:labs_labsession_change", args=[session.pk]))
    assert response.status_code == 200
    html = response.content.decode()
    assert world["students"][0].username in html
    assert "field-secret" not in html
    assert 'name="secret"' not in html
    # the access URL carries the token, so it must not be shown either
    assert session.secret not in html
