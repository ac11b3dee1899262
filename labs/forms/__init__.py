"""Forms: the launch button and the instructor console. Every value is checked here with a message
that says what is wrong and what would be right; the services write what passed.

``courses`` (a course and its quota), ``lab_templates`` (a course's own templates and the "how many
fit" preview), ``students`` (roster, roles, budget grants, reservations).
"""

from labs.forms.courses import (
    COURSE_CODE,
    CoresField,
    CourseForm,
    GiBField,
    LaunchForm,
    QuotaForm,
    amount_text,
    filter_text,
    quota_form_field,
    quota_messages,
)
from labs.forms.endpoint import EndpointForm
from labs.forms.lab_templates import (
    HOST_GIB_MAX,
    HOST_GIB_MIN,
    PreviewForm,
    TemplateForm,
    allowed_label,
    scenario_field,
)
from labs.forms.students import (
    MAX_RESERVED_SESSIONS,
    WEEKDAYS,
    BudgetGrantForm,
    ReservationForm,
    RoleForm,
    RosterAddForm,
    RosterImportForm,
)

__all__ = [
    "COURSE_CODE",
    "HOST_GIB_MAX",
    "HOST_GIB_MIN",
    "MAX_RESERVED_SESSIONS",
    "WEEKDAYS",
    "BudgetGrantForm",
    "CoresField",
    "CourseForm",
    "EndpointForm",
    "GiBField",
    "LaunchForm",
    "PreviewForm",
    "QuotaForm",
    "ReservationForm",
    "RoleForm",
    "RosterAddForm",
    "RosterImportForm",
    "TemplateForm",
    "allowed_label",
    "amount_text",
    "filter_text",
    "quota_form_field",
    "quota_messages",
    "scenario_field",
]
