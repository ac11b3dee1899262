"""LTI Celery tasks: ids in, re-fetch, call a service. Errors are logged by type and HTTP status
only (lti.services._safe_error): never a token, a key or a response body."""

from __future__ import annotations

import logging

from celery import shared_task

from lti import dynamic_registration, outbox, services

logger = logging.getLogger(__name__)


@shared_task(name="lti.tasks.score_post")
def score_post_task(session_id: str) -> bool:
    """One attempt at the session's score, if it is due (its retries are on the row, not here)."""
    return outbox.score_attempt(session_id=session_id) is True


@shared_task(name="lti.tasks.scores_pending")
def scores_pending_task() -> int:
    """Beat's sweep: send the scores that are due and held by no worker (a send lost with the
    process that ended the session, a retry whose task was lost, a killed worker's once its lease ran out)."""
    from labs.dispatch import send

    ids = outbox.scores_due()
    for session_id in ids:
        send(outbox.SCORE_TASK, str(session_id))
    return len(ids)


@shared_task(name="lti.tasks.roster_sync")
def roster_sync_task(context_id: int) -> dict[str, int]:
    try:
        report = services.roster_sync_from_platform(context_id=context_id)
    except Exception as exc:
        logger.warning("LTI roster sync of context %s failed: %s", context_id, services._safe_error(exc))
        return {}
    return {"added": report.added, "changed": report.changed, "removed": report.removed}


@shared_task(name="lti.tasks.roster_sync_all")
def roster_sync_all_task() -> int:
    from labs.dispatch import send

    ids = list(services.contexts_to_sync())
    for context_id in ids:
        send("lti.tasks.roster_sync", context_id)
    return len(ids)


@shared_task(name="lti.tasks.launch_data_prune")
def launch_data_prune_task() -> int:
    """Expired OIDC state, nonces and launches, and expired Dynamic Registration links."""
    return services.launch_data_prune() + dynamic_registration.links_prune()


@shared_task(name="lti.tasks.scores_prune")
def scores_prune_task() -> int:
    return outbox.scores_prune()
