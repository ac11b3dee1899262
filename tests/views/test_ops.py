"""The operator console through Django's test client: see the cards, run the fleet, keep tenants apart."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.contrib.auth.models import Permission
from django.test import Client

from labs.models import AllowedImage, AuditEvent, Card, Institution, InstitutionRole, LabSession, LabTemplate, Node, RepairEvent
from labs.services.allocation import allocation_pass
from labs.services.catalog import templates_attachable
from labs.services.sessions import session_launch
from tests.factories import UserFactory, course_with_students
from webhooks.models import Subscription
from webhooks.services import subscription_create

GIB = 1024


def client_for(user) -> Client:
    client = Client()
    if user is not None:
        client.force_login(user)
    return client


@pytest.fixture
def people(world):
    institution = world["course"].institution
    operator = UserFactory(username="op")
    InstitutionRole.objects.create(user=operator, institution=institution, role="operator")
    foreign = UserFactory(username="foreign-op")
    elsewhere = Institution.objects.create(name="Elsewhere University", slug="elsewhere")
    InstitutionRole.objects.create(user=foreign, institution=elsewhere, role="operator")
    platform = UserFactory(username="platform")
    platform.user_permissions.add(Permission.objects.get(codename="operate_platform"))
    return {
        "anonymous": None,
        "student": world["students"][0],
        "instructor": world["instructor"],
        "foreign_operator": foreign,
        "operator": operator,
        "platform": platform,
    }


@pytest.fixture
def running(world):
    session = session_launch(student=world["students"][1], course=world["course"], template=world["medium"])
    allocation_pass()
    session.refresh_from_db()
    return session


EXPECTED = {
    # page: anonymous, student, instructor, foreign operator, operator, platform
    "ops/": (302, 404, 404, 200, 200, 200),
    "ops/cluster.json": (302, 404, 404, 200, 200, 200),
    "ops/cards/{card}/": (302, 404, 404, 200, 200, 200),
    "ops/cards/{card}/health/": (302, 404, 404, 403, 403, 200),
    "ops/nodes/{node}/drain/": (302, 404, 404, 403, 403, 200),
    "ops/nodes/{node}/evacuate/": (302, 404, 404, 403, 403, 200),
    "ops/sessions/{session}/stop/": (302, 404, 404, 404, 200, 200),
    "ops/tenancy/": (302, 404, 404, 200, 200, 200),
    "ops/repairs/": (302, 404, 404, 200, 200, 200),
    "ops/audit/": (302, 404, 404, 200, 200, 200),
    "ops/usage/": (302, 404, 404, 200, 200, 200),
    "ops/webhooks/": (302, 404, 404, 200, 200, 200),
    "ops/webhooks/{webhook}/": (302, 404, 404, 404, 200, 200),
}
VISITORS = ("anonymous", "student", "instructor", "foreign_operator", "operator", "platform")


@pytest.mark.parametrize("visitor", VISITORS)
def test_every_operator_page_answers_each_visitor_as_expected(world, people, running, visitor):
    card = running.allocation.card
    webhook = subscription_create(
        institution=world["course"].institution, url="https://lms.example.edu/h", event_types=["session.ended"]
    )[0]
    client = client_for(people[visitor])
    for page, statuses in EXPECTED.items():
        url = "/" + page.format(card=card.pk, node=card.node_id, session=running.pk, webhook=webhook.pk)
        response = client.get(url)
        assert response.status_code == statuses[VISITORS.index(visitor)], (visitor, url)
        if response.status_code in (403, 404):
            assert running.student.username not in response.content.decode()


@pytest.mark.parametrize("visitor", VISITORS)
def test_every_operator_action_is_done_only_by_whom_it_should_be(world, people, running, visitor):
    card = running.allocation.card
    node = card.node
    client = client_for(people[visitor])
    reason = {"reason": "maintenance", "confirm": "on"}
    client.post(f"/ops/nodes/{node.pk}/drain/", reason)
    client.post(f"/ops/cards/{card.pk}/health/", reason)
    client.post(f"/ops/sessions/{running.pk}/stop/", reason)
    node.refresh_from_db()
    card.refresh_from_db()
    running.refresh_from_db()
    assert node.drained == (visitor == "platform")
    assert card.disabled == (visitor == "platform")
    assert (running.state == "stopped") == (visitor in ("operator", "platform"))  # admitted: it ends at once
    assert AuditEvent.objects.count() == {"platform": 3, "operator": 1}.get(visitor, 0)


def test_an_action_needs_a_reason_and_a_confirmation(world, people, running):
    node = running.allocation.card.node
    response = client_for(people["platform"]).post(f"/ops/nodes/{node.pk}/drain/", {"reason": "", "confirm": ""})
    assert response.status_code == 200
    assert set(response.context["form"].errors) == {"reason", "confirm"}
    node.refresh_from_db()
    assert not node.drained


def test_a_drained_node_takes_no_new_session_while_its_running_one_goes_on_then_undrained_it_does(world, people, running):
    node = running.allocation.card.node
    client = client_for(people["platform"])
    page = client.get(f"/ops/nodes/{node.pk}/drain/").content.decode()
    assert "1 session runs there now" in page

    client.post(f"/ops/nodes/{node.pk}/drain/", {"reason": "firmware", "confirm": "on"})
    waiting = session_launch(student=world["students"][2], course=world["course"], template=world["small"])
    allocation_pass()
    waiting.refresh_from_db()
    running.refresh_from_db()
    assert waiting.state == "queued" and running.state == "admitted"
    assert "1 session left to end" in client.get("/ops/").content.decode()

    client.post(f"/ops/nodes/{node.pk}/drain/", {"reason": "done", "confirm": "on"})
    allocation_pass()
    waiting.refresh_from_db()
    assert waiting.state == "admitted"
    assert list(AuditEvent.objects.order_by("id").values_list("action", "actor_name")) == [
        ("node.drain", "platform"),
        ("node.undrain", "platform"),
    ]


def test_a_card_marked_unhealthy_takes_nothing_new_whatever_its_agent_says(world, people):
    cards = Card.objects.filter(node=world["node"]).order_by("index")
    client = client_for(people["platform"])
    for card in cards[:7]:
        client.post(f"/ops/cards/{card.pk}/health/", {"reason": "ECC errors", "confirm": "on"})
    session = session_launch(student=world["students"][0], course=world["course"], template=world["small"])
    allocation_pass()
    session.refresh_from_db()
    assert session.allocation.card.index == 7
    assert Card.objects.get(pk=cards[0].pk).disabled_reason == "ECC errors"


def test_the_cluster_shows_each_card_and_its_instances_by_name_only_to_their_institution(world, people, running):
    card = running.allocation.card
    state = client_for(people["operator"]).get("/ops/cluster.json").json()
    shown = next(c for n in state["nodes"] for c in n["cards"] if c["id"] == card.pk)
    assert (shown["core_percent"], shown["memory_reserved_mib"], shown["instances"], shown["cap"]) == (10, 8 * GIB, 1, 16)
    assert shown["level"] == 1 and not shown["full"]

    own = client_for(people["operator"]).get(f"/ops/cards/{card.pk}/").content.decode()
    foreign = client_for(people["foreign_operator"]).get(f"/ops/cards/{card.pk}/").content.decode()
    assert running.student.username in own
    assert running.student.username not in foreign and "a session of" in foreign


def test_fragmentation_is_summarised(world, people):
    course, (small, _), students, _ = course_with_students(16, code="FRAG", quota={"instance_count": 64})
    for student in students:
        session_launch(student=student, course=course, template=small)
    allocation_pass()  # binpack: 16 small instances fill card 0's instance slots
    page = client_for(people["platform"]).get("/ops/").content.decode()
    assert "Stranded: 20 % AI Core and 0 GiB free on 1 card that can take nothing more." in page
    assert "n1 / NPU 0: holds its maximum of 16 instances" in page


@pytest.mark.parametrize(("language", "label"), [("en", "Memory in total (GiB)"), ("zh-hans", "显存总量（GiB）")])
def test_the_allotments_memory_is_typed_and_shown_in_gib_and_kept_in_mib(world, people, language, label):
    """GiB in every form: the tenancy page's allotment too, not MiB; the model keeps MiB."""
    institution = world["course"].institution
    platform = client_for(people["platform"])
    saved = platform.post(
        "/ops/tenancy/",
        {"action": "allotment", "institution": institution.pk, "allot_memory_mib": "1.5"},
        HTTP_ACCEPT_LANGUAGE=language,
        follow=True,
    )
    institution.refresh_from_db()
    assert institution.allot_memory_mib == 1536
    page = saved.content.decode()
    assert label in page and "MiB" not in page
    assert f'step="0.125" name="allot_memory_mib" id="allot-{institution.pk}-allot_memory_mib" value="1.5"' in page


