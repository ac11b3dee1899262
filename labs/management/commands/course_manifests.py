"""Print a course's Kubernetes objects: namespace, default-deny NetworkPolicy, ResourceQuota, RoleBinding.

    python manage.py course_manifests AI101 | kubectl apply -f -

The ResourceQuota is the course's guarantee plus its borrowing limit, from the portal's own
quota; an unlimited borrowing limit in a cohort is bounded by the guarantees of the whole cohort.
The RoleBinding gives the portal's ServiceAccount (deploy/base/rbac.yaml) its driver's rights in
this namespace, and nowhere else.
"""

from __future__ import annotations

import yaml
from django.conf import settings
from django.core.management.base import BaseCommand, CommandError
from django.db.models import Sum

from labs.drivers.kubernetes import namespaces
from labs.drivers.kubernetes.profiles import get_profile
from labs.models import Course, CourseQuota


class Command(BaseCommand):
    help = "Print the Kubernetes namespace, NetworkPolicy, ResourceQuota and RoleBinding of a course, as YAML."

    def add_arguments(self, parser) -> None:
        parser.add_argument("code", help="the course code, e.g. AI101")
        parser.add_argument("--term", help="the term, when the code exists in several")
        parser.add_argument("--profile", default=None, help="device profile: flexnpu, vnpu or hami")

    def handle(self, *args, code: str, term: str | None, profile: str | None, **options) -> None:
        courses = Course.objects.filter(code=code).select_related("quota")
        if term:
            courses = courses.filter(term=term)
        if courses.count() != 1:
            found = ", ".join(f"{c.code} ({c.term})" for c in courses) or "none"
            raise CommandError(
                f"Need exactly one course with code {code!r}{' and term ' + repr(term) if term else ''}; found {found}."
            )
        course = courses.get()
        quota = CourseQuota.objects.filter(course=course).first()
        if quota is None:
            raise CommandError(f"{course.code} has no quota; set one in the admin first.")
        options_ = settings.LAB_DRIVER["OPTIONS"]
        prefix = options_.get("namespace_prefix", "lab-")
        portal_namespace = options_.get("portal_namespace", "npu-lab-portal")
        try:
            device = get_profile(profile or options_.get("profile", "flexnpu"))
        except (KeyError, ValueError) as exc:
            raise CommandError(str(exc)) from exc
        borrow = self._borrow_ceiling(quota)
        ceiling = namespaces.CourseQuota(quota.core_percent, quota.memory_mib, quota.instance_count, *borrow)
        objects = [
            namespaces.make_namespace(course.code, namespace_prefix=prefix),
            namespaces.make_network_policy(course.code, namespace_prefix=prefix, portal_namespace=portal_namespace),
            namespaces.make_resource_quota(course.code, ceiling, profile=device, namespace_prefix=prefix),
            namespaces.make_role_binding(course.code, namespace_prefix=prefix, portal_namespace=portal_namespace),
        ]
        self.stdout.write(yaml.safe_dump_all(objects, sort_keys=False), ending="")

    def _borrow_ceiling(self, quota: CourseQuota) -> tuple[int, int, int]:
        if not quota.cohort:
            return (0, 0, 0)
        others = CourseQuota.objects.filter(cohort=quota.cohort).exclude(pk=quota.pk)
        pool = others.aggregate(core=Sum("core_percent"), memory=Sum("memory_mib"), instances=Sum("instance_count"))
        limits = (quota.borrow_core_percent, quota.borrow_memory_mib, quota.borrow_instances)
        pooled = (pool["core"] or 0, pool["memory"] or 0, pool["instances"] or 0)
        return tuple(min(limit, most) if limit is not None else most for limit, most in zip(limits, pooled, strict=True))
