"""Settings for the test suite: PostgreSQL and Redis as in production, the simulator driver.

``TEST_DATABASE_URL`` / ``TEST_REDIS_URL`` point the suite elsewhere; pytest-django creates
and drops the ``test_`` database itself.
"""

import os
import tempfile

os.environ.setdefault("SECRET_KEY", "test-only-secret-key-not-for-production-use-0123456789")
os.environ.setdefault("DATABASE_URL", os.environ.get("TEST_DATABASE_URL", "postgres://postgres@127.0.0.1:5432/portal"))
os.environ.setdefault("REDIS_URL", os.environ.get("TEST_REDIS_URL", "redis://127.0.0.1:6379/14"))
os.environ.setdefault("PORTAL_VAR_DIR", os.path.join(tempfile.gettempdir(), "npu-lab-portal-test"))
os.environ.setdefault("CHANNELS_PREFIX", "portal-test")

from portal.settings import *  # noqa: E402,F403
from portal.settings import LAB_DRIVER  # noqa: E402

LAB_DRIVER = {
    "BACKEND": os.environ.get("LAB_DRIVER", "labs.drivers.simulator.SimulatorDriver"),
    "OPTIONS": {
        **LAB_DRIVER["OPTIONS"],
        "start_delay_seconds": float(os.environ.get("LAB_SIMULATOR_DELAY_SECONDS", "0.3")),
        "create_delay_seconds": float(os.environ.get("LAB_SIMULATOR_CREATE_DELAY_SECONDS", "0")),
    },
}
LAB_POLL_INTERVAL_SECONDS = 0.1
PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
WHITENOISE_AUTOREFRESH = True
