"""The domain tests are pure Python: they need neither PostgreSQL nor Redis (issue 30), and a run
of them alone connects to neither (tests/test_domain_needs_no_services.py runs them so)."""

import pytest


@pytest.fixture(autouse=True)
def services_ready():
    """Nothing to make ready: overrides tests/conftest.py's, which empties the run's Redis database."""