def test_operators_manage_tenancy_within_their_rights(world, people):
    institution = world["course"].institution
    platform, operator = client_for(people["platform"]), client_for(people["operator"])

    operator.post(
        "/ops/tenancy/",
        {"action": "image-add", "institution": institution.pk, "kind": "vllm", "reference": "Qwen/Qwen2.5-7B-Instruct"},
    )
    assert AllowedImage.objects.filter(institution=institution, reference="Qwen/Qwen2.5-7B-Instruct").exists()
    bad = operator.post(
        "/ops/tenancy/",
        {"action": "image-add", "institution": institution.pk, "kind": "vllm", "reference": "has space"},
        follow=True,
    )
    assert "no spaces" in bad.content.decode()
    elsewhere = Institution.objects.get(slug="elsewhere")
    assert (
        operator.post(
            "/ops/tenancy/", {"action": "image-add", "institution": elsewhere.pk, "kind": "jupyter", "reference": "x"}
        ).status_code
        == 404
    )
    assert (
        operator.post("/ops/tenancy/", {"action": "allotment", "institution": institution.pk, "allot_instances": 1}).status_code
        == 403
    )

    platform.post(
        "/ops/tenancy/", {"action": "allotment", "institution": institution.pk, "allot_instances": 200, "allot_memory_mib": "4"}
    )
    institution.refresh_from_db()
    assert (institution.allot_instances, institution.allot_memory_mib) == (200, 4096)
    off_grid = platform.post(
        "/ops/tenancy/", {"action": "allotment", "institution": institution.pk, "allot_memory_mib": "0.9"}, follow=True
    )
    assert "steps of 0.125 GiB: use 0.875 GiB or 1 GiB" in off_grid.content.decode()
    institution.refresh_from_db()
    assert institution.allot_memory_mib == 4096
    platform.post(
        "/ops/tenancy/", {"action": "operator-add", "institution": institution.pk, "username": world["instructor"].username}
    )
    assert InstitutionRole.objects.filter(user=world["instructor"], role="operator").exists()
    actions = set(AuditEvent.objects.values_list("action", flat=True))
    assert {"allowlist.add", "institution.allotment", "operator.add"} <= actions


