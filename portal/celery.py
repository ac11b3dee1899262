"""The Celery application: Redis broker, settings read from Django's ``CELERY_*`` names."""

import os

from celery import Celery
from celery.signals import task_postrun

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "portal.settings")

app = Celery("portal")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()


@task_postrun.connect
def connections_back_to_the_pool(sender=None, **kwargs) -> None:
    """After each task, the task's database connections go back to the process's pool, as a web
    request's do when it finishes (Django's ``close_old_connections``): the next task takes one
    from the pool, checked as it is handed out (portal/postgresql). Celery's Django fixup would
    close the pool itself after every task of a prefork process; ``CELERY_DB_REUSE_MAX``
    (portal/settings.py) keeps it open. Without a pool this closes the connection, as before.
    A task run eagerly is part of its caller's work and leaves the caller's connection alone."""
    if sender is None or getattr(sender.request, "is_eager", False):
        return
    from django.db import close_old_connections

    close_old_connections()
