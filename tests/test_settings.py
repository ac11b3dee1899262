"""portal.settings read from the environment: safe defaults, and a clear refusal of bad values.

Each case starts a fresh interpreter with ``DJANGO_SETTINGS_MODULE=portal.settings``, because
settings are read once at import time.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from django.core.exceptions import ImproperlyConfigured
from django.test import override_settings

from labs.drivers import get_driver

ROOT = Path(__file__).resolve().parents[1]
SECRET = "k" * 40

# Every variable portal.settings reads (the test run itself sets some of them, in tests/settings.py).
SETTINGS_VARIABLES = set(re.findall(r'env_\w+\(\s*"([A-Z0-9_]+)"', (ROOT / "portal" / "settings.py").read_text()))

PRINT_SETTINGS = """
import hashlib, json
import django
django.setup()
from django.conf import settings
db = settings.DATABASES["default"]
print(json.dumps({
    "DEBUG": settings.DEBUG,
    "ENGINE": db["ENGINE"],
    "NAME": str(db["NAME"]),
    "OPTIONS": db.get("OPTIONS", {}),
    "SECRET_KEY_SHA256": hashlib.sha256(settings.SECRET_KEY.encode()).hexdigest(),
    "REDIS_URL": settings.REDIS_URL,
    "LAB_DRIVER": settings.LAB_DRIVER,
}, default=lambda value: getattr(value, "__qualname__", repr(value))))
"""

BUILD_DRIVER = """
import django
django.setup()
from labs.drivers import get_driver
print(type(get_driver()).__name__)
"""


def run_settings(tmp_path: Path, script: str = PRINT_SETTINGS, **env: str | None) -> subprocess.CompletedProcess[str]:
    """Run ``script`` on portal.settings in a new interpreter with a clean environment plus ``env`` (None removes)."""
    environment = {
        k: v for k, v in os.environ.items() if k not in SETTINGS_VARIABLES and k.removesuffix("_FILE") not in SETTINGS_VARIABLES
    }
    environment.update(
        DJANGO_SETTINGS_MODULE="portal.settings", PYTHONPATH=str(ROOT), SECRET_KEY=SECRET, PORTAL_VAR_DIR=str(tmp_path)
    )
    for name, value in env.items():
        if value is None:
            environment.pop(name, None)
        else:
            environment[name] = value
    return subprocess.run([sys.executable, "-c", script], cwd=ROOT, env=environment, capture_output=True, text=True, timeout=60)


def loaded(result: subprocess.CompletedProcess[str]) -> dict:
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout.strip().splitlines()[-1])


def refused(result: subprocess.CompletedProcess[str]) -> str:
    assert result.returncode != 0, result.stdout
    assert "ImproperlyConfigured" in result.stderr
    return result.stderr


def sha256(value: str) -> str:
    return hashlib.sha256(value.encode()).hexdigest()


def test_the_defaults_use_sqlite_in_the_var_dir_with_immediate_transactions(tmp_path):
    settings = loaded(run_settings(tmp_path))
    assert settings["ENGINE"] == "django.db.backends.sqlite3"
    assert settings["NAME"] == str(tmp_path / "portal.sqlite3")
    assert settings["OPTIONS"]["transaction_mode"] == "IMMEDIATE"
    assert settings["REDIS_URL"] == "redis://127.0.0.1:6379/0"
    assert settings["SECRET_KEY_SHA256"] == sha256(SECRET)


def test_debug_is_off_unless_set(tmp_path):
    assert loaded(run_settings(tmp_path))["DEBUG"] is False
    assert loaded(run_settings(tmp_path, DEBUG="true"))["DEBUG"] is True
    assert loaded(run_settings(tmp_path, DEBUG="0"))["DEBUG"] is False


def test_a_debug_value_that_is_not_a_boolean_stops_the_portal(tmp_path):
    stderr = refused(run_settings(tmp_path, DEBUG="maybe"))
    assert "DEBUG" in stderr
    assert "not a boolean" in stderr


def test_a_missing_secret_key_names_both_ways_to_set_it(tmp_path):
    stderr = refused(run_settings(tmp_path, SECRET_KEY=None))
    assert "SECRET_KEY" in stderr
    assert "SECRET_KEY_FILE" in stderr


def test_the_secret_key_is_read_from_a_file_and_never_printed(tmp_path):
    value = "file-secret-" + "x" * 40
    key_file = tmp_path / "secret_key"
    key_file.write_text(value + "\n")
    result = run_settings(tmp_path, SECRET_KEY=None, SECRET_KEY_FILE=str(key_file))
    assert loaded(result)["SECRET_KEY_SHA256"] == sha256(value)
    assert value not in result.stdout
    assert value not in result.stderr


PRINT_METRICS_TOKEN = """
import hashlib
import django
django.setup()
from django.conf import settings
print(hashlib.sha256(settings.METRICS_TOKEN.encode()).hexdigest())
"""


def test_the_metrics_token_is_read_from_a_file_and_never_printed(tmp_path):
    value = "metrics-token-" + "m" * 30
    token_file = tmp_path / "metrics_token"
    token_file.write_text(value + "\n")
    result = run_settings(tmp_path, PRINT_METRICS_TOKEN, METRICS_TOKEN_FILE=str(token_file))
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == sha256(value)
    assert value not in result.stdout + result.stderr


def test_a_short_secret_key_is_refused_without_printing_it(tmp_path):
    value = "short-secret-value"
    key_file = tmp_path / "secret_key"
    key_file.write_text(value)
    for result in (
        run_settings(tmp_path, SECRET_KEY=value),
        run_settings(tmp_path, SECRET_KEY=None, SECRET_KEY_FILE=str(key_file)),
    ):
        stderr = refused(result)
        assert "SECRET_KEY must be at least 32 characters" in stderr
        assert value not in stderr
        assert value not in result.stdout


def test_an_unreadable_secret_key_file_is_refused(tmp_path):
    stderr = refused(run_settings(tmp_path, SECRET_KEY=None, SECRET_KEY_FILE=str(tmp_path / "missing")))
    assert "SECRET_KEY_FILE cannot be read" in stderr


def test_a_mysql_database_url_is_refused_naming_the_variable(tmp_path):
    stderr = refused(run_settings(tmp_path, DATABASE_URL="mysql://user:hunter2pass@db.example:3306/portal"))
    assert "DATABASE_URL" in stderr
    assert "'mysql'" in stderr
    assert "hunter2pass" not in stderr


def test_a_postgres_database_url_is_parsed(tmp_path):
    settings = loaded(run_settings(tmp_path, DATABASE_URL="postgres://u:p@h:5432/db"))
    # Django's backend, its pooled connections checked as they are handed out (portal/postgresql).
    assert settings["ENGINE"] == "portal.postgresql"
    assert settings["NAME"] == "db"
    assert "transaction_mode" not in settings["OPTIONS"]
    # One pool per process; a connection goes back to it without session-level locks.
    assert settings["OPTIONS"]["pool"] == {"min_size": 1, "max_size": 10, "timeout": 30, "reset": "_release_session_locks"}


def test_the_database_pool_can_be_sized_or_turned_off(tmp_path):
    sized = loaded(run_settings(tmp_path, DATABASE_URL="postgres://u:p@h:5432/db", DATABASE_POOL_SIZE="25"))
    assert sized["OPTIONS"]["pool"]["max_size"] == 25
    off = loaded(run_settings(tmp_path, DATABASE_URL="postgres://u:p@h:5432/db", DATABASE_POOL_SIZE="0"))
    assert "pool" not in off["OPTIONS"]


def test_the_database_pool_keeps_open_what_it_is_told_to_at_most_its_size(tmp_path):
    url = "postgres://u:p@h:5432/db"
    kept = loaded(run_settings(tmp_path, DATABASE_URL=url, DATABASE_POOL_MIN_SIZE="10"))
    assert (kept["OPTIONS"]["pool"]["min_size"], kept["OPTIONS"]["pool"]["max_size"]) == (10, 10)
    stderr = refused(run_settings(tmp_path, DATABASE_URL=url, DATABASE_POOL_SIZE="8", DATABASE_POOL_MIN_SIZE="9"))
    assert "DATABASE_POOL_MIN_SIZE (9) is more than DATABASE_POOL_SIZE (8)" in stderr
    stderr = refused(run_settings(tmp_path, DATABASE_URL=url, DATABASE_POOL_MIN_SIZE="-1"))
    assert "DATABASE_POOL_MIN_SIZE" in stderr


def test_a_redis_url_that_is_not_redis_is_refused(tmp_path):
    stderr = refused(run_settings(tmp_path, REDIS_URL="http://x"))
    assert "REDIS_URL" in stderr
    assert "not a Redis URL" in stderr


def test_a_celery_visibility_timeout_that_is_not_a_number_is_refused(tmp_path):
    stderr = refused(run_settings(tmp_path, CELERY_VISIBILITY_TIMEOUT="abc"))
    assert "CELERY_VISIBILITY_TIMEOUT" in stderr
    assert "not an integer" in stderr


PRINT_KEYS = """
import hashlib, json
import django
django.setup()
from django.conf import settings
print(json.dumps([hashlib.sha256(key.encode()).hexdigest() for key in settings.FIELD_ENCRYPTION_KEYS]))
"""
KEY_A = "u3iFygw52tbeFQxeeBE8NOPMyKnsWWuwblCeO4aiQvY="
KEY_B = "dGVzdC1vbmx5LWZpZWxkLWVuY3J5cHRpb24ta2V5LTA="


def test_encryption_keys_are_read_from_a_file_one_a_line_the_first_first(tmp_path):
    key_file = tmp_path / "field_encryption_key"
    key_file.write_text(f"{KEY_B}\n{KEY_A}\n")

    keys = loaded(run_settings(tmp_path, PRINT_KEYS, FIELD_ENCRYPTION_KEY_FILE=str(key_file)))

    assert keys == [sha256(KEY_B), sha256(KEY_A)]
    assert loaded(run_settings(tmp_path, PRINT_KEYS, FIELD_ENCRYPTION_KEY=f"{KEY_A},{KEY_B}")) == [sha256(KEY_A), sha256(KEY_B)]


def test_an_encryption_key_that_is_not_a_fernet_key_is_refused_without_printing_it(tmp_path):
    stderr = refused(run_settings(tmp_path, FIELD_ENCRYPTION_KEY=f"{KEY_A},not-a-fernet-key-s3cr3t"))

    assert "FIELD_ENCRYPTION_KEY: key 2 of 2 is not a Fernet key" in stderr
    assert "s3cr3t" not in stderr and KEY_A not in stderr


CHECK = "import django; django.setup(); from django.core.management import call_command; call_command('check')"


def test_without_an_encryption_key_the_portal_on_postgresql_does_not_pass_its_checks(tmp_path):
    result = run_settings(tmp_path, CHECK, DATABASE_URL="postgres://u:p@h:5432/db")

    assert result.returncode != 0
    assert "labs.E001" in result.stderr and "FIELD_ENCRYPTION_KEY_FILE" in result.stderr
    assert run_settings(tmp_path, CHECK, DATABASE_URL="postgres://u:p@h:5432/db", FIELD_ENCRYPTION_KEY=KEY_A).returncode == 0
    assert run_settings(tmp_path, CHECK).returncode == 0  # the embedded demo (SQLite) may run without one


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("API_IDEMPOTENCY_RETENTION_HOURS", "0"),
        ("API_IDEMPOTENCY_RETENTION_HOURS", "a day"),
        ("LTI_SCORE_RETENTION_DAYS", "0"),
        ("LTI_SCORE_RETENTION_DAYS", "4000"),
    ],
)
def test_a_retention_that_is_not_a_number_in_range_is_refused_naming_the_variable(tmp_path, name, value):
    stderr = refused(run_settings(tmp_path, **{name: value}))
    assert name in stderr


PRINT_START_RESTARTS = "import django; django.setup(); from django.conf import settings; print(settings.LAB_START_RESTARTS)"


def test_a_starting_lab_may_restart_three_times_unless_set_otherwise(tmp_path):
    assert loaded(run_settings(tmp_path, PRINT_START_RESTARTS)) == 3
    assert loaded(run_settings(tmp_path, PRINT_START_RESTARTS, LAB_START_RESTARTS="0")) == 0


@pytest.mark.parametrize("value", ["-1", "21", "three"])
def test_a_restart_bound_that_is_not_a_count_in_range_is_refused_naming_the_variable(tmp_path, value):
    assert "LAB_START_RESTARTS" in refused(run_settings(tmp_path, PRINT_START_RESTARTS, LAB_START_RESTARTS=value))


PRINT_REBOOT_WAIT = "import django; django.setup(); from django.conf import settings; print(settings.LAB_REBOOT_DEVICE_WAIT)"


def test_labs_on_a_restarted_node_wait_300_seconds_for_its_npus_unless_set_otherwise(tmp_path):
    assert loaded(run_settings(tmp_path, PRINT_REBOOT_WAIT)) == 300
    assert loaded(run_settings(tmp_path, PRINT_REBOOT_WAIT, LAB_REBOOT_DEVICE_WAIT="60")) == 60


@pytest.mark.parametrize("value", ["-1", "3601", "soon"])
def test_a_reboot_wait_that_is_not_seconds_in_range_is_refused_naming_the_variable(tmp_path, value):
    assert "LAB_REBOOT_DEVICE_WAIT" in refused(run_settings(tmp_path, PRINT_REBOOT_WAIT, LAB_REBOOT_DEVICE_WAIT=value))


@pytest.fixture
def fresh_driver():
    """Build the driver from the settings of this test, and forget it afterwards."""
    get_driver.cache_clear()
    yield
    get_driver.cache_clear()


@pytest.mark.parametrize(
    ("backend", "message"),
    [
        ("labs.drivers.nope.Driver", "'labs.drivers.nope.Driver' cannot be imported"),
        ("labs.models.Node", "is not a ClusterDriver"),
    ],
)
def test_a_lab_driver_that_is_not_a_driver_is_refused_with_a_clear_message(fresh_driver, backend, message):
    with override_settings(LAB_DRIVER={"BACKEND": backend, "OPTIONS": {}}), pytest.raises(ImproperlyConfigured, match=message):
        get_driver()


LOCAL = "labs.drivers.local.LocalDriver"
SIMULATOR = "labs.drivers.simulator.SimulatorDriver"
KUBERNETES = "labs.drivers.kubernetes.KubernetesDriver"
# Set in every driver test below: each backend must read its own and ignore the others'.
EVERY_BACKENDS_VARIABLES = {
    "LAB_LOCAL_HOST": "0.0.0.0",
    "LAB_SIMULATOR_DELAY_SECONDS": "0.5",
    "LAB_K8S_PROFILE": "vnpu",
    "LAB_K8S_URL_PATTERN": "https://labs.example.edu/{session_id}/",
    "LAB_K8S_INGRESS_HOST": "labs.example.edu",
}


def test_the_default_driver_is_local_with_only_its_own_options(tmp_path):
    driver = loaded(run_settings(tmp_path))["LAB_DRIVER"]
    assert driver == {"BACKEND": LOCAL, "OPTIONS": {"state_dir": str(tmp_path / "driver"), "host": "127.0.0.1"}}


@pytest.mark.parametrize(
    ("backend", "options"),
    [
        (LOCAL, {"state_dir": "<var>/driver", "host": "0.0.0.0"}),
        (
            SIMULATOR,
            {
                "state_dir": "<var>/driver",
                "start_delay_seconds": 0.5,
                "create_delay_seconds": 0.0,
                "create_failure_rate": 0.0,
                "delete_failure_rate": 0.0,
            },
        ),
        (
            KUBERNETES,
            {
                "api_url": "",
                "token": "",
                "namespace_prefix": "lab-",
                "profile": "vnpu",
                "pool_profiles": "",
                "ingress_host": "labs.example.edu",
                "ingress_class_name": "nginx",
                "url_pattern": "https://labs.example.edu/{session_id}/",
            },
        ),
    ],
)
def test_only_the_chosen_backends_options_are_passed(tmp_path, backend, options):
    driver = loaded(run_settings(tmp_path, LAB_DRIVER=backend, **EVERY_BACKENDS_VARIABLES))["LAB_DRIVER"]
    expected = {k: v.replace("<var>", str(tmp_path)) if isinstance(v, str) else v for k, v in options.items()}
    assert driver == {"BACKEND": backend, "OPTIONS": expected}


def test_a_variable_of_a_backend_not_chosen_is_not_even_read(tmp_path):
    assert loaded(run_settings(tmp_path, LAB_DRIVER=LOCAL, LAB_SIMULATOR_DELAY_SECONDS="soon"))["LAB_DRIVER"]["BACKEND"] == LOCAL
    stderr = refused(run_settings(tmp_path, LAB_DRIVER=SIMULATOR, LAB_SIMULATOR_DELAY_SECONDS="soon"))
    assert "LAB_SIMULATOR_DELAY_SECONDS='soon' is not a number" in stderr


def test_a_negative_simulator_delay_is_refused_naming_the_variable(tmp_path):
    stderr = refused(run_settings(tmp_path, LAB_DRIVER=SIMULATOR, LAB_SIMULATOR_DELAY_SECONDS="-1"))
    assert "LAB_SIMULATOR_DELAY_SECONDS=-1.0 must be at least 0.0" in stderr


def test_lab_driver_options_adds_options_as_json(tmp_path):
    pools = {"pool=research": {"profile": "vnpu", "mode": "hard"}}
    options = json.dumps({"pool_profiles": pools, "spawn_timeout_seconds": 900})
    driver = loaded(run_settings(tmp_path, LAB_DRIVER=KUBERNETES, LAB_DRIVER_OPTIONS=options))["LAB_DRIVER"]
    assert driver["OPTIONS"]["pool_profiles"] == pools
    assert driver["OPTIONS"]["spawn_timeout_seconds"] == 900
    assert driver["OPTIONS"]["profile"] == "flexnpu"


def test_an_unknown_option_stops_start_up_naming_it_the_backend_and_the_closest_key(tmp_path):
    stderr = refused(run_settings(tmp_path, LAB_DRIVER=KUBERNETES, LAB_DRIVER_OPTIONS='{"profiel": "vnpu"}'))
    assert f"LAB_DRIVER: unknown option 'profiel' for {KUBERNETES}; did you mean 'profile'? accepted: api_url," in stderr


def test_an_option_of_another_backend_stops_start_up(tmp_path):
    stderr = refused(run_settings(tmp_path, LAB_DRIVER=SIMULATOR, LAB_DRIVER_OPTIONS='{"host": "0.0.0.0"}'))
    assert f"unknown option 'host' for {SIMULATOR}" in stderr


def test_an_option_of_the_wrong_type_stops_start_up(tmp_path):
    stderr = refused(run_settings(tmp_path, LAB_DRIVER=KUBERNETES, LAB_DRIVER_OPTIONS='{"retries": "three"}'))
    assert f"option 'retries' for {KUBERNETES} must be int, got 'three'" in stderr


@pytest.mark.parametrize("value", ['{"token": "s3cr3t-token"', '["s3cr3t-token"]'])
def test_lab_driver_options_that_is_not_a_json_object_is_refused_without_printing_it(tmp_path, value):
    result = run_settings(tmp_path, LAB_DRIVER=KUBERNETES, LAB_DRIVER_OPTIONS=value)
    stderr = refused(result)
    assert "LAB_DRIVER_OPTIONS" in stderr
    assert "s3cr3t-token" not in stderr + result.stdout


def test_a_pools_own_profile_options_build_the_driver(tmp_path):
    options = json.dumps({"pool_profiles": {"pool=research": {"profile": "vnpu", "mode": "hard"}}})
    result = run_settings(
        tmp_path, BUILD_DRIVER, LAB_DRIVER=KUBERNETES, LAB_K8S_API_URL="http://127.0.0.1:9", LAB_DRIVER_OPTIONS=options
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "KubernetesDriver"


@pytest.mark.parametrize(
    ("env", "message"),
    [
        (
            {"LAB_DRIVER_OPTIONS": '{"pool_profiles": {"pool=research": {"profile": "vnpu", "mdoe": "hard"}}}'},
            "pool_profiles['pool=research']: unknown option 'mdoe' for device profile 'vnpu'; did you mean 'mode'?",
        ),
        ({"LAB_K8S_POOL_PROFILES": "pool=research:quantum"}, "pool_profiles['pool=research']: unknown device profile 'quantum'"),
        ({"LAB_K8S_PROFILE": "quantum"}, "profile: unknown device profile 'quantum'; choose one of flexnpu, hami, vnpu"),
        ({"LAB_K8S_INGRESS_HOST": "https://labs.example.edu"}, "ingress_host must be a host name like labs.example.edu"),
    ],
)
def test_a_bad_profile_or_pool_option_is_refused_when_the_driver_is_built(tmp_path, env, message):
    result = run_settings(tmp_path, BUILD_DRIVER, LAB_DRIVER=KUBERNETES, LAB_K8S_API_URL="http://127.0.0.1:9", **env)
    assert f"LAB_DRIVER options for {KUBERNETES}: {message}" in refused(result)


SHARES_ENFORCED = """
import django
django.setup()
from django.conf import settings
print(settings.LAB_SHARES_ENFORCED)
"""


@pytest.mark.parametrize(
    "backend, enforced",
    [
        (None, "False"),
        ("labs.drivers.simulator.SimulatorDriver", "False"),
        ("labs.drivers.kubernetes.KubernetesDriver", "True"),
    ],
)
def test_shares_count_as_enforced_only_with_the_driver_that_runs_labs_on_npus(tmp_path, backend, enforced):
    result = run_settings(tmp_path, SHARES_ENFORCED, LAB_DRIVER=backend)
    assert result.returncode == 0, result.stderr
    assert result.stdout.split()[-1] == enforced


def test_whether_shares_are_enforced_can_be_set(tmp_path):
    result = run_settings(
        tmp_path, SHARES_ENFORCED, LAB_DRIVER="labs.drivers.kubernetes.KubernetesDriver", LAB_SHARES_ENFORCED="no"
    )
    assert result.stdout.split()[-1] == "False", result.stderr


def test_session_cookies_for_an_lms_iframe_need_https(tmp_path):
    assert "SESSION_COOKIE_SAMESITE=None needs secure cookies" in refused(run_settings(tmp_path, SESSION_COOKIE_SAMESITE="None"))
    assert "use Lax, Strict or None" in refused(run_settings(tmp_path, SESSION_COOKIE_SAMESITE="lax"))
    script = (
        "import django; django.setup(); from django.conf import settings as s;"
        " print(s.SESSION_COOKIE_SAMESITE, s.CSRF_COOKIE_SAMESITE)"
    )
    result = run_settings(tmp_path, script, SESSION_COOKIE_SAMESITE="None", HTTPS="true")
    assert result.returncode == 0, result.stderr
    assert result.stdout.split()[-2:] == ["None", "None"]


def test_the_channel_layer_is_pubsub_unless_list_is_chosen_and_anything_else_is_refused(tmp_path):
    script = "from django.conf import settings; print(settings.CHANNEL_LAYERS['default']['BACKEND'])"
    assert run_settings(tmp_path, script).stdout.strip() == "portal.channel_layer.ResyncingPubSubChannelLayer"
    chosen = run_settings(tmp_path, script.replace("['BACKEND']", ""), CHANNELS_LAYER="list")
    assert "channels_redis.core.RedisChannelLayer" in chosen.stdout and "'capacity': 10000" in chosen.stdout, chosen.stderr
    assert "CHANNELS_LAYER='rabbit': use pubsub or list" in refused(run_settings(tmp_path, CHANNELS_LAYER="rabbit"))


def test_a_channel_capacity_below_100_is_refused_naming_the_variable(tmp_path):
    stderr = refused(run_settings(tmp_path, CHANNELS_LAYER="list", CHANNELS_CAPACITY="10"))
    assert "CHANNELS_CAPACITY=10" in stderr


OUTBOUND = """
import json
import django
django.setup()
from django.conf import settings
print(json.dumps({"http": settings.OUTBOUND_ALLOW_HTTP, "private": settings.OUTBOUND_ALLOW_PRIVATE_ADDRESSES}))
"""


def test_calls_to_plain_http_or_private_addresses_are_refused_unless_allowed_by_the_new_or_the_former_name(tmp_path):
    assert loaded(run_settings(tmp_path, OUTBOUND)) == {"http": False, "private": False}
    assert loaded(run_settings(tmp_path, OUTBOUND, DEBUG="1")) == {"http": True, "private": True}
    former = run_settings(tmp_path, OUTBOUND, WEBHOOK_ALLOW_HTTP="1", WEBHOOK_ALLOW_PRIVATE_ADDRESSES="yes")
    assert loaded(former) == {"http": True, "private": True}
    both = run_settings(tmp_path, OUTBOUND, WEBHOOK_ALLOW_PRIVATE_ADDRESSES="1", OUTBOUND_ALLOW_PRIVATE_ADDRESSES="0")
    assert loaded(both) == {"http": False, "private": False}


VLLM_IMAGE = """
import django
django.setup()
from django.conf import settings
print(settings.LAB_VLLM_IMAGE)
"""


def test_the_vllm_image_is_the_vendors_unless_set_and_a_malformed_one_stops_the_portal(tmp_path):
    assert run_settings(tmp_path, VLLM_IMAGE).stdout.split()[-1] == "quay.io/ascend/vllm-ascend:v0.18.0"
    mirror = run_settings(tmp_path, VLLM_IMAGE, LAB_VLLM_IMAGE="swr.example.edu/ascend/vllm-ascend:v0.18.0")
    assert mirror.stdout.split()[-1] == "swr.example.edu/ascend/vllm-ascend:v0.18.0", mirror.stderr
    assert "LAB_VLLM_IMAGE" in refused(run_settings(tmp_path, VLLM_IMAGE, LAB_VLLM_IMAGE="vllm ascend"))
