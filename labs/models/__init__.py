from labs.models import lookups  # noqa: F401  (registers field__one_of)
from labs.models.catalog import AllowedImage, LabTemplate
from labs.models.cluster import Card, Node
from labs.models.gateway import CourseEndpoint, EndpointKey, TokenUsage
from labs.models.operations import AuditEvent, InstanceSample, RepairEvent, ResidualCandidate
from labs.models.reservations import Reservation, ReservationSlot
from labs.models.sessions import Allocation, LabSession
from labs.models.tenancy import Affiliation, Course, CourseQuota, Enrollment, Institution, InstitutionRole
from labs.models.usage import BudgetGrant, UsageRecord

__all__ = [
    "Affiliation",
    "AllowedImage",
    "BudgetGrant",
    "AuditEvent",
    "Allocation",
    "Card",
    "Course",
    "CourseEndpoint",
    "CourseQuota",
    "EndpointKey",
    "Enrollment",
    "InstanceSample",
    "Institution",
    "InstitutionRole",
    "LabSession",
    "LabTemplate",
    "Node",
    "RepairEvent",
    "Reservation",
    "ReservationSlot",
    "ResidualCandidate",
    "TokenUsage",
    "UsageRecord",
]
