"""Idempotency keys are remembered for their retention, then beat deletes them: old keys go, young
ones stay and still give their launch's session again."""

from __future__ import annotations

from datetime import timedelta

from django.conf import settings
from django.utils import timezone

from api.models import IdempotencyKey
from api.tasks import idempotency_keys_prune_task
from tests.api.test_sessions import launch_body


def launch(api, world, student: int, key: str):
    response = api.call("POST", "/api/v1/sessions/", launch_body(world, student), headers={"Idempotency-Key": key})
    assert response.status_code in (200, 201), response.content
    return response


def test_keys_older_than_their_retention_are_pruned_and_younger_ones_still_replay(api, world):
    launch(api, world, 0, "old")
    young = launch(api, world, 1, "young")
    now = timezone.now()
    IdempotencyKey.objects.filter(key="old").update(created_at=now - timedelta(hours=24, minutes=1))
    IdempotencyKey.objects.filter(key="young").update(created_at=now - timedelta(hours=23))

    assert idempotency_keys_prune_task.apply().get() == 1

    assert list(IdempotencyKey.objects.values_list("key", flat=True)) == ["young"]
    again = launch(api, world, 1, "young")
    assert again.status_code == 200 and again.json()["id"] == young.json()["id"]


def test_the_retention_comes_from_the_setting(api, world, settings):
    settings.API_IDEMPOTENCY_RETENTION_HOURS = 2
    launch(api, world, 0, "three-hours-old")
    IdempotencyKey.objects.update(created_at=timezone.now() - timedelta(hours=3))

    assert idempotency_keys_prune_task.apply().get() == 1
    assert not IdempotencyKey.objects.exists()


def test_beat_prunes_the_keys_every_hour():
    entry = settings.CELERY_BEAT_SCHEDULE["api-idempotency-prune"]
    assert entry == {"task": idempotency_keys_prune_task.name, "schedule": 3600.0}
