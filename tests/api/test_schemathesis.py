"""Generated requests from the served OpenAPI schema (Schemathesis), in this process against the
WSGI application, with every check Schemathesis has (its default: all of them): no 5xx; status,
content type, headers and body as documented (the progress stream's events included);
schema-valid requests accepted and schema-invalid ones refused; required headers; unsupported
methods answered 405 with Allow; authentication enforced (each success sent again without the
token and with a wrong one); another institution kept from an object; a created object there, a
deleted one gone.

Each operation gets positive and negative data from the examples, coverage and fuzzing phases;
then the stateful phase runs scenarios that follow the links between operations (the schema's
links from each 201, and those Schemathesis infers from lists and paths). Each case and each
scenario runs in a savepoint that is rolled back, and Hypothesis is derandomized: a run is the
same every time. A failure passes only when ALLOWED names it, each with why.

Every case is sent with a token of the world's institution; object_level_authorization sends a
read of what it made again with another institution's token, which must not get it. Not run:
``max_response_time``, which needs a limit that a shared CI machine would make flaky.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass

import pytest
import schemathesis
from django.core import signals
from django.core.wsgi import get_wsgi_application
from django.db import close_old_connections, transaction
from hypothesis import HealthCheck, settings
from schemathesis.core.failures import Failure, FailureGroup
from schemathesis.core.parameters import ParameterLocation
from schemathesis.wfc.escalation import EscalatingAuthProvider

from api.scopes import SCOPES
from api.serializers import QuotaSerializer
from api.services import token_create
from labs.models import LabSession
from webhooks.models import Delivery
from webhooks.services import subscription_create

# WSGI serves the progress stream's async iterator synchronously, and Django says so each time.
pytestmark = pytest.mark.filterwarnings("ignore:StreamingHttpResponse must consume asynchronous iterators")

EXAMPLES_PER_OPERATION = 60
SCENARIOS = 100
STEPS_PER_SCENARIO = 10
HYPOTHESIS = {
    "derandomize": True,
    "deadline": None,
    "database": None,
    "suppress_health_check": list(HealthCheck),
}
# Cases by operation, by generation mode and by phase; failures let through by the allow-list.
CASES: Counter[str] = Counter()
MODES: Counter[str] = Counter()
PHASES: Counter[str] = Counter()
ALLOWED_SEEN: Counter[str] = Counter()
STARTED: dict[str, float] = {}

# Loaded at collection, from the application itself (no database needed for the schema).
schema = schemathesis.openapi.from_wsgi("/api/v1/schema/?format=json", get_wsgi_application())


# --- what may fail, and why ----------------------------------------------------------------------

# Body and query fields a schema-valid request can still be refused for (400, naming the field),
# by rules the schema cannot state: each says which.
RULES_BEYOND_THE_SCHEMA = {
    # A code is unique per term in the institution; the last day is not before the first.
    "POST /api/v1/courses/": {"code", "ends_on"},
    "PUT /api/v1/courses/{course_id}/": {"code", "ends_on"},
    "PATCH /api/v1/courses/{course_id}/": {"code", "ends_on"},
    # Checked against the cluster's healthy cards, the nodes' memory step, the institution's
    # allotment and each other; a cohort is a slug of the institution.
    "PUT /api/v1/courses/{course_id}/quota/": {*QuotaSerializer().fields, "non_field_errors"},
    # The course, the template and the student must exist in the token's institution, the student enrolled.
    "POST /api/v1/sessions/": {"course", "template", "student"},
    # The template must be one of the token's institution.
    "POST /api/v1/courses/{course_id}/templates/": {"template"},
    # An https URL whose host resolves to public addresses; courses of the institution.
    "POST /api/v1/webhooks/": {"url", "courses"},
    "PATCH /api/v1/webhooks/{webhook_id}/": {"url", "courses"},
    # until after since.
    "GET /api/v1/courses/{course_id}/usage/": {"until"},
    # The first week from a year back to two years ahead (labs.forms.planner.plan_date_error).
    "GET /api/v1/courses/{course_id}/planner/": {"first"},
    # Those dates too; the last not before the first, within 26 weeks; the end after the start; the
    # template offered in the course; the course with a quota and the template on a share of one card.
    "GET /api/v1/courses/{course_id}/planner/what-if/": {"first", "last", "end", "template", "non_field_errors"},
}
# Refused in any string: PostgreSQL text cannot hold NUL; a string of spaces is a blank one.
STRING_RULES = {"Null characters are not allowed.", "This field may not be blank."}


def refused_fields(response) -> dict[str, list[str]]:
    try:
        return response.json()["error"]["fields"] if response.status_code == 400 else {}
    except (ValueError, KeyError, TypeError):  # not the API's error body: nothing to explain it by
        return {}


def refused_by_rules_beyond_the_schema(case, response) -> bool:
    fields = refused_fields(response)
    allowed = RULES_BEYOND_THE_SCHEMA.get(case.operation.label, set())
    return bool(fields) and all(
        name in allowed or set(messages) <= STRING_RULES for name, messages in fields.items()
    )


def sends_a_host_header(case, response) -> bool:
    return response.status_code == 400 and any(name.lower() == "host" for name in case.headers or {})


@dataclass(frozen=True)
class Allowance:
    check: str  # "*": any check
    why: str
    applies: Callable  # (case, response) -> bool


ALLOWED = [
    Allowance(
        "*",
        "a generated extra header that happens to be Host, naming a host the portal does not serve: "
        "Django refuses the request (400, DisallowedHost) before it reaches the API",
        sends_a_host_header,
    ),
    Allowance(
        "positive_data_acceptance",
        "a change needs If-Match with the current ETag (412 otherwise), which a generated header is not",
        lambda case, response: response.status_code == 412,
    ),
    Allowance(
        "positive_data_acceptance",
        "a 400 for a rule the schema cannot state (RULES_BEYOND_THE_SCHEMA, STRING_RULES)",
        refused_by_rules_beyond_the_schema,
    ),
    Allowance(
        "use_after_free",
        "DELETE archives a course: it stays readable, with archived_at, as documented",
        lambda case, response: case.operation.path.startswith("/api/v1/courses/{course_id}/"),
    ),
    Allowance(
        "ensure_resource_availability",
        "a new course has no quota until one is PUT: GET quota answers the documented 404",
        lambda case, response: case.operation.label == "GET /api/v1/courses/{course_id}/quota/" and response.status_code == 404,
    ),
]


def allowance_for(failure: Failure, case, response) -> Allowance | None:
    return next(
        (a for a in ALLOWED if a.check in (*type(failure).checks, "*") and a.applies(case, response)),
        None,
    )


def validate(case, response, validate_response: Callable[[], None]) -> None:
    """Run the checks; raise what no allowance explains."""
    try:
        validate_response()
    except (Failure, FailureGroup) as exc:
        failures = list(exc.exceptions) if isinstance(exc, FailureGroup) else [exc]
        unexplained = []
        for failure in failures:
            allowance = allowance_for(failure, case, response)
            if allowance is None:
                unexplained.append(failure)
            else:
                ALLOWED_SEEN[allowance.why] += 1
        if unexplained:
            answer = f"{case.operation.label} answered {response.status_code}: {response.text[:500]}"
            raise FailureGroup(unexplained, f"{answer}\n{case.as_curl_command()[:1500]}") from None


def count(case) -> None:
    STARTED.setdefault("at", time.monotonic())
    CASES[case.operation.label] += 1
    MODES[case.meta.generation.mode.value] += 1
    PHASES[case.meta.phase.name.value] += 1


# --- fixtures ------------------------------------------------------------------------------------

OWNER, PEER = "uni-test", "elsewhere"  # the world's institution, and another one
TOKENS: dict[str, str] = {}


class InstitutionToken:
    """An institution's token (made per test, in TOKENS) on a case, as its Authorization header."""

    def __init__(self, institution: str) -> None:
        self.institution = institution

    def get(self, case, context) -> str:
        return TOKENS.get(self.institution, "")  # empty at collection, before a test has made one

    def set(self, case, data: str, context) -> None:
        case.headers = {**(case.headers or {}), "Authorization": f"Bearer {data}"}


