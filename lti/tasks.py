"""LTI Celery tasks: ids in, re-fetch, call a service. Errors are logged by type and HTTP status
only (lti.services._safe_error): never a token, a key or a response body."""

from __future__ import annotations

import logging

from celery import shared_task

from lti import services

logger = logging.getLogger(__name__)

SCORE_ATTEMPTS = 6


@shared_task(name="lti.tasks.score_post", bind=True, max_retries=SCORE_ATTEMPTS - 1)
def score_post_task(self, session_id: str) -> bool:
    try:
        return services.score_post(session_id=session_id)
    except Exception as exc:
        error = services._safe_error(exc)
        if self.request.retries >= self.max_retries:
            logger.warning("LTI score of session %s not posted, giving up: %s", session_id, error)
            services.score_give_up(session_id=session_id, error=error)
            return False
        logger.info("LTI score of session %s not posted yet (%s); retrying", session_id, error)
        raise self.retry(countdown=min(600, 10 * 2**self.request.retries), exc=None) from None


@shared_task(name="lti.tasks.scores_pending")
def scores_pending_task() -> int:
    """Backstop: post the scores of ended sessions whose task was lost."""
    from labs.dispatch import send

    ids = services.scores_owed()
    for session_id in ids:
        send("lti.tasks.score_post", str(session_id))
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
    return services.launch_data_prune()
