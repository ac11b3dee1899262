"""Sending work to the Celery workers, by task name, once the current transaction commits.

Services never import tasks: they call ``controller_wake()`` here. A wake is sent with
``transaction.on_commit(..., robust=True)``, so a broker that is down when a launch commits
costs a log line, not the launch: the session stays queued and the controller's next beat (or
the next wake that gets through) admits it.

While labs are starting or stopping, a run also asks for one follow-up run shortly after
(``controller_follow_up``), so progress does not wait for beat; beat is the backstop.

Wakes are coalesced. Each wake bumps a generation counter in Redis and sends the controller
task only if none is queued already (a key set with NX). The controller reads the counter
before and after a run and runs again when it moved, so a wake that arrives while it runs is
never lost, and a burst of 500 launches queues one or two controller runs, not 500. A run
that finds another holding the controller's lock leaves the marker set for the holder to
clear (``controller_done``), so a long round does not draw a new run for every launch.
"""

from __future__ import annotations

import logging
from functools import lru_cache

import redis
from django.conf import settings
from django.db import transaction

logger = logging.getLogger(__name__)

CONTROLLER_TASK = "labs.tasks.controller"
GENERATION_KEY = "npu-lab:controller:generation"
QUEUED_KEY = "npu-lab:controller:queued"
FOLLOW_UP_KEY = "npu-lab:controller:follow-up"
# A queued marker outlives a lost task by at most this long; beat runs the controller anyway.
QUEUED_TTL_SECONDS = 30


@lru_cache(maxsize=1)
def _redis() -> redis.Redis:
    # Short timeouts: a Redis outage must not hold up a web request for long.
    return redis.Redis.from_url(settings.CELERY_BROKER_URL, socket_timeout=1, socket_connect_timeout=1)


# A wake counts itself, then marks a controller run queued unless one already is (answers 1 if
# this wake marked it), in one command: INCR then SET NX were two round trips, ~0.24 ms of a web
# process's CPU for every launch and stop on the build machine, one is ~0.12. A failed INCR marks nothing.
_WAKE = """
redis.call('INCR', KEYS[1])
if redis.call('SET', KEYS[2], 1, 'NX', 'EX', ARGV[1]) then return 1 end
return 0
"""


@lru_cache(maxsize=1)
def _wake_script():
    return _redis().register_script(_WAKE)


def send(task_name: str, *args: object, countdown: float | None = None) -> bool:
    """Send ``task_name`` (now, or in ``countdown`` seconds); ``False`` (and a warning) when the broker cannot take it."""
    from celery import current_app as app  # portal/celery.py's: the settings package (portal) loads it

    try:
        app.send_task(task_name, args=args, retry=False, countdown=countdown)
    except Exception as exc:  # kombu and redis raise many kinds for a broker that is down
        logger.warning("could not send %s to the broker: %s", task_name, exc)
        return False
    return True


def session_ended(session_id) -> None:
    """A session reached a terminal state (inside the transaction that moved it): call each of
    ``settings.LAB_SESSION_ENDED_HOOKS`` (dotted paths) with its id. A hook only queues work on
    commit (e.g. the LMS score, ``lti.hooks.session_ended``): it must not block the caller."""
    for hook in _session_ended_hooks():
        hook(session_id)


@lru_cache(maxsize=1)
def _session_ended_hooks() -> tuple:
    from django.utils.module_loading import import_string

    return tuple(import_string(path) for path in settings.LAB_SESSION_ENDED_HOOKS)


def controller_wake() -> None:
    """Make sure the controller runs soon after the current transaction commits."""
    transaction.on_commit(_wake_now, robust=True)


def _wake_now() -> None:
    if settings.CELERY_TASK_ALWAYS_EAGER:
        send(CONTROLLER_TASK)
        return
    try:
        client = _redis()
        if not _wake_script()(keys=[GENERATION_KEY, QUEUED_KEY], args=[QUEUED_TTL_SECONDS], client=client):
            return  # a controller run is queued and will see the new generation
    except redis.RedisError as exc:
        logger.warning("could not wake the controller: %s", exc)
        return
    if not send(CONTROLLER_TASK):
        # Let the next wake try to send again instead of waiting for the marker to expire.
        try:
            client.delete(QUEUED_KEY)
        except redis.RedisError:
            pass