# Every case is sent as OWNER. The two institutions are peers: object_level_authorization sends a
# GET of what OWNER made or listed again as PEER, who must not get it. (Schemathesis builds this
# provider from a Web Fuzzing Commons document; the tokens here are made by each test.)
schema.auth.providers.append(
    EscalatingAuthProvider(
        [InstitutionToken(OWNER), InstitutionToken(PEER)], [OWNER, PEER], peers=(OWNER, PEER), pinned=OWNER
    )
)


@pytest.fixture
def token(world, elsewhere):
    for institution in (world["course"].institution, elsewhere):
        _token, TOKENS[institution.slug] = token_create(institution=institution, name="schemathesis", scopes=list(SCOPES))
    yield
    TOKENS.clear()


@pytest.fixture
def wsgi_in_test_transaction(world, settings):
    settings.API_THROTTLE_RATE = "1000000/minute"
    # The progress stream of a session that does not start ends within a second.
    settings.API_PROGRESS_MAX_SECONDS = 1
    settings.API_PROGRESS_POLL_SECONDS = 0.05
    # As Django's test client does: the WSGI handler would close the test's connection (and its
    # transaction) at the end of every request.
    signals.request_started.disconnect(close_old_connections)
    signals.request_finished.disconnect(close_old_connections)
    yield
    signals.request_started.connect(close_old_connections)
    signals.request_finished.connect(close_old_connections)


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


