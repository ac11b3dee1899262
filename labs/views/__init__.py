"""The portal's HTML pages, one module for each kind of user: ``student`` (launching and using a
lab), ``instructor`` (the instructor console: a course, its quota, templates and live sessions)
with ``instructor_students`` (a course's roster, usage and reservations), and ``operator`` (the
operator console: the cluster, tenancy, repairs and the audit log).

The operator's pages that belong to another app live in that app, in a module named
``<what they manage>_pages``: ``api.token_pages``, ``lti.registration_pages`` and
``webhooks.subscription_pages``.
"""
