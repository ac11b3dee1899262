"""The isolation self-test: what a lab reports it can see of the NPU, compared with its share.

A lab runs ``python -m nodeagent selftest`` at start (the lab images' entrypoint) and posts the
NPU memory it can see and, when probed, whether it could allocate past its cap. A session that
sees more than its cap, or allocated past it, breaks isolation: the session is flagged, its card
marked suspect (an operator clears it, audited), and a ``isolation_breach`` repair event recorded.
The simulator driver reports through ``selftest_record`` too, so the demo shows the result.
"""

from __future__ import annotations

import hmac
from dataclasses import dataclass

from django.db import transaction
from django.utils import timezone

from labs.drivers import get_driver
from labs.models import Card, LabSession, RepairEvent
from labs.selectors.rows import one
from labs.services.audit import audit_record
from labs.services.events import cluster_changed_publish
from labs.services.rows import rows_update

# A report is accepted while the lab is up or coming up; an ended session changes nothing.
OPEN_STATES = ("starting", "running", "stopping")
# Far above any device (1 PiB), and within the column (a bigint): a larger figure is a bad report.
MAX_VISIBLE_MIB = 2**30


class SelftestRejected(Exception):
    """The report changes nothing: ``status`` is the HTTP status, ``message`` says why (never the secret)."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


@dataclass(frozen=True)
class SelftestVerdict:
    session_id: str
    cap_mib: int
    visible_mib: int
    probe_exceeded: bool | None
    over_cap: bool


def selftest_record(*, session_id: str, secret: str, visible_mib: object, probe_exceeded: object = None) -> SelftestVerdict:
    """Store a lab's self-test on its session and judge it against the share's memory cap.

    ``secret`` is the session's own (its Jupyter token / vLLM API key), compared in constant
    time. ``visible_mib`` is a non-negative int; ``probe_exceeded`` is ``True`` (allocating past
    the cap succeeded), ``False`` (refused) or ``None`` (not probed). ``SelftestRejected``
    (404 unknown session or wrong secret, 409 ended session, 400 bad values) changes nothing.
    Over the cap (visible > cap where the driver says the runtime reports the cap, or the probe
    got past it): the session is flagged, its card
    marked ``isolation_suspect`` and an ``isolation_breach`` repair event recorded, once per session.
    """
    if not isinstance(visible_mib, int) or isinstance(visible_mib, bool) or not 0 <= visible_mib <= MAX_VISIBLE_MIB:
        raise SelftestRejected(
            400, f"visible_mib must be a whole number of MiB from 0 to {MAX_VISIBLE_MIB}, got {visible_mib!r:.40}"
        )
    if probe_exceeded not in (None, True, False):
        raise SelftestRejected(400, f"probe_exceeded must be true, false or null, got {probe_exceeded!r}")
    with transaction.atomic():
        session = one(_locked_sessions([session_id]))
        # An unknown session and a wrong secret answer alike, so a report cannot probe for ids.
        if session is None or not hmac.compare_digest(session.secret.encode(), str(secret).encode()):
            raise SelftestRejected(404, "no lab session with this id and secret")
        allocation = getattr(session, "allocation", None)
        if session.state not in OPEN_STATES or allocation is None:
            raise SelftestRejected(409, f"the session is {session.state}: its self-test is no longer taken")
        verdict = _judge(session, allocation, visible_mib, probe_exceeded)
        session.save(update_fields=SELFTEST_FIELDS)
    return verdict


def selftests_record(visible_mib: dict[str, int]) -> list[SelftestVerdict]:
    """The simulator's labs' self-tests, many at once (the controller, as it binds them): no secret
    (the caller is the portal itself), the same judgement, one read and one write. Sessions that
    ended meanwhile are left out.

    A class start records hundreds at a time: the rows are read as the few values the judgement
    needs, not as sessions with their allocation, card and node (which cost the controller more
    than the rest of a create's answer). A first breach, which marks the card and records a
    repair event, is judged on the session itself, as ``selftest_record`` judges it."""
    if not visible_mib:
        return []
    verdicts = []
    judges_visible: dict[int, bool] = {}
    with transaction.atomic():
        rows = (
            LabSession.objects.select_for_update(of=("self",))
            .filter(pk__one_of=list(visible_mib), state__in=OPEN_STATES, allocation__isnull=False)
            .order_by("pk")
            .values_list(
                "pk", "selftest_over_cap", "allocation__memory_mib", "allocation__card__node_id", "allocation__card__node__labels"
            )
        )
        now = timezone.now()
        judged = {}
        for pk, was_over, cap, node_id, labels in rows:
            visible = visible_mib[str(pk)]
            if node_id not in judges_visible:
                judges_visible[node_id] = _judges_visible(labels)
            over_cap = _over_cap(judges_visible[node_id], visible, cap, None)
            if over_cap and not was_over:
                session = _locked_sessions([pk]).get()  # locked already, by this transaction
                verdicts.append(_judge(session, session.allocation, visible, None))
                judged[pk] = {name: getattr(session, name) for name in SELFTEST_FIELDS}
                continue
            verdicts.append(SelftestVerdict(str(pk), cap, visible, None, over_cap))
            judged[pk] = {
                "selftest_at": now,
                "selftest_visible_mib": visible,
                "selftest_probe_exceeded": None,
                "selftest_over_cap": was_over or over_cap,
            }
        rows_update(LabSession, judged)
    return verdicts


SELFTEST_FIELDS = ["selftest_at", "selftest_visible_mib", "selftest_probe_exceeded", "selftest_over_cap"]


def _locked_sessions(session_ids: list[str]):
    return (
        LabSession.objects.select_for_update(of=("self",)).select_related("allocation__card__node").filter(pk__one_of=session_ids)
    )


def _judges_visible(labels: dict | None) -> bool:
    """Whether the memory a lab sees counts on a node with these labels. Where the runtime reports
    the whole card (FlexNPU), seeing more than the cap is by design; there only the probe (an
    allocation past the cap that succeeds) shows a breach."""
    return get_driver().memory_seen(labels or {}) == "cap"


def _over_cap(judges_visible: bool, visible_mib: int, cap: int, probe_exceeded: bool | None) -> bool:
    return (judges_visible and visible_mib > cap) or probe_exceeded is True


def _judge(session: LabSession, allocation, visible_mib: int, probe_exceeded: bool | None) -> SelftestVerdict:
    """Set the self-test fields on ``session`` (the caller saves them); over the cap the first time,
    mark the card suspect and record the breach (in the caller's transaction)."""
    cap = allocation.memory_mib
    over_cap = _over_cap(_judges_visible(allocation.card.node.labels), visible_mib, cap, probe_exceeded)
    newly_over = over_cap and not session.selftest_over_cap
    session.selftest_at = timezone.now()
    session.selftest_visible_mib = visible_mib
    session.selftest_probe_exceeded = probe_exceeded
    session.selftest_over_cap = session.selftest_over_cap or over_cap
    if newly_over:
        card = allocation.card
        Card.objects.filter(pk=card.pk).update(isolation_suspect=True)
        probed = {True: "allocated past it", False: "could not allocate past it", None: "not probed"}[probe_exceeded]
        RepairEvent.objects.create(
            kind=RepairEvent.Kind.ISOLATION_BREACH,
            node=card.node,
            session=session,
            entity_id=allocation.entity_id,
            message=f"{card}: the session sees {visible_mib} MiB of NPU memory, its cap is {cap} MiB ({probed})",
        )
        cluster_changed_publish()
    return SelftestVerdict(str(session.pk), cap, visible_mib, probe_exceeded, over_cap)


def card_clear_isolation_suspect(*, card: Card, by) -> bool:
    """An operator has checked the card's isolation: clear the suspect mark (audited). False if it was not marked."""
    with transaction.atomic():
        changed = Card.objects.filter(pk=card.pk, isolation_suspect=True).update(isolation_suspect=False)
        if changed:
            audit_record(
                by=by,
                action="card.isolation_cleared",
                target=f"{card.node.name}/npu{card.index}",
                before={"isolation_suspect": True},
                after={"isolation_suspect": False},
            )
            cluster_changed_publish()
    return bool(changed)