def test_a_vllm_model_is_allowed_with_its_serving_image_or_the_sites_and_bad_images_are_refused(world, people, settings):
    settings.LAB_VLLM_IMAGE = "mirror.example.edu/ascend/vllm-ascend:v0.18.0"
    institution = world["course"].institution
    operator = client_for(people["operator"])

    def allow(kind: str, reference: str, image: str) -> str:
        body = {"action": "image-add", "institution": institution.pk, "kind": kind, "reference": reference, "image": image}
        return operator.post("/ops/tenancy/", body, follow=True).content.decode()

    allow("vllm", "Qwen/Qwen3-8B", "quay.io/ascend/vllm-ascend:v0.18.0")
    allow("vllm", "Qwen/Qwen3-0.6B", "")
    spaced = allow("vllm", "Qwen/Qwen3-1.7B", "quay.io/ascend/vllm ascend:v1")
    a_model = allow("vllm", "Qwen/Qwen3-32B", "Qwen/Qwen3-32B")
    jupyter = allow("jupyter", "quay.io/jupyter/scipy-notebook", "quay.io/ascend/vllm-ascend:v0.18.0")

    allowed = dict(AllowedImage.objects.filter(institution=institution).values_list("reference", "image"))
    assert allowed == {
        "Qwen/Qwen3-8B": "quay.io/ascend/vllm-ascend:v0.18.0",
        "Qwen/Qwen3-0.6B": "mirror.example.edu/ascend/vllm-ascend:v0.18.0",
    }
    assert "“quay.io/ascend/vllm ascend:v1” is not a container image reference" in spaced
    assert "“Qwen/Qwen3-32B” is not a container image reference" in a_model
    assert "A JupyterLab image needs no serving image" in jupyter
    page = operator.get("/ops/tenancy/").content.decode()
    assert "mirror.example.edu/ascend/vllm-ascend:v0.18.0" in page and 'name="image"' in page
    added = AuditEvent.objects.get(action="allowlist.add", target="vllm Qwen/Qwen3-8B")
    assert added.after == {"kind": "vllm", "reference": "Qwen/Qwen3-8B", "image": "quay.io/ascend/vllm-ascend:v0.18.0"}

    prefix = f"t{institution.pk}"
    model = AllowedImage.objects.get(institution=institution, reference="Qwen/Qwen3-0.6B")
    fields = {"name": "Qwen3 small", "image": model.pk, "core_percent": 10, "memory_mib": "8", "scenario": "inference"}
    operator.post(
        "/ops/tenancy/",
        {"action": "template-add", "institution": institution.pk, **{f"{prefix}-{k}": v for k, v in fields.items()}},
    )
    made = LabTemplate.objects.get(institution=institution, name="Qwen3 small")
    assert (made.kind, made.image, made.model) == ("vllm", "mirror.example.edu/ascend/vllm-ascend:v0.18.0", "Qwen/Qwen3-0.6B")


