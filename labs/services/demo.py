"""Demo data for the embedded default (``make demo``): idempotent, safe to run again."""

from __future__ import annotations

from django.contrib.auth import get_user_model
from django.contrib.auth.hashers import make_password
from django.db import transaction

from labs.models import (
    Affiliation,
    AllowedImage,
    Card,
    Course,
    CourseQuota,
    Enrollment,
    Institution,
    InstitutionRole,
    LabTemplate,
    Node,
)
from labs.services.affiliations import affiliation_ensure

DEMO_STUDENTS = 128
DEMO_PASSWORD = "npu-lab-demo"  # printed by `make demo`; the demo is for a laptop, not a network
CARD_MEMORY_MIB = 64 * 1024
# A card filled with one template books at most 95 % of its HBM: the vNPU field notes advise
# "把显存总和控制在物理卡显存的 95% 以内，留出系统保留内存" (keep the total within 95 % of the card's
# memory, leaving the system its reserve; an idle 910B shows some 3.3 GiB in use). 16 small
# labs a card (the development cap) book 16 x 3.75 GiB = 60 GiB, 93.75 %; 8 medium ones
# 8 x 7.5 GiB = 60 GiB too.
SMALL_MEMORY_MIB = 3840
MEDIUM_MEMORY_MIB = 7680
DEMO_NODE = "npu-node-1"
# The simulated node agent listens this far above the portal's port (8000: 9410, the agent's
# port on a real node), so a second demo on another PORTAL_PORT has an agent of its own.
DEMO_AGENT_PORT_OFFSET = 1410
# The institution's allow-list: what a course's own templates may run (kind, image or model,
# the image serving a vLLM model, label). vLLM runs in the image the CCE FlexNPU guide requires.
VLLM_ASCEND_IMAGE = "quay.io/ascend/vllm-ascend:v0.18.0"
DEMO_ALLOW_LIST = [
    ("jupyter", "swr.cn-south-1.myhuaweicloud.com/ascendhub/jupyterlab:latest", "", "JupyterLab (Ascend)"),
    ("vllm", "Qwen/Qwen2.5-0.5B-Instruct", VLLM_ASCEND_IMAGE, "Qwen2.5 0.5B Instruct"),
    ("vllm", "Qwen/Qwen2.5-7B-Instruct", VLLM_ASCEND_IMAGE, "Qwen2.5 7B Instruct"),
]


def demo_agent_port(portal_port: int) -> int:
    """The port of the demo's node agent for a portal on ``portal_port``; ``ValueError`` when that
    is past the last port."""
    agent_port = portal_port + DEMO_AGENT_PORT_OFFSET
    if not (0 < portal_port and agent_port <= 65535):
        raise ValueError(
            f"The demo's node agent listens on PORTAL_PORT + {DEMO_AGENT_PORT_OFFSET}: choose a PORTAL_PORT"
            f" from 1 to {65535 - DEMO_AGENT_PORT_OFFSET}."
        )
    return agent_port


