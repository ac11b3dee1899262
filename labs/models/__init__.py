from labs.models.catalog import LabTemplate
from labs.models.cluster import Card, Node
from labs.models.operations import InstanceSample, RepairEvent, ResidualCandidate
from labs.models.sessions import Allocation, LabSession
from labs.models.tenancy import Course, CourseQuota, Enrollment, Institution

__all__ = [
    "Allocation",
    "Card",
    "Course",
    "CourseQuota",
    "Enrollment",
    "InstanceSample",
    "Institution",
    "LabSession",
    "LabTemplate",
    "Node",
    "RepairEvent",
    "ResidualCandidate",
]
