"""The admin checks a quota by the same rule as the console, the API and quota_set: the model's
clean() calls labs.domain.quota_spec, with the cluster's caps and the allotment in the admin."""

from __future__ import annotations

import pytest
from django.core.exceptions import ValidationError
from django.test import Client

from labs.models import CourseQuota
from tests.factories import UserFactory


@pytest.fixture
def admin_client(db) -> Client:
    client = Client()
    client.force_login(UserFactory(username="root", is_staff=True, is_superuser=True))
    return client


def test_the_models_clean_refuses_what_the_rule_refuses_without_calling_a_service(world):
    quota = CourseQuota.objects.get(course=world["course"])
    quota.lend_instances = quota.instance_count + 1
    quota.sessions_per_student = 17
    quota.borrow_core_percent = 10  # no cohort

    with pytest.raises(ValidationError) as refused:
        quota.full_clean()

    assert refused.value.message_dict == {
        "sessions_per_student": ["Ensure this value is less than or equal to 16."],
        "lend_instances": ["A course cannot lend more than it is guaranteed."],
        "borrow_core_percent": ["Borrowing and lending happen inside a cohort: name the cohort, or leave this empty."],
    }


def test_the_admin_refuses_a_guarantee_the_cluster_cannot_hold_and_changes_nothing(admin_client, world):
    quota = CourseQuota.objects.get(course=world["course"])
    url = f"/admin/labs/coursequota/{quota.pk}/change/"
    form = admin_client.get(url).context["adminform"].form
    data = {name: "" if form[name].value() is None else str(form[name].value()) for name in form.fields}

    refused = admin_client.post(url, {**data, "instance_count": "129", "memory_mib": "1000"})

    assert refused.status_code == 200
    errors = refused.context["adminform"].form.errors
    assert errors["instance_count"] == [
        "The cluster's 8 healthy cards hold at most 128 development instances (16 per card, 128 per node)."
    ]
    assert errors["memory_mib"] == ["Memory is reserved in steps of 0.125 GiB: use 0.875 GiB or 1 GiB."]
    assert CourseQuota.objects.get(pk=quota.pk).instance_count == quota.instance_count
    assert admin_client.post(url, {**data, "instance_count": "100"}).status_code == 302
    assert CourseQuota.objects.get(pk=quota.pk).instance_count == 100


def test_the_admin_refuses_a_guarantee_other_courses_hold_and_names_them(admin_client, world):
    from tests.factories import CourseFactory, InstitutionFactory

    other = CourseFactory(institution=InstitutionFactory(slug="elsewhere"), code="OTHER7")
    url = f"/admin/labs/course/{other.pk}/change/"
    page = admin_client.get(url)
    form = page.context["adminform"].form
    data = {name: "" if form[name].value() is None else str(form[name].value()) for name in form.fields if name != "templates"}
    inline = {
        "quota-TOTAL_FORMS": "1",
        "quota-INITIAL_FORMS": "0",
        "quota-MIN_NUM_FORMS": "0",
        "quota-MAX_NUM_FORMS": "1",
        "quota-0-course": str(other.pk),
        "quota-0-instance_count": "8",
        "quota-0-core_percent": "0",
        "quota-0-memory_mib": "0",
        "quota-0-sessions_per_student": "1",
        "quota-0-max_session_minutes": "60",
        "quota-0-extensions_allowed": "0",
        "quota-0-extension_minutes": "30",
    }

    refused = admin_client.post(url, {**data, **inline})

    assert refused.status_code == 200
    errors = refused.context["inline_admin_formsets"][0].formset.forms[0].errors
    # The platform's admin sees every course by its code, other institutions' too.
    assert f"({world['course'].code}: 128)" in errors["instance_count"][0]
    assert not CourseQuota.objects.filter(course=other).exists()
