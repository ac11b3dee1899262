from django import template

from lti.selectors import context_of_course

register = template.Library()


@register.inclusion_tag("lti/_roster_sync.html")
def lti_roster_sync(course, can_manage: bool):
    """The "sync from the LMS" button of a course linked to an LMS that offers its membership service."""
    context = context_of_course(course=course)
    return {"course": course, "context": context, "show": bool(can_manage and context and context.memberships_url)}
