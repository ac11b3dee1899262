from django.conf import settings
from django.core.exceptions import ValidationError
from django.db import models
from django.db.models import F, Q
from django.db.models.functions import Mod
from django.db.models.lookups import Exact
from django.utils.translation import gettext
from django.utils.translation import gettext_lazy as _

from labs.domain.quota_spec import FIELD, QUOTA_FIELDS, QuotaContext, errors_by_field, quota_errors


class Institution(models.Model):
    """The tenant: a university. Every course, template and session belongs to one.

    The allotment is what its operator lets the institution guarantee in total: the sum of
    its courses' guarantees cannot pass it. Empty: no limit on that resource. Whatever the
    allotment, a guarantee must fit the cluster beside the other courses' guarantees, unless the
    operator allows overcommit.
    """

    name = models.CharField(_("name"), max_length=200)
    slug = models.SlugField(_("slug"), unique=True)
    allot_core_percent = models.PositiveIntegerField(_("may guarantee AI Core in total (%)"), null=True, blank=True)
    allot_memory_mib = models.PositiveBigIntegerField(_("may guarantee NPU memory in total (MiB)"), null=True, blank=True)
    allot_instances = models.PositiveIntegerField(_("may guarantee instances in total"), null=True, blank=True)
    allow_overcommit = models.BooleanField(
        _("allow overcommit"),
        default=False,
        # In the table's definition too: a row written by an older release's code (or a migration's
        # historical model from before this field) is then off, not refused.
        db_default=False,
        help_text=_(
            "Its courses may be guaranteed more than the cluster holds beside the other courses' guarantees: "
            "such a value is a priority, not a guarantee."
        ),
    )

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name


class InstitutionRole(models.Model):
    """Who may do what across an institution: create courses (instructor) or run it (operator)."""

    class Role(models.TextChoices):
        INSTRUCTOR = "instructor", _("instructor")
        OPERATOR = "operator", _("operator")

    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="institution_roles")
    institution = models.ForeignKey(Institution, on_delete=models.CASCADE, related_name="roles")
    role = models.CharField(_("role"), max_length=16, choices=Role.choices)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["user", "institution", "role"], name="institution_role_unique"),
            models.CheckConstraint(condition=Q(role__in=["instructor", "operator"]), name="institution_role_valid"),
        ]

    def __str__(self) -> str:
        return f"{self.user} {self.role} of {self.institution.slug}"


class Affiliation(models.Model):
    """An account known to an institution (eduPerson's word). The rosters of the institution's
    courses find and add only its affiliated accounts: any other account is, to them, one that
    does not exist, so a roster cannot be used to learn another institution's people.

    An account is affiliated by the path that brought it in: made by a roster of one of the
    institution's courses, first seen in an LTI launch or roster sync through the institution's
    registration, given a role in the institution, or linked by a platform operator (a student
    cross-registered at a second institution). One account may be affiliated with several.
    """

    class Source(models.TextChoices):
        ROSTER = "roster", _("made by a course roster")
        LTI = "lti", _("LTI launch or roster sync")
        ROLE = "role", _("institution role")
        INVITATION = "invitation", _("linked by a platform operator")
        ENROLMENT = "enrolment", _("enrolled before affiliations existed")

    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="affiliations")
    institution = models.ForeignKey(Institution, on_delete=models.CASCADE, related_name="affiliations")
    source = models.CharField(_("how"), max_length=16, choices=Source.choices)
    created_at = models.DateTimeField(_("since"), auto_now_add=True)

    class Meta:
        verbose_name = _("affiliation")
        verbose_name_plural = _("affiliations")
        constraints = [
            models.UniqueConstraint(fields=["user", "institution"], name="affiliation_unique_user_institution"),
            models.CheckConstraint(
                condition=Q(source__in=["roster", "lti", "role", "invitation", "enrolment"]), name="affiliation_source_valid"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.user} of {self.institution.slug}"


class Course(models.Model):
    institution = models.ForeignKey(Institution, on_delete=models.PROTECT, related_name="courses")
    code = models.CharField(_("code"), max_length=64)
    title = models.CharField(_("title"), max_length=200)
    term = models.CharField(_("term"), max_length=64)
    starts_on = models.DateField(_("first day"), null=True, blank=True)
    ends_on = models.DateField(_("last day"), null=True, blank=True)
    # Set once at term end: open sessions were stopped, nothing new launches, history is kept.
    archived_at = models.DateTimeField(_("archived"), null=True, blank=True)
    templates = models.ManyToManyField(
        "labs.LabTemplate", blank=True, related_name="courses", verbose_name=_("allowed templates")
    )

    class Meta:
        ordering = ["code", "term"]
        constraints = [
            models.UniqueConstraint(fields=["institution", "code", "term"], name="course_unique_code_per_term"),
            models.CheckConstraint(
                condition=Q(starts_on__isnull=True) | Q(ends_on__isnull=True) | Q(ends_on__gte=F("starts_on")),
                name="course_ends_after_it_starts",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.code} {self.title} ({self.term})"

    @property
    def archived(self) -> bool:
        return self.archived_at is not None


class Enrollment(models.Model):
    class Role(models.TextChoices):
        STUDENT = "student", _("student")
        INSTRUCTOR = "instructor", _("instructor")
        ASSISTANT = "assistant", _("assistant")

    STAFF_ROLES = (Role.INSTRUCTOR, Role.ASSISTANT)

    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="enrollments")
    course = models.ForeignKey(Course, on_delete=models.CASCADE, related_name="enrollments")
    role = models.CharField(_("role"), max_length=16, choices=Role.choices, default=Role.STUDENT)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["user", "course"], name="enrollment_unique_user_course"),
            models.CheckConstraint(condition=Q(role__in=["student", "instructor", "assistant"]), name="enrollment_role_valid"),
        ]

    def __str__(self) -> str:
        return f"{self.user} in {self.course.code} as {self.role}"