def test_tenancy_repeats_change_nothing_and_removals_are_audited(world, people, settings):
    institution = world["course"].institution
    platform = client_for(people["platform"])
    add = {"action": "image-add", "institution": institution.pk, "kind": "vllm", "reference": "Qwen/Qwen2.5-0.5B"}
    platform.post("/ops/tenancy/", add)
    again = platform.post("/ops/tenancy/", add, follow=True)
    assert "on the allow-list already" in again.content.decode()
    image = AllowedImage.objects.get(institution=institution, reference="Qwen/Qwen2.5-0.5B")
    assert AuditEvent.objects.filter(action="allowlist.add", target="vllm Qwen/Qwen2.5-0.5B").count() == 1

    platform.post("/ops/tenancy/", {"action": "image-remove", "institution": institution.pk, "image": image.pk})
    assert not AllowedImage.objects.filter(pk=image.pk).exists()
    removed = AuditEvent.objects.get(action="allowlist.remove")
    assert removed.before == {"kind": "vllm", "reference": "Qwen/Qwen2.5-0.5B", "image": settings.LAB_VLLM_IMAGE}

    who = {"institution": institution.pk, "username": world["instructor"].username}
    platform.post("/ops/tenancy/", {"action": "operator-add", **who})
    platform.post("/ops/tenancy/", {"action": "operator-add", **who})
    assert AuditEvent.objects.filter(action="operator.add").count() == 1
    platform.post("/ops/tenancy/", {"action": "operator-remove", **who})
    platform.post("/ops/tenancy/", {"action": "operator-remove", **who})
    assert not InstitutionRole.objects.filter(user=world["instructor"], role="operator").exists()
    assert AuditEvent.objects.filter(action="operator.remove").count() == 1


def test_repairs_and_audit_are_filtered_and_scoped_to_the_institution(world, people, running):
    # A guarantee that leaves room for the one set below: the cluster is one node.
    small_quota = {"instance_count": 8, "core_percent": 80, "memory_mib": 32 * 1024}
    other_course, (other_small, _), (other_student,), _ = course_with_students(1, code="OTHER2", quota=small_quota)
    other_course.institution = Institution.objects.get(slug="elsewhere")
    other_course.save()
    theirs = session_launch(student=other_student, course=other_course, template=other_small)
    RepairEvent.objects.create(kind="card_rebound", node=world["node"], session=running, message="ours-rebound-x")
    RepairEvent.objects.create(kind="card_rebound", node=world["node"], session=theirs, message="theirs-rebound-y")
    RepairEvent.objects.create(kind="node_unavailable", node=world["node"], message="agent unreachable")
    client_for(world["instructor"]).post(
        f"/courses/{world['course'].pk}/quota/",
        {"instance_count": 8, "core_percent": 80, "memory_mib": "32", "sessions_per_student": 1, "max_session_minutes": 60},
    )

    mine = client_for(people["operator"]).get("/ops/repairs/").content.decode()
    assert "ours-rebound-x" in mine and "agent unreachable" in mine and "theirs-rebound-y" not in mine
    filtered = client_for(people["platform"]).get("/ops/repairs/", {"kind": "node_unavailable"}).content.decode()
    assert "agent unreachable" in filtered and "rebound-" not in filtered

    audit = client_for(people["operator"]).get("/ops/audit/").context["page"]
    event = next(e for e in audit if e.action == "quota.set")
    assert event.actor_name == world["instructor"].username
    assert event.before["instance_count"] == 128 and event.after["instance_count"] == 8
    assert not list(client_for(people["foreign_operator"]).get("/ops/audit/").context["page"])