@transaction.atomic
def demo_data_load(
    *, students: int = DEMO_STUDENTS, password: str = DEMO_PASSWORD, agent_port: int = demo_agent_port(8000)
) -> dict[str, object]:
    """One institution; course "AI Practice" with ``students`` students and one instructor;
    Jupyter templates small (5 %, 3.75 GiB) and medium (10 %, 7.5 GiB); one node of 8 x 910B 64 GiB
    whose agent answers on 127.0.0.1:``agent_port`` (``demo_agent_port``)."""
    User = get_user_model()
    # No allotment: AI101 guarantees the whole server to its 128 students, so a second course
    # made in the console is refused any guarantee, the refusal naming AI101, unless the
    # operator allows overcommit on the tenancy page; an operator sets an allotment per institution.
    institution, _ = Institution.objects.get_or_create(slug="demo-university", defaults={"name": "Demo University"})
    for kind, reference, image, label in DEMO_ALLOW_LIST:
        AllowedImage.objects.get_or_create(
            institution=institution, kind=kind, reference=reference, defaults={"image": image, "label": label}
        )
    course, _ = Course.objects.get_or_create(
        institution=institution, code="AI101", term="2026 Autumn", defaults={"title": "AI Practice"}
    )
    CourseQuota.objects.update_or_create(
        course=course,
        defaults={
            "core_percent": 800,
            "memory_mib": 8 * CARD_MEMORY_MIB,
            "instance_count": 128,
            "sessions_per_student": 1,
            "max_session_minutes": 180,
        },
    )
    small, _ = LabTemplate.objects.update_or_create(
        institution=institution,
        slug="small",
        defaults={
            "name": "small",
            "description": "JupyterLab for exercises",
            "kind": LabTemplate.Kind.JUPYTER,
            "image": "swr.cn-south-1.myhuaweicloud.com/ascendhub/jupyterlab:latest",
            "core_percent": 5,
            "memory_mib": SMALL_MEMORY_MIB,
        },
    )
    medium, _ = LabTemplate.objects.update_or_create(
        institution=institution,
        slug="medium",
        defaults={
            "name": "medium",
            "description": "JupyterLab for model training",
            "kind": LabTemplate.Kind.JUPYTER,
            "image": "swr.cn-south-1.myhuaweicloud.com/ascendhub/jupyterlab:latest",
            "core_percent": 10,
            "memory_mib": MEDIUM_MEMORY_MIB,
        },
    )
    course.templates.add(small, medium)
    node, _ = Node.objects.update_or_create(
        name=DEMO_NODE,
        defaults={
            "labels": {"accelerator": "ascend-910b"},
            "agent_url": f"http://127.0.0.1:{agent_port}",
            # An 8-card Atlas 800T A2's host (4 x Kunpeng 920: 192 cores, 1 TiB); the simulated
            # agent reports the same at each inventory sync.
            "host_cpu_millicores": 192_000,
            "host_memory_mib": 1024 * 1024,
        },
    )
    for index in range(8):
        Card.objects.get_or_create(
            node=node,
            index=index,
            defaults={"die_id": f"demo-die-{index}", "chip_type": "Ascend910B", "memory_mib": CARD_MEMORY_MIB},
        )
    # One hash for every demo account: hashing 129 passwords one by one takes about a minute.
    hashed = make_password(password)
    instructor = _user(User, "instructor", hashed, first_name="Demo", last_name="Instructor")
    Enrollment.objects.get_or_create(user=instructor, course=course, defaults={"role": Enrollment.Role.INSTRUCTOR})
    # May create courses of the institution in the instructor console.
    InstitutionRole.objects.get_or_create(user=instructor, institution=institution, role=InstitutionRole.Role.INSTRUCTOR)
    usernames = [f"student{number:03d}" for number in range(1, students + 1)]
    existing = set(User.objects.filter(username__in=usernames).values_list("username", flat=True))
    User.objects.bulk_create(User(username=name, password=hashed) for name in usernames if name not in existing)
    enrolled = set(Enrollment.objects.filter(course=course).values_list("user__username", flat=True))
    Enrollment.objects.bulk_create(
        Enrollment(user=user, course=course, role=Enrollment.Role.STUDENT)
        for user in User.objects.filter(username__in=usernames)
        if user.username not in enrolled
    )
    affiliation_ensure(
        user_ids=Enrollment.objects.filter(course=course).values_list("user_id", flat=True),
        institution=institution,
        source=Affiliation.Source.ROSTER,
    )
    if not User.objects.filter(username="admin").exists():
        User.objects.create(username="admin", email="admin@example.invalid", password=hashed, is_staff=True, is_superuser=True)
    return {"course": course, "students": students, "password": password}


def _user(User, username: str, hashed_password: str, **fields: str):
    user, _ = User.objects.get_or_create(username=username, defaults={"password": hashed_password, **fields})
    return user
