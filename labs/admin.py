from django import forms
from django.contrib import admin

from labs.domain.units import default_scenario
from labs.forms import scenario_field
from labs.models import (
    Affiliation,
    Allocation,
    AllowedImage,
    Card,
    Course,
    CourseQuota,
    Enrollment,
    Institution,
    InstitutionRole,
    LabSession,
    LabTemplate,
    Node,
    RepairEvent,
)
from labs.selectors.console import cluster_facts, guarantees_held, institution_allotment
from labs.services.affiliations import affiliation_ensure
from labs.services.courses import quota_context


class InstitutionRoleInline(admin.TabularInline):
    model = InstitutionRole
    extra = 0
    raw_id_fields = ["user"]


class AllowedImageInline(admin.TabularInline):
    model = AllowedImage
    extra = 0


@admin.register(Institution)
class InstitutionAdmin(admin.ModelAdmin):
    """Until the operator console (issue 10): the allotment, who may create courses, the allow-list."""

    list_display = ["name", "slug", "allot_instances", "allot_core_percent", "allot_memory_mib"]
    search_fields = ["name", "slug"]
    inlines = [InstitutionRoleInline, AllowedImageInline]

    def save_formset(self, request, form, formset, change):
        super().save_formset(request, form, formset, change)
        if formset.model is InstitutionRole:  # a role makes the account one of the institution's
            roles = [f.instance for f in formset.forms if f.instance.pk and f not in formset.deleted_forms]
            affiliation_ensure(user_ids=[r.user_id for r in roles], institution=form.instance, source=Affiliation.Source.ROLE)


@admin.register(Affiliation)
class AffiliationAdmin(admin.ModelAdmin):
    """Which institutions an account belongs to: their course rosters find only these accounts."""

    list_display = ["user", "institution", "source", "created_at"]
    list_filter = ["institution", "source"]
    search_fields = ["user__username", "user__email"]
    list_select_related = ["user", "institution"]
    raw_id_fields = ["user"]


class CourseQuotaAdminForm(forms.ModelForm):
    """A quota checked as the console and the API check it (``labs.domain.quota_spec``): the
    model's ``clean()`` with the cluster's caps, the allotment and the other institutions' cohorts."""

    def clean(self):
        data = super().clean()
        course = data.get("course") or getattr(self.instance, "course", None)
        if course is not None:
            saved = course.pk is not None
            self.instance.check_context = quota_context(
                facts=cluster_facts(),
                allotment=institution_allotment(institution=course.institution, excluding=course if saved else None),
                held=guarantees_held(institution=course.institution, excluding=course, name_all=True),
                overcommit=course.institution.allow_overcommit,
                scenarios=set(course.templates.values_list("scenario", flat=True)) if saved else set(),
                cohort=data.get("cohort") or "",
                institution_id=course.institution_id,
            )
        return data


class CourseQuotaInline(admin.StackedInline):
    model = CourseQuota
    form = CourseQuotaAdminForm
    can_delete = False


@admin.register(Course)
class CourseAdmin(admin.ModelAdmin):
    list_display = ["code", "title", "term", "institution", "archived_at"]
    list_filter = ["institution", "term"]
    search_fields = ["code", "title"]
    filter_horizontal = ["templates"]
    inlines = [CourseQuotaInline]


@admin.register(Enrollment)
class EnrollmentAdmin(admin.ModelAdmin):
    list_display = ["user", "course", "role"]
    list_filter = ["role", "course"]
    search_fields = ["user__username", "course__code"]
    list_select_related = ["user", "course"]
    raw_id_fields = ["user"]

    def save_model(self, request, obj, form, change):
        super().save_model(request, obj, form, change)
        # A member of a course is an account of its institution, as every enrolling path makes it.
        affiliation_ensure(user_ids=[obj.user_id], institution=obj.course.institution_id, source=Affiliation.Source.ROSTER)


@admin.register(CourseQuota)
class CourseQuotaAdmin(admin.ModelAdmin):
    form = CourseQuotaAdminForm
    list_display = ["course", "core_percent", "memory_mib", "instance_count", "sessions_per_student", "max_session_minutes"]
    list_select_related = ["course"]


class LabTemplateAdminForm(forms.ModelForm):
    """A template's scenario left empty is the default of its kind (a vLLM template: inference);
    the admin gives it its model and fields."""

    scenario = scenario_field(label=LabTemplate._meta.get_field("scenario").verbose_name)

    def clean(self):
        data = super().clean()
        kind = data.get("kind")
        if not data.get("scenario") and kind in LabTemplate.Kind.values:
            data["scenario"] = default_scenario(kind).value
        return data


@admin.register(LabTemplate)
class LabTemplateAdmin(admin.ModelAdmin):
    form = LabTemplateAdminForm
    list_display = [
        "name",
        "kind",
        "core_percent",
        "share_policy",
        "memory_mib",
        "card_count",
        "scenario",
        "cpu_request_millicores",
        "host_memory_request_mib",
        "offers_smaller_lab",
        "institution",
    ]
    list_filter = ["kind", "scenario", "offers_smaller_lab", "institution"]
    search_fields = ["name", "slug", "image"]
    prepopulated_fields = {"slug": ["name"]}


class CardInline(admin.TabularInline):
    model = Card
    extra = 0


@admin.register(Node)
class NodeAdmin(admin.ModelAdmin):
    list_display = ["name", "available", "card_truth"]
    inlines = [CardInline]


@admin.register(Card)
class CardAdmin(admin.ModelAdmin):
    list_display = ["__str__", "chip_type", "memory_mib", "healthy"]
    list_filter = ["healthy", "node"]
    list_select_related = ["node"]


@admin.register(LabSession)
class LabSessionAdmin(admin.ModelAdmin):
    """Read-only: a state change made here would bypass the state machine and the ledger."""

    list_display = ["id", "student", "course", "template", "state", "reason", "created_at"]
    list_filter = ["state", "course"]
    search_fields = ["id", "student__username", "driver_ref"]
    list_select_related = ["student", "course", "template"]
    # The access URL carries the secret (``?token=``): like the secret, only the student sees it.
    exclude = ["secret", "access_url"]
    readonly_fields = [f.name for f in LabSession._meta.fields if f.name not in {"secret", "access_url"}]

    def has_add_permission(self, request) -> bool:
        return False

    def has_change_permission(self, request, obj=None) -> bool:
        return False


@admin.register(Allocation)
class AllocationAdmin(admin.ModelAdmin):
    list_display = [
        "session",
        "card",
        "course",
        "core_percent",
        "memory_mib",
        "scenario",
        "entity_id",
        "created_at",
        "released_at",
    ]
    list_filter = ["course", "scenario"]
    list_select_related = ["session__student", "session__template", "card__node", "course"]

    def has_add_permission(self, request) -> bool:
        return False

    def has_change_permission(self, request, obj=None) -> bool:
        return False

    def has_delete_permission(self, request, obj=None) -> bool:
        return False


@admin.register(RepairEvent)
class RepairEventAdmin(admin.ModelAdmin):
    """What the reconciler found and did; read-only, it is a record."""

    list_display = ["created_at", "kind", "node", "session", "entity_id", "message"]
    list_filter = ["kind", "node"]
    search_fields = ["entity_id", "message", "session__id"]
    list_select_related = ["node", "session"]

    def has_add_permission(self, request) -> bool:
        return False

    def has_change_permission(self, request, obj=None) -> bool:
        return False
