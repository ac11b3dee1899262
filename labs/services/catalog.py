"""A course's templates: attach from the institution's catalogue, create its own, and see how many fit.

``fit_preview`` asks the placement engine, on the ledger as it is now, how many more instances
of a shape the cluster could place, and the course's quota how many it would admit inside its
guarantee: the numbers an instructor needs before promising a class "everyone gets one".
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from django.db import transaction
from django.utils.text import slugify

from labs.domain.placement import Cluster, LaunchRequest
from labs.domain.units import Scenario, default_scenario
from labs.models import Course, Institution, LabTemplate
from labs.selectors.capacity import capacity_snapshot, placement_config
from labs.selectors.courses import course_quota_use
from labs.services.audit import audit_record

FIT_LIMIT = 4096  # enough for any class; the engine stops counting there


@dataclass(frozen=True)
class FitPreview:
    cluster: int  # more instances of this shape the cluster could place now (up to FIT_LIMIT)
    cluster_empty: int  # with nothing running (every healthy card of the available nodes)
    quota: int | None  # more the course's guarantee admits now; None without a quota
    quota_total: int | None  # the guarantee admits at most, when nothing of the course runs
    capped: bool  # the cluster count reached FIT_LIMIT


def _count_fits(cluster: Cluster, core: int, memory: int, scenario: Scenario, cards: int = 1) -> int:
    """How many more instances of the shape ``cluster`` places (``cards`` > 1: on that many whole
    cards each, ``core`` being 100 x cards)."""
    n = 0
    while n < FIT_LIMIT:
        request = LaunchRequest(f"~preview-{n}", 0, n, core, memory, scenario, cards=cards)
        choice = cluster.choose(request)
        if choice is None:
            break
        cluster.commit(request, choice)
        n += 1
    return n


def fit_preview(*, course: Course, core_percent: int, memory_mib: int, scenario: str, card_count: int = 1) -> FitPreview:
    """How many instances of (core, memory, scenario) fit: on the cluster now and empty, and in the quota.

    ``card_count`` > 1: instances on that many whole cards each; ``core_percent`` and
    ``memory_mib`` are then per card (100 and a card's memory), and each instance counts
    100 x cards and every card's memory against the guarantee.
    """
    shape = Scenario(scenario)
    core = core_percent * card_count
    snapshot = capacity_snapshot()
    now = _count_fits(Cluster(snapshot, placement_config()), core, memory_mib, shape, card_count)
    empty_nodes = [replace(n, cards=tuple(replace(c, instances=(), unlisted_mib=0) for c in n.cards)) for n in snapshot]
    empty = _count_fits(Cluster(empty_nodes, placement_config()), core, memory_mib, shape, card_count)
    quota = getattr(course, "quota", None)
    in_quota = total = None
    if quota is not None:
        use = course_quota_use(course=course)
        memory = memory_mib * card_count
        total = min(quota.instance_count, quota.core_percent // core, quota.memory_mib // memory)
        in_quota = max(
            0,
            min(
                quota.instance_count - use.instances,
                (quota.core_percent - use.core_percent) // core,
                (quota.memory_mib - use.memory_mib) // memory,
            ),
        )
    return FitPreview(now, empty, in_quota, total, now >= FIT_LIMIT)


def template_create(*, course: Course, by=None, **fields) -> LabTemplate:
    """A template of the course's own, offered in the course at once."""
    with transaction.atomic():
        template = _template_new(
            institution=course.institution, course=course, slug_base=f"{course.code}-{fields['name']}", **fields
        )
        course.templates.add(template)
        audit_record(
            by=by,
            action="template.create",
            target=f"{template.name} in {course.code}",
            institution=course.institution,
            after=fields,
        )
    return template


def catalogue_template_create(*, institution: Institution, by=None, **fields) -> LabTemplate:
    """A template in the institution's catalogue: any of its courses may offer it."""
    with transaction.atomic():
        template = _template_new(institution=institution, course=None, slug_base=fields["name"], **fields)
        audit_record(by=by, action="catalogue.create", target=template.name, institution=institution, after=fields)
    return template


def _template_new(*, institution: Institution, course: Course | None, slug_base: str, **fields) -> LabTemplate:
    """A new template with a slug not yet taken in the institution (inside the caller's transaction);
    without a ``scenario``, the default of its kind (a vLLM template: inference)."""
    fields.setdefault("scenario", default_scenario(fields.get("kind", LabTemplate.Kind.JUPYTER)).value)
    base = slugify(slug_base)[:40] or "template"
    slug, n = base, 1
    while LabTemplate.objects.filter(institution=institution, slug=slug).exists():
        n += 1
        slug = f"{base}-{n}"
    return LabTemplate.objects.create(institution=institution, course=course, slug=slug, **fields)


def templates_attachable(*, course: Course):
    """The institution's catalogue templates (not other courses' own ones) the course does not offer yet."""
    return (
        LabTemplate.objects.filter(institution_id=course.institution_id, course__isnull=True)
        .exclude(courses=course)
        .order_by("core_percent", "name")
    )


def template_attach(*, course: Course, template_id: int, by=None) -> LabTemplate | None:
    template = templates_attachable(course=course).filter(pk=template_id).first()
    if template is not None:
        with transaction.atomic():
            course.templates.add(template)
            audit_record(
                by=by, action="template.offer", target=f"{template.name} in {course.code}", institution=course.institution
            )
    return template


def template_smaller_offer_set(*, course: Course, template_id: int, on: bool, by=None) -> LabTemplate | None:
    """Turn the smaller-lab offer (``LabTemplate.offers_smaller_lab``) of one of the course's own
    templates on or off. A catalogue template is the operators' (other courses may offer it): it
    is not changed here, and ``None`` says so, as for a template the course does not have."""
    template = course.templates.filter(pk=template_id, course=course).first()
    if template is not None and template.offers_smaller_lab != on:
        with transaction.atomic():
            LabTemplate.objects.filter(pk=template.pk).update(offers_smaller_lab=on)
            template.offers_smaller_lab = on
            audit_record(
                by=by,
                action="template.smaller_offer_on" if on else "template.smaller_offer_off",
                target=f"{template.name} in {course.code}",
                institution=course.institution,
            )
    return template


def template_detach(*, course: Course, template_id: int, by=None) -> LabTemplate | None:
    """Stop offering a template in the course; sessions already running it go on."""
    template = course.templates.filter(pk=template_id).first()
    if template is not None:
        with transaction.atomic():
            course.templates.remove(template)
            audit_record(
                by=by, action="template.withdraw", target=f"{template.name} in {course.code}", institution=course.institution
            )
    return template
