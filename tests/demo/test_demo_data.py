"""The demo's data: an instructor who can set up a course in the console from the first minute."""

from labs.models import AllowedImage, Course, InstitutionRole
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
