"""The Celery application: Redis broker, settings read from Django's ``CELERY_*`` names."""

import os

from celery import Celery
from celery.signals import task_postrun, worker_process_init

from portal.collector import collector_tuned

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "portal.settings")

app = Celery("portal")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()


@worker_process_init.connect
def collector_tuned_in_the_worker(**kwargs) -> None:
    """Each worker process starts with Django, the models and the tasks loaded (the prefork pool
    forks it from the parent that loaded them): the collector set as in the web processes
    (``portal/collector.py``). Without it 8–9 % of the workers' CPU in a class start of 1,024 was
    the collector's: every full collection walked all of Django again."""
    collector_tuned()


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