class CourseQuota(models.Model):
    """What a course is guaranteed on the shared servers, and what each student may hold."""

    course = models.OneToOneField(Course, on_delete=models.CASCADE, related_name="quota")
    # xgettext:no-python-format
    core_percent = models.PositiveIntegerField(_("guaranteed AI Core (% of one card, summed)"))
    memory_mib = models.PositiveBigIntegerField(_("guaranteed NPU memory (MiB)"))
    instance_count = models.PositiveIntegerField(_("guaranteed instances"))
    sessions_per_student = models.PositiveSmallIntegerField(_("concurrent sessions per student"), default=1)
    max_session_minutes = models.PositiveIntegerField(_("maximum session length (minutes)"), default=180)
    # A student may lengthen a running session this many times, by this much each time.
    extensions_allowed = models.PositiveSmallIntegerField(_("extensions a student may ask for"), default=0)
    extension_minutes = models.PositiveIntegerField(_("minutes each extension adds"), default=30)
    # A weekly NPU budget per student (None: no budget), from Monday 00:00 in the portal's time zone.
    budget_core_percent_hours = models.PositiveIntegerField(
        _("weekly budget per student: AI-Core-% × hours"), null=True, blank=True
    )
    budget_gib_hours = models.PositiveIntegerField(_("weekly budget per student: GiB × hours"), null=True, blank=True)
    # Borrowing and lending inside a cohort (Kueue's ClusterQueue): a course with no cohort
    # holds exactly its guarantee. An empty borrowing limit is unlimited; an empty lending
    # limit lends all of the course's idle guarantee.
    cohort = models.CharField(
        _("cohort"), max_length=64, blank=True, help_text=_("Courses in one cohort lend each other idle quota.")
    )
    borrow_core_percent = models.PositiveIntegerField(_("may borrow AI Core (%)"), null=True, blank=True)
    borrow_memory_mib = models.PositiveBigIntegerField(_("may borrow memory (MiB)"), null=True, blank=True)
    borrow_instances = models.PositiveIntegerField(_("may borrow instances"), null=True, blank=True)
    lend_core_percent = models.PositiveIntegerField(_("lends at most AI Core (%)"), null=True, blank=True)
    lend_memory_mib = models.PositiveBigIntegerField(_("lends at most memory (MiB)"), null=True, blank=True)
    lend_instances = models.PositiveIntegerField(_("lends at most instances"), null=True, blank=True)
    # Caps on the host CPU and memory the course's sessions request in all (issue 14); empty: no cap.
    host_cpu_cap_millicores = models.PositiveIntegerField(_("host CPU cap (millicores, all sessions)"), null=True, blank=True)
    host_memory_cap_mib = models.PositiveBigIntegerField(_("host memory cap (MiB, all sessions)"), null=True, blank=True)

    class Meta:
        constraints = [
            models.CheckConstraint(
                condition=Q(memory_mib__gte=0) & Q(core_percent__gte=0) & Q(instance_count__gte=0), name="quota_non_negative"
            ),
            models.CheckConstraint(condition=Q(sessions_per_student__gte=1), name="quota_sessions_per_student_positive"),
            models.CheckConstraint(condition=Q(max_session_minutes__gte=1), name="quota_max_minutes_positive"),
            # memory is reserved in 128 MiB units, so a guarantee off that grid is a typo.
            models.CheckConstraint(condition=Exact(Mod("memory_mib", 128), 0), name="quota_memory_128mib_multiple"),
        ]

    def __str__(self) -> str:
        return f"quota of {self.course.code}"

    # What ``clean()`` checks against besides the quota's own values, when its caller knows it
    # (the admin: the cluster's caps and the allotment); not stored.
    check_context: QuotaContext | None = None

    def clean(self) -> None:
        """The quota's rules (``labs.domain.quota_spec``): ranges, the 128 MiB grid, lending
        within the guarantee, borrowing only in a cohort, a cohort of this institution's; and the
        cluster's caps and the allotment when ``check_context`` holds them."""
        values = {
            name: getattr(self, name)
            for name in QUOTA_FIELDS
            if getattr(self, name) is not None or FIELD[name].optional  # a required one empty: the field's own error
        }
        context = self.check_context
        if context is None:
            institution_id = self.course.institution_id if self.course_id else None
            taken = bool(self.cohort and institution_id) and cohort_of_another_institution(self.cohort, institution_id)
            context = QuotaContext(cohort_taken=taken)
        errors = quota_errors(values, context)
        if errors:
            raise ValidationError({name: [e.render(gettext) for e in found] for name, found in errors_by_field(errors).items()})


# Courses of one cohort lend each other idle quota: a cohort belongs to one institution, or a
# course of another could borrow what this one guarantees by naming its cohort.
def cohort_of_another_institution(cohort: str, institution_id: int) -> bool:
    """Whether a course of another institution than ``institution_id`` is in ``cohort``."""
    return CourseQuota.objects.filter(cohort=cohort).exclude(course__institution_id=institution_id).exists()
