"""Settings for the test suite: PostgreSQL and Redis as in production, the simulator driver.

``TEST_DATABASE_URL`` / ``TEST_REDIS_URL`` point the suite elsewhere (``sqlite:///any.sqlite3``: SQLite,
the demo's database, in a file of the run's own). Every run gets its own
test database (``test_portal_<run>``, made and dropped by pytest-django), its own Redis database
number (claimed below, released at the end) and its own var directory, so two runs of the suite
on one machine never touch each other's data. Processes a test starts (workers, web servers)
inherit the run's choices through the environment.
"""

import atexit
import os
import tempfile
import uuid

REDIS_CLAIM_KEY = "npu-lab-portal:test-run"
# What these settings chose themselves (not given by the caller), as a comma-separated list.
DERIVED_KEY = "PORTAL_TEST_DERIVED"

# pytest-xdist (``make test`` runs the suite in TEST_WORKERS processes): each worker is a run of
# its own, with its own database, Redis number, var directory and channel prefix. The workers
# inherit the environment of the process that started them, where these settings already chose
# a run's values once: a worker drops the ones chosen there and chooses its own.
_worker = os.environ.get("PYTEST_XDIST_WORKER", "")
if _worker and os.environ.get("PORTAL_TEST_WORKER") != _worker:
    os.environ["PORTAL_TEST_WORKER"] = _worker
    for key in filter(None, os.environ.pop(DERIVED_KEY, "").split(",")):
        os.environ.pop(key, None)
    os.environ["PORTAL_TEST_RUN"] = f"{os.environ.get('PORTAL_TEST_RUN', uuid.uuid4().hex[:8])}-{_worker}"

RUN_ID = os.environ.setdefault("PORTAL_TEST_RUN", uuid.uuid4().hex[:10])
_derived: list[str] = []


def _derive(key: str, value: str) -> None:
    if key not in os.environ:
        os.environ[key] = value
        _derived.append(key)


os.environ.setdefault("SECRET_KEY", "test-only-secret-key-not-for-production-use-0123456789")
# A Fernet key for the secrets encrypted at rest (labs.encryption); test-only, like the one above.
os.environ.setdefault("FIELD_ENCRYPTION_KEY", "dGVzdC1vbmx5LWZpZWxkLWVuY3J5cHRpb24ta2V5LTA=")
os.environ.setdefault("DATABASE_URL", os.environ.get("TEST_DATABASE_URL", "postgres://postgres@127.0.0.1:5432/portal"))
if "PORTAL_VAR_DIR" not in os.environ:
    _derive("PORTAL_VAR_DIR", tempfile.mkdtemp(prefix=f"npu-lab-portal-test-{RUN_ID}-"))
    # Removed with the run's files by tests/conftest.py; this catches the one pytest-xdist's
    # controlling process made and never used (rmdir removes only an empty directory).
    atexit.register(lambda path=os.environ["PORTAL_VAR_DIR"]: os.path.isdir(path) and not os.listdir(path) and os.rmdir(path))
_derive("CHANNELS_PREFIX", f"portal-test-{RUN_ID}")
# The simulator driver, starting labs quickly; portal.settings gives it its state_dir under PORTAL_VAR_DIR.
os.environ.setdefault("LAB_DRIVER", "labs.drivers.simulator.SimulatorDriver")
os.environ.setdefault("LAB_SIMULATOR_DELAY_SECONDS", "0.3")


def _release_redis_database(url: str) -> None:
    """At exit of the process that claimed it (a run, or a command with these settings), free the number."""
    import redis

    client = redis.Redis.from_url(url)
    if client.get(REDIS_CLAIM_KEY) == RUN_ID.encode():
        client.delete(REDIS_CLAIM_KEY)


def _claim_redis_database(server_url: str) -> str | None:
    """The first Redis database (1..15) that no other live run of the suite has claimed; ``None``
    when no Redis answers at ``server_url`` (a run of tests that need none, such as tests/domain:
    tests/conftest.py fails the first test that needs Redis, naming the server)."""
    import redis

    for number in range(1, 16):
        url = f"{server_url.rstrip('/')}/{number}"
        # The claim expires, so a run that was killed frees its number after a while.
        try:
            claimed = redis.Redis.from_url(url).set(REDIS_CLAIM_KEY, RUN_ID, nx=True, ex=3 * 3600)
        except redis.ConnectionError:
            return None
        if claimed:
            atexit.register(_release_redis_database, url)
            return url
    raise RuntimeError(f"every Redis database 1..15 at {server_url} is claimed by another test run ({REDIS_CLAIM_KEY})")


# The Redis server at which no database could be claimed because it did not answer, or "".
REDIS_UNREACHABLE = ""


if "REDIS_URL" not in os.environ:
    if os.environ.get("TEST_REDIS_URL") and not _worker:
        _derive("REDIS_URL", os.environ["TEST_REDIS_URL"])
    else:  # several workers never share one number: each claims its own on TEST_REDIS_URL's server
        server = os.environ.get("TEST_REDIS_URL", "redis://127.0.0.1:6379").rstrip("/")
        server = server.rsplit("/", 1)[0] if server.rsplit("/", 1)[-1].isdigit() else server
        claimed = _claim_redis_database(server)
        if claimed is None:
            REDIS_UNREACHABLE = server
        # No number claimed: the settings still name one (0, which no run claims); no test uses it.
        _derive("REDIS_URL", claimed or f"{server}/0")
os.environ[DERIVED_KEY] = ",".join(_derived)

from portal.settings import *  # noqa: E402,F403
from portal.settings import DATABASES, VAR_DIR  # noqa: E402

if DATABASES["default"]["ENGINE"] == "django.db.backends.sqlite3":
    # TEST_DATABASE_URL=sqlite:///... (the demo's database; `make test` runs the console and LTI
    # flows on it): a file, not Django's in-memory default, so the processes a test starts (workers,
    # Daphne) share it; in the run's var directory, removed with it.
    DATABASES["default"]["TEST"] = {"NAME": str(VAR_DIR / f"test_portal_{RUN_ID}.sqlite3")}
else:
    DATABASES["default"]["TEST"] = {"NAME": f"test_portal_{RUN_ID}"}
PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
WHITENOISE_AUTOREFRESH = True
# Webhook receivers and LMSs in the tests are plain http on 127.0.0.1 (tests of the refusals turn these off).
OUTBOUND_ALLOW_HTTP = True
OUTBOUND_ALLOW_PRIVATE_ADDRESSES = True
