"""The portal's Prometheus endpoint: what the ledger and the reconciler know, read at scrape time.

``GET /metrics`` with ``Authorization: Bearer <METRICS_TOKEN>``. Without a token configured the
endpoint is closed (403) unless ``DEBUG`` is on, so a production portal never shows its cluster
to whoever finds the URL.

Every value is read from the database when Prometheus scrapes (``labs.selectors.metrics``), not
counted in memory: the portal runs several processes (web replicas, workers, beat) and an
in-process counter would only know its own process's part. So rates and quantiles are computed
from timestamps the ledger keeps (``LabSession.admitted_at``), and counters are totals of rows
(``RepairEvent``). Every web replica answers the same numbers: aggregate them with ``max``, not
``sum``. docs/operations.md "Metrics" lists every metric.
"""

from __future__ import annotations

import hmac
import math
from collections.abc import Sequence
from datetime import datetime, timedelta

from django.conf import settings
from django.http import HttpRequest, HttpResponse
from django.utils import timezone
from django.views.decorators.http import require_GET

from labs.domain.states import SessionState
from labs.exposition import CONTENT_TYPE, Family, render
from labs.selectors import metrics as ledger
from labs.selectors.usage import usage_totals_by_institution

MIB = 1024 * 1024
# Admission rates over these windows (label value, seconds).
ADMISSION_WINDOWS = (("1m", 60), ("5m", 300))
# Queue-wait quantiles are over the sessions admitted in the last WAIT_WINDOW_SECONDS.
WAIT_WINDOW_SECONDS = 300
WAIT_QUANTILES = (0.5, 0.9, 0.99)
CARD_LABELS = ("node", "card")
COURSE_LABELS = ("institution", "course", "term")


def quantile(values: Sequence[float], q: float) -> float:
    """The ``q``-quantile (0 ≤ q ≤ 1) of ``values``, interpolating linearly between closest ranks.

    The same definition as numpy's default and PostgreSQL's ``percentile_cont``; NaN for no values.
    """
    if not 0 <= q <= 1:
        raise ValueError(f"quantile {q} is not between 0 and 1")
    if not values:
        return math.nan
    ordered = sorted(values)
    rank = q * (len(ordered) - 1)
    low = math.floor(rank)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (rank - low)


def ledger_families(now: datetime) -> list[Family]:
    """Every family the portal exports, from the ledger at ``now``; docs/operations.md "Metrics" says what each is."""
    return [*_cards(), *_nodes(), *_sessions(now), *_admissions(now), *_repairs(now), *_usage(now)]


def _usage(now: datetime) -> list[Family]:
    core = Family(
        "npu_lab_usage_core_percent_seconds_total",
        "counter",
        "AI Core held by sessions, in % of one card x seconds, since the ledger began, by institution",
        ("institution",),
    )
    memory = Family(
        "npu_lab_usage_memory_mib_seconds_total",
        "counter",
        "NPU memory held by sessions, in MiB x seconds, since the ledger began, by institution",
        ("institution",),
    )
    for slug, totals in sorted(usage_totals_by_institution(now=now).items()):
        core.add((slug,), round(totals.core_percent_seconds))
        memory.add((slug,), round(totals.memory_mib_seconds))
    return [core, memory]