# --- the tests -----------------------------------------------------------------------------------


@pytest.mark.slow
@schema.parametrize()
@settings(max_examples=EXAMPLES_PER_OPERATION, **HYPOTHESIS)
def test_each_operation_answers_as_its_schema_says(case, token, real_ids, wsgi_in_test_transaction):
    count(case)
    if case.path_parameters and CASES[case.operation.label] % 2 and not case.meta.is_negative_at(ParameterLocation.PATH):
        case.path_parameters = {**case.path_parameters, **{k: v for k, v in real_ids.items() if k in case.path_parameters}}
    savepoint = transaction.savepoint()
    try:
        response = case.call()
        validate(case, response, lambda: case.validate_response(response))
    finally:
        transaction.savepoint_rollback(savepoint)


class Scenarios(schema.as_state_machine()):
    """Chains of calls along the links; each scenario in a savepoint of the test's transaction."""

    def setup(self) -> None:
        self.savepoint = transaction.savepoint()

    def teardown(self) -> None:
        transaction.savepoint_rollback(self.savepoint)

    def validate_response(self, response, case, additional_checks=None, **kwargs) -> None:
        count(case)
        validate(case, response, lambda: super(Scenarios, self).validate_response(response, case, additional_checks, **kwargs))


@pytest.mark.slow
def test_scenarios_along_the_links_answer_as_the_schema_says(token, wsgi_in_test_transaction):
    Scenarios.run(settings=settings(max_examples=SCENARIOS, stateful_step_count=STEPS_PER_SCENARIO, **HYPOTHESIS))


@pytest.mark.slow
def test_enough_cases_of_every_kind_were_generated(capsys):
    """Run after the generated tests (file order): at least 1,000 cases, positive and negative, in every phase."""
    if not CASES:
        pytest.skip("run with the generated tests above")
    seconds = time.monotonic() - STARTED["at"]
    with capsys.disabled():  # printed by make test too, to be quoted
        print(
            f"\nschemathesis: {CASES.total()} cases over {len(CASES)} operations in {seconds:.0f} s; "
            f"modes {dict(MODES)}; phases {dict(PHASES)}; allowed failures {dict(ALLOWED_SEEN) or 'none'}"
        )
    assert CASES.total() >= 1000
    assert MODES["positive"] and MODES["negative"]
    assert all(PHASES[phase] for phase in ("examples", "coverage", "fuzzing", "stateful"))