def test_repair_and_audit_filters_with_a_nul_byte_find_what_the_rest_of_the_text_finds(world, people, running):
    RepairEvent.objects.create(kind="node_unavailable", node=world["node"], message="agent unreachable")
    client = client_for(people["platform"])

    repairs = client.get("/ops/repairs/", {"kind": "node_unavailable\x00", "node": "\x00" + world["node"].name})
    audit = client.get("/ops/audit/", {"action": "\x00", "actor": "nobody\x00"})

    assert repairs.status_code == 200 and "agent unreachable" in repairs.content.decode()
    assert audit.status_code == 200 and not list(audit.context["page"])

def test_stopping_a_session_as_operator_records_who_and_why(world, people, running):
    client_for(people["operator"]).post(f"/ops/sessions/{running.pk}/stop/", {"reason": "crypto mining", "confirm": "on"})
    running.refresh_from_db()
    assert running.reason == "stopped by op"
    event = AuditEvent.objects.get(action="session.stop")
    assert event.after == {"reason": "crypto mining"} and event.institution_id == world["course"].institution_id
    assert LabSession.objects.filter(pk=running.pk, state="stopped").exists()


def test_node_truth_is_shown_when_cards_are_not_reported(world, people):
    Node.objects.filter(pk=world["node"].pk).update(card_truth="none")
    assert "cards not reported" in client_for(people["platform"]).get("/ops/").content.decode()


def test_every_console_action_refuses_a_post_without_its_csrf_token(world, people, running):
    card = running.allocation.card
    webhook = Subscription.objects.create(
        institution=world["course"].institution, url="https://lms.example.edu/h", event_types=["session.ended"], secret="whsec_x"
    )
    posts = [
        f"/ops/nodes/{card.node_id}/drain/",
        f"/ops/cards/{card.pk}/health/",
        f"/ops/sessions/{running.pk}/stop/",
        "/ops/tenancy/",
        f"/courses/{world['course'].pk}/quota/",
        f"/courses/{world['course'].pk}/roster/",
        f"/courses/{world['course'].pk}/roster/import/",
        f"/courses/{world['course'].pk}/templates/",
        f"/courses/{world['course'].pk}/archive/",
        f"/courses/{world['course'].pk}/sessions/stop-all/",
        "/teach/courses/new/",
        "/ops/webhooks/",
        f"/ops/webhooks/{webhook.pk}/",
    ]
    client = Client(enforce_csrf_checks=True)
    client.force_login(people["platform"])
    for url in posts:
        assert client.post(url, {"reason": "x", "confirm": "on", "action": "allotment"}).status_code == 403, url
    assert not Node.objects.filter(drained=True).exists() and not AuditEvent.objects.exists()


@pytest.mark.parametrize("visitor", VISITORS)
def test_a_catalogue_template_is_added_by_the_institution_s_operators_only(world, people, visitor):
    institution = world["course"].institution
    image = AllowedImage.objects.create(institution=institution, kind="jupyter", reference="registry.example/lab:2")
    prefix = f"t{institution.pk}"
    fields = {"name": "GPU-free warm-up", "image": image.pk, "core_percent": 5, "memory_mib": "2", "scenario": "development"}
    body = {"action": "template-add", "institution": institution.pk, **{f"{prefix}-{k}": v for k, v in fields.items()}}

    client_for(people[visitor]).post("/ops/tenancy/", body)

    made = LabTemplate.objects.filter(institution=institution, name="GPU-free warm-up", course__isnull=True).first()
    assert (made is not None) == (visitor in ("operator", "platform"))
    if made is not None:
        assert (made.image, made.core_percent, made.memory_mib) == ("registry.example/lab:2", 5, 2048)
        assert AuditEvent.objects.filter(action="catalogue.create", target="GPU-free warm-up").count() == 1
        assert made in templates_attachable(course=world["course"])


def test_a_catalogue_template_with_bad_values_is_refused_with_the_reason_and_nothing_made(world, people):
    institution = world["course"].institution
    image = AllowedImage.objects.create(
        institution=institution,
        kind="vllm",
        reference="Qwen/Qwen2.5-0.5B",
        image="registry.example.edu/npu-lab/vllm-ascend:v0.18.0",
    )
    prefix = f"t{institution.pk}"
    body = {
        "action": "template-add",
        "institution": institution.pk,
        f"{prefix}-name": "Too big",
        f"{prefix}-image": image.pk,
        f"{prefix}-core_percent": 101,
        f"{prefix}-memory_mib": "65",
        f"{prefix}-scenario": "inference",
    }
    page = client_for(people["operator"]).post("/ops/tenancy/", body, follow=True).content.decode()
    assert "The largest card has 64 GiB of memory" in page
    assert "less than or equal to 100" in page
    assert not LabTemplate.objects.filter(name="Too big").exists() and not AuditEvent.objects.exists()
    form = client_for(people["operator"]).get("/ops/tenancy/").content.decode()
    assert "Add a catalogue template" in form