def _cards() -> list[Family]:
    core = Family(
        "npu_lab_card_core_reserved_ratio",
        "gauge",
        "Sum of the AI Core floors of the instances the ledger has on the card, as a fraction of the card",
        CARD_LABELS,
    )
    memory = Family(
        "npu_lab_card_memory_reserved_bytes",
        "gauge",
        "Sum of the memory caps of the instances the ledger has on the card",
        CARD_LABELS,
    )
    instances = Family(
        "npu_lab_card_instances", "gauge", "Instances the ledger has on the card (unreleased allocations)", CARD_LABELS
    )
    limit = Family(
        "npu_lab_card_instance_limit",
        "gauge",
        "Instances the card may hold: 16, or 8 once an inference instance is on it",
        CARD_LABELS,
    )
    capacity = Family("npu_lab_card_memory_bytes", "gauge", "Usable memory of the card", CARD_LABELS)
    healthy = Family(
        "npu_lab_card_healthy",
        "gauge",
        "1 when the card takes new placements: healthy for its agent and not marked unhealthy by an operator",
        CARD_LABELS,
    )
    by_status = Family(
        "npu_lab_cards",
        "gauge",
        "Cards by status: healthy, unhealthy (as the node's agent reports) or disabled (marked unhealthy by an operator)",
        ("status",),
    )
    used = Family(
        "npu_lab_card_memory_used_bytes",
        "gauge",
        "Device memory (HBM) in use on the card as its node's agent last read it (npu-smi); no sample until it reports",
        CARD_LABELS,
    )
    temperature = Family(
        "npu_lab_card_temperature_celsius",
        "gauge",
        "The card's temperature as its node's agent last read it (npu-smi Temp(C)); no sample when not reported",
        CARD_LABELS,
    )
    power = Family(
        "npu_lab_card_power_watts",
        "gauge",
        "The card's power draw as its node's agent last read it (npu-smi Power(W)); no sample when not reported",
        CARD_LABELS,
    )
    counts = dict.fromkeys(ledger.CardStatus, 0)
    for card in ledger.card_use():
        labels = (card.node, str(card.index))
        core.add(labels, card.core_percent_reserved / 100)
        memory.add(labels, card.memory_mib_reserved * MIB)
        instances.add(labels, card.instances)
        limit.add(labels, card.instance_limit)
        capacity.add(labels, card.memory_mib * MIB)
        healthy.add(labels, 1 if card.status == ledger.CardStatus.HEALTHY else 0)
        # Not reported is no sample, never a made-up 0.
        if card.memory_mib_used is not None:
            used.add(labels, card.memory_mib_used * MIB)
        if card.temperature_celsius is not None:
            temperature.add(labels, card.temperature_celsius)
        if card.power_milliwatts is not None:
            power.add(labels, card.power_milliwatts / 1000)
        counts[card.status] += 1
    for status, n in counts.items():
        by_status.add((status.value,), n)
    return [core, memory, instances, limit, capacity, healthy, by_status, used, temperature, power]


def _nodes() -> list[Family]:
    available = Family("npu_lab_node_available", "gauge", "1 when the node takes new placements", ("node",))
    by_status = Family(
        "npu_lab_nodes",
        "gauge",
        "Nodes by status: available, drained (by an operator) or unavailable (its agent does not answer)",
        ("status",),
    )
    info = Family(
        "npu_lab_node_info",
        "gauge",
        "Always 1; the labels say what the node runs as its agent last read it (empty: not reported)",
        ("node", "driver_version", "firmware_version", "npu_smi_version"),
    )
    counts = dict.fromkeys(ledger.NodeStatus, 0)
    for node in ledger.node_statuses():
        available.add((node.name,), 1 if node.status == ledger.NodeStatus.AVAILABLE else 0)
        info.add((node.name, node.driver_version, node.firmware_version, node.npu_smi_version), 1)
        counts[node.status] += 1
    for status, n in counts.items():
        by_status.add((status.value,), n)
    return [available, by_status, info]


def _sessions(now: datetime) -> list[Family]:
    sessions = Family("npu_lab_sessions", "gauge", "Open lab sessions by state", ("state",))
    by_course = Family(
        "npu_lab_course_sessions",
        "gauge",
        "Open lab sessions by course and state (state queued: the course's queue length)",
        (*COURSE_LABELS, "state"),
    )
    oldest = Family(
        "npu_lab_queue_oldest_age_seconds",
        "gauge",
        "How long the course's oldest queued session has waited since its launch (0: nothing queued)",
        COURSE_LABELS,
    )
    totals: dict[SessionState, int] = {}
    for course in ledger.open_sessions_by_course():
        labels = (course.course.institution, course.course.code, course.course.term)
        for state, n in course.by_state.items():
            by_course.add((*labels, state.value), n)
            totals[state] = totals.get(state, 0) + n
        waited = (now - course.oldest_queued_at).total_seconds() if course.oldest_queued_at else 0.0
        oldest.add(labels, max(0.0, waited))
    for state in ledger.OPEN_STATES:
        sessions.add((state.value,), totals.get(state, 0))
    failed = Family("npu_lab_sessions_failed_total", "counter", "Lab sessions that ended failed")
    failed.add((), ledger.failed_sessions())
    return [sessions, by_course, oldest, failed]


