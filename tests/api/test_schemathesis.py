"""Generated requests from the served OpenAPI schema (Schemathesis), in this process against the
WSGI application: no answer is a 5xx, and every status, content type, header and body is one the
schema documents. Hypothesis is derandomized, so a run is the same every time.

The progress stream is left out (an open stream per case; tests/api/test_sessions.py covers it).
"""

from __future__ import annotations

import pytest
import schemathesis
from django.core import signals
from django.core.wsgi import get_wsgi_application
from django.db import close_old_connections
from hypothesis import HealthCheck, Phase, settings
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    response_headers_conformance,
    response_schema_conformance,
    status_code_conformance,
)

from api.scopes import SCOPES
from api.services import token_create
from labs.models import LabSession
from webhooks.models import Delivery
from webhooks.services import subscription_create

CHECKS = [
    not_a_server_error,
    status_code_conformance,
    content_type_conformance,
    response_headers_conformance,
    response_schema_conformance,
]
EXAMPLES_PER_OPERATION = 80
CASES: dict[str, int] = {}
STATUSES: dict[int, int] = {}


# Loaded at collection, from the application itself (no database needed for the schema).
schema = schemathesis.openapi.from_wsgi("/api/v1/schema/?format=json", get_wsgi_application()).exclude(path_regex=r"/progress$")


@pytest.fixture
def wsgi_in_test_transaction(world, settings):
    settings.API_THROTTLE_RATE = "1000000/minute"
    # As Django's test client does: the WSGI handler would close the test's connection (and its
    # transaction) at the end of every request.
    signals.request_started.disconnect(close_old_connections)
    signals.request_finished.disconnect(close_old_connections)
    yield
    signals.request_started.connect(close_old_connections)
    signals.request_finished.connect(close_old_connections)


@pytest.fixture
def bearer(world) -> dict[str, str]:
    _token, secret = token_create(institution=world["course"].institution, name="schemathesis", scopes=list(SCOPES))
    return {"Authorization": f"Bearer {secret}"}


@pytest.fixture
def real_ids(world) -> dict[str, str]:
    """Ids of objects that exist: every other case is sent to them, so not every case is a 404."""
    session = LabSession.objects.create(
        student=world["students"][0], course=world["course"], template=world["small"], state="running", secret="x"
    )
    subscription, _secret = subscription_create(
        institution=world["course"].institution, url="https://lms.example.edu/h", event_types=["session.ended"]
    )
    delivery = Delivery.objects.create(subscription=subscription, event_type="session.ended", payload={}, state="failed")
    return {
        "course_id": str(world["course"].pk),
        "session_id": str(session.pk),
        "webhook_id": str(subscription.pk),
        "delivery_id": str(delivery.pk),
    }


@pytest.mark.slow
@schema.parametrize()
@settings(
    max_examples=EXAMPLES_PER_OPERATION,
    derandomize=True,
    deadline=None,
    database=None,
    phases=[Phase.explicit, Phase.generate],
    suppress_health_check=list(HealthCheck),
)
def test_the_api_answers_as_its_schema_says(case, bearer, real_ids, wsgi_in_test_transaction):
    CASES[case.operation.label] = CASES.get(case.operation.label, 0) + 1
    if case.path_parameters and CASES[case.operation.label] % 2:
        case.path_parameters = {**case.path_parameters, **{k: v for k, v in real_ids.items() if k in case.path_parameters}}
    response = case.call_and_validate(headers=bearer, checks=CHECKS)
    STATUSES[response.status_code] = STATUSES.get(response.status_code, 0) + 1


@pytest.mark.slow
def test_enough_cases_were_generated():
    """Run after the generated tests (file order): at least 1,000 cases in all."""
    if not CASES:
        pytest.skip("run with the generated tests above")
    print(
        f"\nschemathesis: {sum(CASES.values())} cases over {len(CASES)} operations: {CASES}; statuses {sorted(STATUSES.items())}"
    )
    assert sum(CASES.values()) >= 1000
