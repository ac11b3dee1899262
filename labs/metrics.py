"""The portal's Prometheus endpoint: what the ledger and the reconciler know, read at scrape time.

``GET /metrics``; when ``METRICS_TOKEN`` is set, a scrape must send ``Authorization: Bearer``
with it.
"""

from __future__ import annotations

import hmac
from datetime import timedelta

from django.conf import settings
from django.db.models import Count
from django.http import HttpRequest, HttpResponse
from django.utils import timezone
from django.views.decorators.http import require_GET
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest
from prometheus_client.core import GaugeMetricFamily

from labs.models import LabSession, Node, RepairEvent


class LedgerCollector:
    def collect(self):
        sessions = GaugeMetricFamily("npu_lab_sessions", "Lab sessions by state", labels=["state"])
        counts = dict(LabSession.objects.values_list("state").annotate(n=Count("id")).values_list("state", "n"))
        for state in LabSession.State.values:
            sessions.add_metric([state], counts.get(state, 0))
        yield sessions

        available = GaugeMetricFamily("npu_lab_node_available", "1 when the node takes new placements", labels=["node"])
        for name, is_available in Node.objects.values_list("name", "available"):
            available.add_metric([name], 1 if is_available else 0)
        yield available

        window = timezone.now() - timedelta(seconds=settings.LAB_GUARANTEE_WINDOW_SECONDS)
        breaches = GaugeMetricFamily(
            "npu_lab_guarantee_breaches",
            "Instances whose AI Core floor was not delivered over the last guarantee window",
            labels=["node"],
        )
        recent = (
            RepairEvent.objects.filter(kind=RepairEvent.Kind.GUARANTEE_BREACH, created_at__gte=window)
            .values_list("node__name")
            .annotate(n=Count("id"))
        )
        for name, n in recent:
            breaches.add_metric([name or ""], n)
        yield breaches


@require_GET
def metrics(request: HttpRequest) -> HttpResponse:
    token = settings.METRICS_TOKEN
    if token:
        sent = request.headers.get("Authorization", "").removeprefix("Bearer ")
        if not hmac.compare_digest(sent.encode(), token.encode()):
            return HttpResponse("unauthorized\n", status=401, content_type="text/plain")
    registry = CollectorRegistry(auto_describe=False)
    registry.register(LedgerCollector())
    return HttpResponse(generate_latest(registry), content_type=CONTENT_TYPE_LATEST)