def controller_follow_up(seconds: float) -> None:
    """Run the controller again in ``seconds`` (a lab is starting or stopping): one such run pending at a time."""
    if settings.CELERY_TASK_ALWAYS_EAGER:
        return  # an eager run would recurse; tests and the shell call the controller themselves
    try:
        if not _redis().set(FOLLOW_UP_KEY, 1, nx=True, px=max(1, int(seconds * 1000))):
            return
    except redis.RedisError as exc:
        logger.warning("could not schedule the controller's follow-up: %s", exc)
        return
    send(CONTROLLER_TASK, countdown=seconds)


def controller_generation() -> int | None:
    """How many wakes there have been; ``None`` when Redis does not answer."""
    try:
        return int(_redis().get(GENERATION_KEY) or 0)
    except redis.RedisError:
        return None


def controller_dequeued() -> None:
    """Called as a controller run's round starts (holding the lock): a wake from now on queues a new run."""
    try:
        _redis().delete(QUEUED_KEY)
    except redis.RedisError:
        pass


def controller_done(seen: int | None) -> None:
    """A controller run ends; ``seen`` is the generation its last round started at.

    Clears the queued marker (a run that skipped because this one held the lock left it set)
    and, when a wake came since ``seen``, sends a new run for it: no wake is lost between the
    last round and the end of the run.
    """
    controller_dequeued()
    if settings.CELERY_TASK_ALWAYS_EAGER:
        return  # an eager run would recurse; tests and the shell call the controller themselves
    now = controller_generation()
    if seen is not None and now is not None and now != seen:
        _wake_now()


# -- the cluster's pace --------------------------------------------------------------------------
# How long the driver's calls take is the cluster's, not one process's: each process that made
# calls says how slow its latest were, and a process that has made none yet (a prefork child's
# first controller run) paces its first batch by that instead of by a fixed floor.
PACE_KEY = "npu-lab:controller:driver-pace"
PACE_TTL_SECONDS = 600


def driver_pace_share(seconds: float) -> None:
    """Say that the driver's calls took up to ``seconds`` lately (read by ``driver_pace``)."""
    try:
        _redis().set(PACE_KEY, f"{seconds:.6f}", ex=PACE_TTL_SECONDS)
    except redis.RedisError:
        pass


def driver_pace() -> float | None:
    """The slowest of the driver's latest calls, as a process that made them said within
    ``PACE_TTL_SECONDS``; ``None`` when none did or Redis does not answer."""
    try:
        value = _redis().get(PACE_KEY)
    except redis.RedisError:
        return None
    try:
        return float(value) if value is not None else None
    except ValueError:
        return None


def driver_pace_forget() -> None:
    try:
        _redis().delete(PACE_KEY)
    except redis.RedisError:
        pass


# -- the processes holding create leases ---------------------------------------------------------
# A process with driver calls out says so every second (``holder_beat``), under a key that ends
# ``HOLDER_TTL_SECONDS`` later: a lease whose holder's key is gone belongs to a process that died.
HOLDER_KEY = "npu-lab:controller:holder:"
HOLDER_TTL_SECONDS = 3


def holder_beat(holder: str) -> bool:
    """Say that ``holder`` (a process) is alive for the next ``HOLDER_TTL_SECONDS``; ``False`` when Redis does not answer."""
    try:
        _redis().set(HOLDER_KEY + holder, 1, ex=HOLDER_TTL_SECONDS)
    except redis.RedisError:
        return False
    return True


def holders_alive(holders: set[str]) -> set[str] | None:
    """The ``holders`` that said they were alive within ``HOLDER_TTL_SECONDS``; ``None`` when Redis does
    not answer (then nobody may be taken for dead)."""
    if not holders:
        return set()
    names = sorted(holders)
    try:
        values = _redis().mget([HOLDER_KEY + name for name in names])
    except redis.RedisError:
        return None
    return {name for name, value in zip(names, values, strict=True) if value is not None}
