"""The domain tests run on a machine with neither PostgreSQL nor Redis (issue 30).

They are pure Python (tests/domain/conftest.py says so): a run of them alone must not connect to
either service, not even to claim a Redis database number or to empty it.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys

import pytest

from tests.conftest import ROOT

# What tests/settings.py derived for this run: the run below chooses its own.
RUN_VARIABLES = (
    "DATABASE_URL",
    "REDIS_URL",
    "PORTAL_TEST_RUN",
    "PORTAL_TEST_WORKER",
    "PORTAL_TEST_DERIVED",
    "PORTAL_VAR_DIR",
    "CHANNELS_PREFIX",
    "PYTEST_XDIST_WORKER",
    "PYTEST_XDIST_WORKER_COUNT",
    "PYTEST_XDIST_TESTRUNUID",
)


@pytest.mark.slow
def test_domain_tests_pass_with_neither_postgresql_nor_redis_reachable():
    # A port bound and never listened on: every connection to it is refused while we hold it.
    with socket.socket() as closed:
        closed.bind(("127.0.0.1", 0))
        port = closed.getsockname()[1]
        env = {key: value for key, value in os.environ.items() if key not in RUN_VARIABLES}
        env.update(
            TEST_DATABASE_URL=f"postgres://postgres@127.0.0.1:{port}/portal",
            TEST_REDIS_URL=f"redis://127.0.0.1:{port}",
        )
        # One xdist worker: the worker claims a Redis number on TEST_REDIS_URL's server, as every
        # run does when TEST_REDIS_URL is not given, so the claim's path is run as well.
        result = subprocess.run(
            [sys.executable, "-m", "pytest", "tests/domain", "-q", "-p", "no:cacheprovider", "-n", "1"],
            cwd=ROOT,
            env=env,
            capture_output=True,
            text=True,
            timeout=600,
        )
    output = result.stdout + result.stderr
    assert result.returncode == 0, output[-5000:]
    summary = result.stdout.strip().splitlines()[-1]
    assert " passed" in summary and "error" not in summary, summary
