"""The demo's data: an instructor who can set up a course in the console from the first minute."""

from dataclasses import replace

from labs.domain.placement import Cluster, LaunchRequest
from labs.models import AllowedImage, Course, InstitutionRole
from labs.selectors.capacity import capacity_snapshot, placement_config
from labs.selectors.console import institution_allotment, institutions_for_new_courses
from labs.services.demo import demo_data_load


def test_the_demo_instructor_may_create_courses_from_an_allow_list(db):
    demo_data_load(students=3)
    demo_data_load(students=3)  # idempotent

    course = Course.objects.get(code="AI101")
    instructor = course.enrollments.get(role="instructor").user
    assert InstitutionRole.objects.filter(user=instructor).count() == 1
    assert institutions_for_new_courses(user=instructor) == [course.institution]
    assert AllowedImage.objects.filter(institution=course.institution, kind="vllm").count() == 2
    assert institution_allotment(institution=course.institution).limit is None


def test_the_demos_vllm_models_run_in_the_vllm_ascend_image(db):
    demo_data_load(students=1)

    served = AllowedImage.objects.filter(kind="vllm").values_list("reference", "image")
    assert sorted(served) == [
        ("Qwen/Qwen2.5-0.5B-Instruct", "quay.io/ascend/vllm-ascend:v0.18.0"),
        ("Qwen/Qwen2.5-7B-Instruct", "quay.io/ascend/vllm-ascend:v0.18.0"),
    ]
    assert list(AllowedImage.objects.filter(kind="jupyter").values_list("image", flat=True)) == [""]


def test_a_card_filled_with_any_demo_template_keeps_5_percent_of_its_memory_free(db):
    # The vNPU field notes: keep the total within 95 % of the card's memory (系统保留内存).
    demo_data_load(students=1)
    course = Course.objects.get(code="AI101")
    [node] = capacity_snapshot()
    one_card = replace(node, cards=node.cards[:1])
    card_mib = one_card.cards[0].memory_mib

    for template in course.templates.all():
        cluster = Cluster([one_card], placement_config())
        placed = 0
        while True:
            request = LaunchRequest(f"t{placed}", 0, placed, template.core_percent, template.memory_mib, template.scenario)
            choice = cluster.choose(request)
            if choice is None:
                break
            cluster.commit(request, choice)
            placed += 1
        booked = placed * template.memory_mib
        assert placed > 0
        assert booked * 100 <= 95 * card_mib, f"{template.slug}: {placed} fill a card, booking {booked} of {card_mib} MiB"