def test_usage_shows_each_institution_only_its_own_courses_with_a_chart_and_csv(world, people, running):
    from django.utils import timezone

    from labs.domain.reasons import Reason
    from labs.models import Allocation
    from labs.services.sessions import session_stop

    Allocation.objects.filter(session=running).update(created_at=timezone.now() - timedelta(hours=2))
    session_stop(session_id=running.pk, reason=Reason.of("session.stopped_by", who="test"))
    code = world["course"].code

    mine = client_for(people["operator"]).get("/ops/usage/")
    (row,) = mine.context["report"].courses
    assert (row.code, row.sessions, row.students) == (code, 1, 1)
    assert round(row.totals.core_percent_hours, 1) == 20.0 and round(row.totals.gib_hours, 1) == 16.0  # 10 %, 8 GiB, 2 h
    assert round(sum(mine.context["chart"]["core"]), 1) == 20.0
    assert not client_for(people["foreign_operator"]).get("/ops/usage/").context["report"].courses
    csv = client_for(people["platform"]).get("/ops/usage/", {"days": 28, "format": "csv"})
    assert csv["Content-Type"].startswith("text/csv") and "usage-28d-" in csv["Content-Disposition"]
    lines = csv.content.decode().splitlines()
    assert lines[0] == "institution,course,term,students,sessions,core_percent_hours,gib_hours"
    assert lines[1].endswith(f",{code},2026 Autumn,1,1,20.00,16.00")
    assert client_for(people["platform"]).get("/ops/usage/", {"days": "9999"}).context["days"] == 7  # not offered: the default


def test_operators_see_their_institution_s_class_reservations_on_the_usage_page(world, people):
    from django.utils import timezone

    from labs.services.reservations import reservation_book

    start = timezone.now() + timedelta(days=1)
    reservation_book(course=world["course"], template=world["small"], count=3, slots=[(start, start + timedelta(hours=1))])

    (slot,) = client_for(people["operator"]).get("/ops/usage/").context["classes"]
    assert (slot.reservation.course_id, slot.reservation.count, slot.prestarted, slot.claimed) == (world["course"].pk, 3, 0, 0)
    assert len(client_for(people["platform"]).get("/ops/usage/").context["classes"]) == 1
    assert client_for(people["foreign_operator"]).get("/ops/usage/").context["classes"] == []


@pytest.mark.parametrize(
    ("language", "shown"),
    [
        ("en", "host for lab sessions: 2.5 cores, 0.5 GiB (after the reserve)"),
        ("zh-hans", "可供实验会话使用的主机资源：2.5 核，0.5 GiB（已扣除预留）"),
    ],
)
def test_the_cluster_page_shows_host_cpu_in_cores_and_memory_in_gib(world, people, settings, language, shown):
    """Not "2500 millicores, 512 MiB": cores and GiB, as people count them."""
    settings.LAB_NODE_RESERVE_CPU_MILLICORES = 1000
    settings.LAB_NODE_RESERVE_MEMORY_MIB = 512
    Node.objects.filter(pk=world["node"].pk).update(host_cpu_millicores=3500, host_memory_mib=1024)
    page = client_for(people["operator"]).get("/ops/", HTTP_ACCEPT_LANGUAGE=language).content.decode()
    assert shown in page
    assert "millicores" not in page and "毫核" not in page


def test_the_cluster_page_says_which_nodes_limit_host_resources_and_which_are_not_limited(world, people, settings):
    settings.LAB_NODE_RESERVE_CPU_MILLICORES = 2000
    settings.LAB_NODE_RESERVE_MEMORY_MIB = 12 * GIB
    old = Node.objects.create(name="old-agent-node")
    Node.objects.filter(pk=world["node"].pk).update(host_cpu_millicores=192_000, host_memory_mib=1024 * GIB)

    page = client_for(people["operator"]).get("/ops/").content.decode()

    assert "host for lab sessions: 190 cores, 1,012 GiB (after the reserve)" in page
    after_old = page.split(f'data-node="{old.name}"', 1)[1]
    assert "host CPU and memory not reported (an older agent): not limited" in after_old.split("data-node-sessions", 1)[0]