def _admissions(now: datetime) -> list[Family]:
    longest = max(WAIT_WINDOW_SECONDS, *(seconds for _, seconds in ADMISSION_WINDOWS))
    recent = ledger.admissions_since(now - timedelta(seconds=longest))
    rate = Family(
        "npu_lab_admissions_per_second",
        "gauge",
        "Sessions admitted (queued to admitted) per second, averaged over the window",
        ("window",),
    )
    for window, seconds in ADMISSION_WINDOWS:
        since = now - timedelta(seconds=seconds)
        rate.add((window,), sum(1 for a in recent if a.admitted_at >= since) / seconds)
    wait = Family(
        "npu_lab_queue_wait_seconds",
        "gauge",
        f"Queue wait (launch to admission) of the sessions admitted in the last {WAIT_WINDOW_SECONDS} s, by quantile",
        ("quantile",),
    )
    since = now - timedelta(seconds=WAIT_WINDOW_SECONDS)
    waits = [a.wait_seconds for a in recent if a.admitted_at >= since]
    # Nothing admitted in the window: no sample, rather than a made-up 0.
    if waits:
        for q in WAIT_QUANTILES:
            wait.add((str(q),), max(0.0, quantile(waits, q)))
    return [rate, wait]


def _repairs(now: datetime) -> list[Family]:
    repairs = Family(
        "npu_lab_repair_events_total", "counter", "Repair events the reconciler and the agent sync recorded, by kind", ("kind",)
    )
    for kind, n in ledger.repair_event_totals().items():
        repairs.add((kind,), n)
    breaches = Family(
        "npu_lab_guarantee_breaches",
        "gauge",
        "Instances whose AI Core floor was not delivered, recorded over the last guarantee window, by node",
        ("node",),
    )
    for name, n in ledger.guarantee_breaches_since(now - timedelta(seconds=settings.LAB_GUARANTEE_WINDOW_SECONDS)):
        breaches.add((name or "",), n)
    pending = Family(
        "npu_lab_reclaims_pending",
        "gauge",
        "Borrowed sessions warned that another course needs their capacity back, not yet stopped",
    )
    pending.add((), ledger.reclaims_pending())
    suspect = Family(
        "npu_lab_cards_isolation_suspect",
        "gauge",
        "Cards where a session's isolation self-test saw more NPU memory than its cap, until an operator clears them",
    )
    suspect.add((), ledger.isolation_suspect_cards())
    stops = Family(
        "npu_lab_policy_stops_total",
        "counter",
        "Sessions a policy stopped: their maximum length (lifetime), their student's weekly budget, a reclaim",
        ("policy",),
    )
    for policy, n in ledger.policy_stops().items():
        stops.add((policy,), n)
    reserved = ledger.reservation_totals()
    reservations = [
        Family("npu_lab_reservation_starts_total", "counter", "Sessions pre-started for class reservations"),
        Family(
            "npu_lab_reservation_claims_total",
            "counter",
            "Pre-started sessions handed to a student who launched during the class (reservations honoured)",
        ),
        Family(
            "npu_lab_reservation_unclaimed_total",
            "counter",
            "Pre-started sessions stopped because no student claimed them within the grace time",
        ),
    ]
    for family, key in zip(reservations, ("starts", "claims", "unclaimed"), strict=True):
        family.add((), reserved[key])
    return [repairs, breaches, pending, suspect, stops, *reservations]


def scrape_refusal(authorization: str, *, token: str, debug: bool) -> HttpResponse | None:
    """The answer to a scrape that may not see the metrics, or ``None`` when it may.

    With a token configured, the request must carry it as a bearer token (401 otherwise). With
    none, the endpoint is open only under ``DEBUG`` and closed (403) everywhere else.
    """
    if not token:
        if debug:
            return None
        return HttpResponse(
            "/metrics is closed: set METRICS_TOKEN (or METRICS_TOKEN_FILE) and scrape with Authorization: Bearer <token>\n",
            status=403,
            content_type="text/plain",
        )
    scheme, _, sent = authorization.partition(" ")
    if scheme.lower() == "bearer" and hmac.compare_digest(sent.strip().encode(), token.encode()):
        return None
    response = HttpResponse("unauthorized\n", status=401, content_type="text/plain")
    response["WWW-Authenticate"] = 'Bearer realm="metrics"'
    return response


@require_GET
def metrics(request: HttpRequest) -> HttpResponse:
    refusal = scrape_refusal(request.headers.get("Authorization", ""), token=settings.METRICS_TOKEN, debug=settings.DEBUG)
    if refusal is not None:
        return refusal
    return HttpResponse(render(ledger_families(timezone.now())), content_type=CONTENT_TYPE)
