"""Settings for NPU Lab Portal, all from environment variables (portal/settings_table.py; docs/settings.md).

The embedded default (``make demo``) is SQLite, a local Redis and the ``local`` cluster driver;
production sets ``DATABASE_URL`` to PostgreSQL and chooses the ``kubernetes`` driver.
"""

from __future__ import annotations

import re
from datetime import timedelta
from pathlib import Path
from typing import Any

from csp.constants import NONE, SELF
from django.core.exceptions import ImproperlyConfigured
from django.utils.translation import gettext_lazy as _

from labs.domain.images import is_image_reference
from portal.settings_table import env_setting

BASE_DIR = Path(__file__).resolve().parent.parent
VAR_DIR = Path(env_setting("PORTAL_VAR_DIR", default=str(BASE_DIR / "var")))

DEBUG = env_setting("DEBUG")
SECRET_KEY = env_setting("SECRET_KEY")
if len(SECRET_KEY) < 32:
    raise ImproperlyConfigured("SECRET_KEY must be at least 32 characters long.")
FIELD_ENCRYPTION_KEYS = env_setting("FIELD_ENCRYPTION_KEY")
ALLOWED_HOSTS = env_setting("ALLOWED_HOSTS")
CSRF_TRUSTED_ORIGINS = env_setting("CSRF_TRUSTED_ORIGINS")

INSTALLED_APPS = [
    "daphne",
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "channels",
    "axes",
    "csp",
    "rest_framework",
    "django_filters",
    "drf_spectacular",
    "drf_spectacular_sidecar",
    "oauth2_provider",
    "accounts",
    "labs",
    "lti",
    "api",
    "webhooks",
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "portal.csp_header.CSPMiddleware",  # django-csp's, its usual header built once (docs/framework-overrides.md)
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.locale.LocaleMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    # Django's, the signed-in user read with a written-out statement (docs/framework-overrides.md).
    "portal.auth.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    # Last of those that act, as django-axes asks: it turns a locked-out login into the lockout page.
    "axes.middleware.AxesMiddleware",
    # A request whose database connection was cut before it wrote anything runs again.
    "portal.middleware.LostConnectionRetry",
    # Keeps the chain in sync mode under Django's async handlers (one thread hop a request, not twenty).
    "portal.middleware.SyncMiddlewareChain",
]

ROOT_URLCONF = "portal.urls"
ASGI_APPLICATION = "portal.asgi.application"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [BASE_DIR / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
                "labs.context_processors.console",
            ],
        },
    },
]

DATABASES = {"default": env_setting("DATABASE_URL", default=f"sqlite:///{VAR_DIR / 'portal.sqlite3'}")}
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

REDIS_URL = env_setting("REDIS_URL")

# The channel layer that carries the pages' live updates. "pubsub" (channels_redis's Redis
# Pub/Sub layer): Redis pushes each message to the web processes whose sockets joined its group.
# "list" (channels_redis's original layer): each web process pops its sockets' messages off one
# Redis key, one round trip and one pass of its receive lock per message, and falls behind
# under the load bench (docs/framework-overrides.md, "The channel layer"). Pub/Sub keeps nothing:
# an update sent while a web process is reconnecting to Redis is lost; once it has subscribed
# again its sockets are told to read again what their pages show (portal.channel_layer). The
# list layer keeps messages a minute.
CHANNELS_LAYER = env_setting("CHANNELS_LAYER")
CHANNEL_LAYERS = {
    "default": {
        "BACKEND": {
            "pubsub": "portal.channel_layer.ResyncingPubSubChannelLayer",
            "list": "channels_redis.core.RedisChannelLayer",
        }[CHANNELS_LAYER],
        "CONFIG": {"hosts": [REDIS_URL], "prefix": env_setting("CHANNELS_PREFIX")},
    }
}
if CHANNELS_LAYER == "list":
    CHANNEL_LAYERS["default"]["CONFIG"]["capacity"] = env_setting("CHANNELS_CAPACITY")

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.UserAttributeSimilarityValidator"},
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
    {"NAME": "django.contrib.auth.password_validation.NumericPasswordValidator"},
]
# django-axes first: it refuses a locked-out login before any password is checked.
AUTHENTICATION_BACKENDS = ["axes.backends.AxesStandaloneBackend", "django.contrib.auth.backends.ModelBackend"]
LOGIN_URL = "login"
# An invitation link (an account a roster import made sets its password: accounts.views.InvitationView)
# is Django's password reset token: it expires after this many seconds (7 days: a class a week away).
PASSWORD_RESET_TIMEOUT = 7 * 24 * 3600
LOGIN_REDIRECT_URL = "labs:home"
LOGOUT_REDIRECT_URL = "login"

LANGUAGE_CODE = env_setting("LANGUAGE_CODE")
LANGUAGES = [("en", _("English")), ("zh-hans", _("Simplified Chinese"))]
# The compiled catalogues (django.mo) are built by `make compilemessages`, not committed.
LOCALE_PATHS = [BASE_DIR / "locale"]
# The language cookie outlives the browser session, as the login does; a signed-in user's own
# choice is also kept with their account and set again at every login (accounts.views).
LANGUAGE_COOKIE_AGE = 365 * 24 * 3600
# Dates and times render in the reader's language's formats (Django's own: "2026年11月30日"). No
# thousands separator in a plain {{ number }}: ids and versions go into attributes and form values;
# sizes people read are grouped where they are shown (labs/presentation.py).
USE_THOUSAND_SEPARATOR = False
TIME_ZONE = env_setting("TIME_ZONE")
USE_I18N = True
USE_TZ = True

STATIC_URL = "static/"
STATIC_ROOT = VAR_DIR / "static"
STORAGES = {
    "default": {"BACKEND": "django.core.files.storage.FileSystemStorage"},
    "staticfiles": {"BACKEND": "whitenoise.storage.CompressedStaticFilesStorage"},
}
WHITENOISE_USE_FINDERS = True

# --- Security (docs/security.md) ---------------------------------------------------------------
SESSION_COOKIE_HTTPONLY = True
SESSION_ENGINE = "portal.sessions"  # Django's database sessions, read with a written-out statement
X_FRAME_OPTIONS = "DENY"
# HTTPS: the portal is served over TLS (itself or behind a TLS-terminating proxy). It then
# redirects plain HTTP to HTTPS, sends HSTS and marks its cookies secure, unless told otherwise.
HTTPS = env_setting("HTTPS")
CSRF_COOKIE_SECURE = SESSION_COOKIE_SECURE = env_setting("SECURE_COOKIES", default=not DEBUG and HTTPS)
# "None" lets the portal run inside an LMS's iframe (LTI) with its session: browsers then need
# Secure cookies, so it needs HTTPS. Lax (Django's default) suits a portal opened in its own window.
SESSION_COOKIE_SAMESITE = CSRF_COOKIE_SAMESITE = env_setting("SESSION_COOKIE_SAMESITE")
if SESSION_COOKIE_SAMESITE == "None" and not SESSION_COOKIE_SECURE:
    raise ImproperlyConfigured("SESSION_COOKIE_SAMESITE=None needs secure cookies: set HTTPS=true (or SECURE_COOKIES=true).")
SECURE_SSL_REDIRECT = env_setting("SECURE_SSL_REDIRECT", default=HTTPS)
# Prometheus scrapes /metrics from inside the cluster over plain HTTP (with its bearer token).
SECURE_REDIRECT_EXEMPT = [r"^metrics$"]
SECURE_HSTS_SECONDS = env_setting("SECURE_HSTS_SECONDS", default=365 * 24 * 3600 if HTTPS else 0)
SECURE_HSTS_INCLUDE_SUBDOMAINS = env_setting("SECURE_HSTS_INCLUDE_SUBDOMAINS", default=HTTPS)
SECURE_HSTS_PRELOAD = env_setting("SECURE_HSTS_PRELOAD")
# security.W021 asks for preload, which commits the whole domain to HTTPS in browsers for months
# and is not undone by a setting: a choice for the domain's owner, so it is off by default.
SILENCED_SYSTEM_CHECKS = [] if SECURE_HSTS_PRELOAD else ["security.W021"]


def _env_proxy_ssl_header(name: str) -> tuple[str, str] | None:
    """``X-Forwarded-Proto`` -> ``("HTTP_X_FORWARDED_PROTO", "https")``: the header a TLS-terminating
    proxy sets (overwriting the client's) to say the request came over HTTPS."""
    header = env_setting(name)
    if not header:
        return None
    if not header.replace("-", "").replace("_", "").isalnum() or not header.isascii():
        raise ImproperlyConfigured(f"{name}={header!r} is not a header name: use e.g. X-Forwarded-Proto.")
    return "HTTP_" + header.upper().replace("-", "_"), "https"


SECURE_PROXY_SSL_HEADER = _env_proxy_ssl_header("SECURE_PROXY_SSL_HEADER")
# How many reverse proxies in front of the portal append to X-Forwarded-For: the client's address
# is the one the outermost of them saw (portal.proxies). 0: the header is ignored.
TRUSTED_PROXY_COUNT = env_setting("TRUSTED_PROXY_COUNT")

# Login throttling (django-axes): after LOGIN_FAILURE_LIMIT failed logins, logging in is refused
# for LOGIN_LOCKOUT_MINUTES after the last failure. By default the lockout is per account *and*
# address, so a classroom behind one NAT address is not locked out by one student's typos, and
# nobody can lock a victim out from elsewhere.
_LOCKOUT_PARAMETERS = {"username", "ip_address", "user_agent"}


def _env_lockout_parameters(name: str) -> list[str | list[str]]:
    """``username+ip_address,ip_address`` -> ``[["username", "ip_address"], "ip_address"]`` (axes' format:
    a lockout when any group, counted together, reaches the limit)."""
    value = env_setting(name)
    groups: list[str | list[str]] = []
    for group in value.split(","):
        parts = [part.strip() for part in group.split("+")]
        if not all(part in _LOCKOUT_PARAMETERS for part in parts):
            raise ImproperlyConfigured(
                f"{name}={value!r}: each group is {' or '.join(sorted(_LOCKOUT_PARAMETERS))}, joined by '+';"
                " groups are separated by ','."
            )
        groups.append(parts[0] if len(parts) == 1 else parts)
    return groups


AXES_FAILURE_LIMIT = env_setting("LOGIN_FAILURE_LIMIT")
AXES_COOLOFF_TIME = timedelta(minutes=env_setting("LOGIN_LOCKOUT_MINUTES"))
AXES_LOCKOUT_PARAMETERS = _env_lockout_parameters("LOGIN_LOCKOUT_PARAMETERS")
# A try while locked out does not start the wait again: the page can say how long it lasts.
AXES_RESET_COOL_OFF_ON_FAILURE_DURING_LOCKOUT = False
AXES_RESET_ON_SUCCESS = True
AXES_LOCKOUT_CALLABLE = "accounts.views.locked_out"
AXES_CLIENT_IP_CALLABLE = "portal.proxies.client_address"
# Failed attempts are kept (they expire with the lockout); a row per successful login is not.
AXES_DISABLE_ACCESS_LOG = True

# Content-Security-Policy (django-csp): scripts, styles and connections from the portal itself
# only, no inline script, style or handler anywhere (templates use static files and json_script).
# 'self' covers the websocket (ws:/wss: to the same host and port) in CSP Level 3 browsers.
CONTENT_SECURITY_POLICY = {
    "DIRECTIVES": {
        "default-src": [SELF],
        "script-src": [SELF],
        "style-src": [SELF],
        "img-src": [SELF],
        "connect-src": [SELF],
        "object-src": [NONE],
        "base-uri": [SELF],
        "frame-ancestors": [NONE],
        "form-action": [SELF],
    },
}

# --- Celery -------------------------------------------------------------------------------------
CELERY_BROKER_URL = env_setting("CELERY_BROKER_URL", default=REDIS_URL)
CELERY_RESULT_BACKEND = None
CELERY_TASK_IGNORE_RESULT = True
# A task is acknowledged only after it finished, and a task whose worker died is re-queued:
# every task is idempotent, so running one twice is safe and losing one is not.
CELERY_TASK_ACKS_LATE = True
CELERY_TASK_REJECT_ON_WORKER_LOST = True
CELERY_WORKER_PREFETCH_MULTIPLIER = 1
# A message taken by a worker that died is put back on the queue once it has been unacknowledged
# for visibility_timeout seconds (checked every unacked_restore_interval): keep the timeout above
# the longest task, which is bounded by the driver's own timeouts.
CELERY_BROKER_TRANSPORT_OPTIONS = {
    "visibility_timeout": env_setting("CELERY_VISIBILITY_TIMEOUT"),
    "unacked_restore_interval": env_setting("CELERY_UNACKED_RESTORE_SECONDS"),
    "unacked_restore_throttle": 1,
}
CELERY_BROKER_CONNECTION_RETRY_ON_STARTUP = True
# No remote control (nothing here uses `celery inspect` or broadcast commands): its pidbox
# channel is what kombu's Redis transport fails to close when the broker restarts, taking the
# whole worker down ("'NoneType' object has no attribute 'hostname'"; make chaos saw it).
CELERY_WORKER_ENABLE_REMOTE_CONTROL = False
# Reconnect to a broker that is back within half a second, not after Celery's 2-30 s, and run the
# controller then for what waited (labs/worker.py).
CELERY_WORKER_CONSUMER = "labs.worker:PromptConsumer"
# A prefork worker process keeps its database connection pool from task to task (Celery's Django
# fixup closes it after every task unless told to reuse it): a new PostgreSQL connection costs
# the server a backend process and its catalog caches, a few ms of CPU, and a class start runs
# several tasks per session. The fixup still closes the pool once in this many tasks; between
# tasks the connections go back to the pool (portal/celery.py), as a web request's do.
CELERY_DB_REUSE_MAX = 1000
CELERY_TASK_ALWAYS_EAGER = env_setting("CELERY_TASK_ALWAYS_EAGER")
# The lifecycle controller (labs.services.controller): its beat period (it is also woken by every
# launch and stop), how many driver calls it makes at once, how often a failing create is tried.
LAB_CONTROLLER_SECONDS = env_setting("LAB_CONTROLLER_SECONDS")
LAB_CONTROLLER_FOLLOW_UP_SECONDS = env_setting("LAB_CONTROLLER_FOLLOW_UP_SECONDS")
LAB_CONTROLLER_ROUND_PAUSE_SECONDS = env_setting("LAB_CONTROLLER_ROUND_PAUSE_SECONDS")
LAB_CONTROLLER_THREADS = env_setting("LAB_CONTROLLER_THREADS")
LAB_CREATE_ATTEMPTS = env_setting("LAB_CREATE_ATTEMPTS")
LAB_CREATE_BACKOFF_MAX_SECONDS = env_setting("LAB_CREATE_BACKOFF_MAX_SECONDS")
# How long a run waits for the driver's answers before it moves on (they are picked up from the
# next observation), and how long a create may be under way before another run asks again.
LAB_CONTROLLER_WAIT_SECONDS = env_setting("LAB_CONTROLLER_WAIT_SECONDS")
LAB_CREATE_LEASE_SECONDS = env_setting("LAB_CREATE_LEASE_SECONDS")
CELERY_BEAT_SCHEDULE = {
    "controller": {
        "task": "labs.tasks.controller",
        "schedule": LAB_CONTROLLER_SECONDS,
        # A tick nobody ran in time is dropped: the next one does the same work.
        "options": {"expires": max(5.0, 5 * LAB_CONTROLLER_SECONDS)},
    },
    "reconcile": {"task": "labs.tasks.reconcile", "schedule": env_setting("RECONCILE_SECONDS")},
    "activity": {"task": "labs.tasks.activity", "schedule": env_setting("LAB_IDLE_CHECK_SECONDS")},
    "budgets": {"task": "labs.tasks.budgets", "schedule": env_setting("LAB_BUDGET_CHECK_SECONDS")},
    "reservations": {
        "task": "labs.tasks.reservations",
        "schedule": env_setting("LAB_RESERVATION_CHECK_SECONDS"),
    },
    # Nodes emptied for maintenance: stop what is still there at the deadline (labs.services.evacuation).
    "evacuations": {"task": "labs.tasks.evacuations", "schedule": env_setting("LAB_EVACUATION_CHECK_SECONDS")},
    # Unavailable nodes only: is the agent back? (cheap when every node is up)
    "nodes-recheck": {
        "task": "labs.tasks.nodes_recheck",
        "schedule": max(0.5, LAB_CONTROLLER_SECONDS / 2),
        "options": {"expires": max(5.0, 5 * LAB_CONTROLLER_SECONDS)},
    },
}

# --- Calls to other servers (labs/outbound.py: an LMS's services, webhook receivers) ------------------
# Plain http and local or private addresses are refused unless allowed (both allowed under DEBUG), for
# every call: a registration's keyset and token URLs, an LMS's roster and score URLs, webhook URLs.
# WEBHOOK_ALLOW_HTTP / WEBHOOK_ALLOW_PRIVATE_ADDRESSES, their names when only webhooks had the rule, still count.
OUTBOUND_ALLOW_HTTP = env_setting("OUTBOUND_ALLOW_HTTP", default=env_setting("WEBHOOK_ALLOW_HTTP", default=DEBUG))
OUTBOUND_ALLOW_PRIVATE_ADDRESSES = env_setting(
    "OUTBOUND_ALLOW_PRIVATE_ADDRESSES", default=env_setting("WEBHOOK_ALLOW_PRIVATE_ADDRESSES", default=DEBUG)
)
# Resolves a name once per request, before the address is checked and connected to: a dotted path
# to a function (host, port) -> list of IP addresses.
OUTBOUND_RESOLVER = env_setting("OUTBOUND_RESOLVER")

# --- LTI 1.3 (lti/) ---------------------------------------------------------------------------------
# A retired tool key stays in /lti/jwks/ this long after `manage.py lti_rotate_key`, so platforms
# that cached it can still verify what it signed.
LTI_KEY_GRACE_DAYS = env_setting("LTI_KEY_GRACE_DAYS")
LTI_ROSTER_SYNC_SECONDS = env_setting("LTI_ROSTER_SYNC_SECONDS")
LTI_HTTP_TIMEOUT_SECONDS = env_setting("LTI_HTTP_TIMEOUT_SECONDS")
CELERY_BEAT_SCHEDULE["lti-roster-sync"] = {"task": "lti.tasks.roster_sync_all", "schedule": LTI_ROSTER_SYNC_SECONDS}
# Called when a session ends (labs.dispatch.session_ended): the LMS score of an LTI launch.
LAB_SESSION_ENDED_HOOKS = ["lti.hooks.session_ended"]
# The roster import asks it whether a course's members sign in through an LMS (its name, or "")
# or get an invitation link to set a password (labs.services.roster.course_lms).
ROSTER_COURSE_LMS = "lti.hooks.course_lms"
# It finds the accounts a linked course's students sign in with, by e-mail, so a roster import
# adds a student's LMS account rather than make a second account (labs.services.roster.lms_accounts).
ROSTER_LMS_ACCOUNTS = "lti.hooks.lms_accounts"
# A score the LMS does not take is tried again after base, 2 x base, 4 x base, ... (at most the
# maximum), LTI_SCORE_MAX_ATTEMPTS times in all; then it has failed.
LTI_SCORE_MAX_ATTEMPTS = env_setting("LTI_SCORE_MAX_ATTEMPTS")
LTI_SCORE_RETRY_BASE_SECONDS = env_setting("LTI_SCORE_RETRY_BASE_SECONDS")
LTI_SCORE_RETRY_MAX_SECONDS = env_setting("LTI_SCORE_RETRY_MAX_SECONDS")
# Beat looks this often for scores that are due and held by no worker (a send lost with the
# process that ended the session, a lost retry, a killed worker's).
LTI_SCORE_SWEEP_SECONDS = env_setting("LTI_SCORE_SWEEP_SECONDS")
CELERY_BEAT_SCHEDULE["lti-scores"] = {
    "task": "lti.tasks.scores_pending",
    "schedule": LTI_SCORE_SWEEP_SECONDS,
    "options": {"expires": max(5.0, 2 * LTI_SCORE_SWEEP_SECONDS)},
}
# Expired OIDC state, nonces and launches are deleted.
CELERY_BEAT_SCHEDULE["lti-prune"] = {"task": "lti.tasks.launch_data_prune", "schedule": 3600.0}
LTI_SCORE_RETENTION_DAYS = env_setting("LTI_SCORE_RETENTION_DAYS")
CELERY_BEAT_SCHEDULE["lti-scores-prune"] = {"task": "lti.tasks.scores_prune", "schedule": 3600.0}

# --- Labs ---------------------------------------------------------------------------------------
# The cluster driver, chosen like Django's EMAIL_BACKEND: a dotted path and its options. Each
# backend reads only its own variables, and build_driver refuses an option the backend does not
# take, so OPTIONS holds exactly the chosen backend's options.


def _local_driver_options() -> dict[str, Any]:
    return {"state_dir": str(VAR_DIR / "driver"), "host": env_setting("LAB_LOCAL_HOST")}


def _simulator_driver_options() -> dict[str, Any]:
    return {
        "state_dir": str(VAR_DIR / "driver"),
        "start_delay_seconds": env_setting("LAB_SIMULATOR_DELAY_SECONDS"),
        "create_delay_seconds": env_setting("LAB_SIMULATOR_CREATE_DELAY_SECONDS"),
        # Fault injection (make chaos): the share of create / delete calls that fail.
        "create_failure_rate": env_setting("LAB_SIMULATOR_CREATE_FAILURE_RATE"),
        "delete_failure_rate": env_setting("LAB_SIMULATOR_DELETE_FAILURE_RATE"),
    }


def _kubernetes_driver_options() -> dict[str, Any]:
    # Inside the cluster the ServiceAccount is used when no API URL is given.
    options = {
        "api_url": env_setting("LAB_K8S_API_URL"),
        "token": env_setting("LAB_K8S_TOKEN"),
        "namespace_prefix": env_setting("LAB_K8S_NAMESPACE_PREFIX"),
        "profile": env_setting("LAB_K8S_PROFILE"),
        # Per node pool, by node label: "pool=research:vnpu,pool=hami-nodes:hami"; a pool's own
        # profile options need the dict form, in LAB_DRIVER_OPTIONS.
        "pool_profiles": env_setting("LAB_K8S_POOL_PROFILES"),
        # The host students open labs on: each session gets an Ingress for /labs/<session>/ there.
        "ingress_host": env_setting("LAB_K8S_INGRESS_HOST"),
        "ingress_class_name": env_setting("LAB_K8S_INGRESS_CLASS"),
    }
    if url_pattern := env_setting("LAB_K8S_URL_PATTERN"):
        options["url_pattern"] = url_pattern
    return options


_DRIVER_OPTIONS_FROM_ENV = {
    "labs.drivers.local.LocalDriver": _local_driver_options,
    "labs.drivers.simulator.SimulatorDriver": _simulator_driver_options,
    "labs.drivers.kubernetes.KubernetesDriver": _kubernetes_driver_options,
}
_driver_backend = env_setting("LAB_DRIVER")
_driver_options_from_env = _DRIVER_OPTIONS_FROM_ENV.get(_driver_backend, dict)
LAB_DRIVER = {
    "BACKEND": _driver_backend,
    # A JSON object in LAB_DRIVER_OPTIONS adds or overrides options of the chosen backend, e.g.
    # the Kubernetes driver's profile_settings, pod_options or a pool's own profile options.
    "OPTIONS": {**_driver_options_from_env(), **env_setting("LAB_DRIVER_OPTIONS")},
}
# The serving image of a vLLM model an operator allows without naming one: the image the CCE
# FlexNPU guide requires (vLLM Ascend v0.18.0 with CANN 8.5.0); a mirror of it where nodes cannot
# reach quay.io.
LAB_VLLM_IMAGE = env_setting("LAB_VLLM_IMAGE")
if not is_image_reference(LAB_VLLM_IMAGE):
    raise ImproperlyConfigured(
        f"LAB_VLLM_IMAGE={LAB_VLLM_IMAGE!r} is not a container image reference: use e.g. quay.io/ascend/vllm-ascend:v0.18.0."
    )
# Whether the NPU shares the portal books are enforced on hardware. Only the Kubernetes driver
# places labs on NPU nodes (FlexNPU, vNPU, HAMi); the local and simulator drivers run them on a
# machine without NPUs, and the student page says so. Set it to override (a test cluster without NPUs).
LAB_SHARES_ENFORCED = env_setting("LAB_SHARES_ENFORCED", default=_driver_backend == "labs.drivers.kubernetes.KubernetesDriver")
LAB_SPAWN_TIMEOUT_SECONDS = env_setting("LAB_SPAWN_TIMEOUT_SECONDS")
# Restarts a starting lab may take before it fails (within LAB_SPAWN_TIMEOUT_SECONDS still): the
# CCE FlexNPU guide says a pod may restart briefly while its instance initialises when many are
# created at once, and that this is normal. 0: a start fails at its first restart.
LAB_START_RESTARTS = env_setting("LAB_START_RESTARTS")
# Seconds a node that restarted has to report its NPUs again before the labs caught in the
# restart fail. The CCE FlexNPU guide: after an unexpected node restart, NPU pods may show
# failed because the NPU resources are reported late; this is normal and may be ignored. Within
# this bound such a lab is not failed for it: it waits, then is watched again or started again
# on its allocation (labs.domain.lifecycle). The guide names no time; 300 s is the spawn timeout's.
LAB_REBOOT_DEVICE_WAIT = env_setting("LAB_REBOOT_DEVICE_WAIT")
LAB_STOP_TIMEOUT_SECONDS = env_setting("LAB_STOP_TIMEOUT_SECONDS")
LAB_ALLOCATION_BATCH = env_setting("LAB_ALLOCATION_BATCH")
# Placement policies of the allocation engine (labs.domain.placement), as Volcano's
# flexnpuaffinity scheduleMode at node and card level; weights of HAMi-style utilisation scores.
LAB_PLACEMENT = {
    "node_policy": env_setting("LAB_NODE_POLICY"),
    "card_policy": env_setting("LAB_CARD_POLICY"),
    "weights": {
        "instances": env_setting("LAB_SCORE_WEIGHT_INSTANCES"),
        "core": env_setting("LAB_SCORE_WEIGHT_CORE"),
        "memory": env_setting("LAB_SCORE_WEIGHT_MEMORY"),
    },
    "min_runtime_seconds": env_setting("LAB_RECLAIM_MIN_RUNTIME_SECONDS"),
}
# Host CPU and memory of every node kept back from lab sessions: the system, the kubelet and the
# FlexNPU daemon (the vendor guide gives the daemon 2 CPU / 12 GiB). Placement offers a node's
# reported host figures minus this reserve (issue 14).
LAB_NODE_RESERVE_CPU_MILLICORES = env_setting("LAB_NODE_RESERVE_CPU_MILLICORES")
LAB_NODE_RESERVE_MEMORY_MIB = env_setting("LAB_NODE_RESERVE_MEMORY_MIB")
LAB_FAIR_SHARE_HALF_LIFE_HOURS = env_setting("LAB_FAIR_SHARE_HALF_LIFE_HOURS")
LAB_FAIR_SHARE_SECONDS_PER_PERCENT_HOUR = env_setting("LAB_FAIR_SHARE_SECONDS_PER_PERCENT_HOUR")
LAB_FAIR_SHARE_MAX_DELAY_SECONDS = env_setting("LAB_FAIR_SHARE_MAX_DELAY_SECONDS")
LAB_IDLE_WARNING_SECONDS = env_setting("LAB_IDLE_WARNING_SECONDS")
LAB_IDLE_PROBE_TIMEOUT_SECONDS = env_setting("LAB_IDLE_PROBE_TIMEOUT_SECONDS")
LAB_BUDGET_WARNING_PERCENT = env_setting("LAB_BUDGET_WARNING_PERCENT")
LAB_BUDGET_GRACE_SECONDS = env_setting("LAB_BUDGET_GRACE_SECONDS")
LAB_RECLAIM_WARNING_SECONDS = env_setting("LAB_RECLAIM_WARNING_SECONDS")
# Class reservations (beat: LAB_RESERVATION_CHECK_SECONDS): a slot's sessions are pre-started this
# long before it begins (the course's guarantee is raised from then to its end), and the ones no
# student claimed are stopped this long after it began.
LAB_RESERVATION_PRESTART_SECONDS = env_setting("LAB_RESERVATION_PRESTART_SECONDS")
LAB_RESERVATION_GRACE_SECONDS = env_setting("LAB_RESERVATION_GRACE_SECONDS")

# --- Node agents and the reconciler ---------------------------------------------------------------
LAB_AGENT_TOKEN = env_setting("LAB_AGENT_TOKEN")
LAB_AGENT_TIMEOUT_SECONDS = env_setting("LAB_AGENT_TIMEOUT_SECONDS")
LAB_AGENT_RECHECK_TIMEOUT_SECONDS = env_setting("LAB_AGENT_RECHECK_TIMEOUT_SECONDS")
LAB_AGENT_DEADLINE_SECONDS = env_setting("LAB_AGENT_DEADLINE_SECONDS")
# With the local and simulator drivers nothing on the node registers instances (on Kubernetes the
# FlexNPU device plugin does): the portal registers each session's instance with the agent itself.
LAB_AGENT_REGISTERS_INSTANCES = env_setting("LAB_AGENT_REGISTERS_INSTANCES")
LAB_RESIDUAL_GRACE_SECONDS = env_setting("LAB_RESIDUAL_GRACE_SECONDS")
LAB_GUARANTEE_WINDOW_SECONDS = env_setting("LAB_GUARANTEE_WINDOW_SECONDS")
LAB_GUARANTEE_TOLERANCE_PERCENT = env_setting("LAB_GUARANTEE_TOLERANCE_PERCENT")
LAB_GUARANTEE_MIN_SAMPLES = env_setting("LAB_GUARANTEE_MIN_SAMPLES")
METRICS_TOKEN = env_setting("METRICS_TOKEN")

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {"plain": {"format": "%(asctime)s %(levelname)s %(name)s %(message)s"}},
    "handlers": {"console": {"class": "logging.StreamHandler", "formatter": "plain"}},
    "root": {"handlers": ["console"], "level": env_setting("LOG_LEVEL")},
    # django-axes: failures and lockouts are warnings; its INFO lines repeat them at every login.
    "loggers": {"django.db.backends": {"level": "WARNING"}, "axes": {"level": "WARNING"}},
}

# --- The LMS API (/api/v1/, docs/lms.md) ------------------------------------------------------
# Institution tokens only (Authorization: Bearer ...): no session or basic auth, so no CSRF to
# think about and no browser can call it with a signed-in user's cookie.
REST_FRAMEWORK = {
    "DEFAULT_AUTHENTICATION_CLASSES": [
        "api.authentication.InstitutionTokenAuthentication",
        "api.authentication.InstitutionOAuth2Authentication",
    ],
    "DEFAULT_PERMISSION_CLASSES": ["api.permissions.HasScope"],
    "DEFAULT_THROTTLE_CLASSES": ["api.throttling.TokenRateThrottle"],
    "DEFAULT_RENDERER_CLASSES": ["api.renderers.JSONRenderer"],
    "DEFAULT_PARSER_CLASSES": ["rest_framework.parsers.JSONParser"],
    "DEFAULT_PAGINATION_CLASS": "api.pagination.Pagination",
    "DEFAULT_FILTER_BACKENDS": ["django_filters.rest_framework.DjangoFilterBackend"],
    "DEFAULT_SCHEMA_CLASS": "drf_spectacular.openapi.AutoSchema",
    "EXCEPTION_HANDLER": "api.exceptions.exception_handler",
    "UNAUTHENTICATED_USER": None,
    "PAGE_SIZE": 50,
}
SPECTACULAR_SETTINGS = {
    "TITLE": "NPU Lab Portal LMS API",
    "DESCRIPTION": (
        "The API a learning-management system uses to run courses on the portal, with an institution token "
        "(`Authorization: Bearer <token>`, made on /ops/tokens/ or with `manage.py api_token create`). "
        'Every error is `{"error": {"code", "message", "fields"}}`.'
    ),
    "VERSION": "1",
    # 3.1: JSON Schema proper, so the progress stream's events can say their data is JSON of a
    # schema (contentMediaType, contentSchema), which 3.0 has no words for.
    "OAS_VERSION": "3.1.0",
    "SERVE_INCLUDE_SCHEMA": False,
    "SWAGGER_UI_DIST": "SIDECAR",
    "SWAGGER_UI_FAVICON_HREF": "SIDECAR",
    "REDOC_DIST": "SIDECAR",
    "COMPONENT_SPLIT_REQUEST": True,
    "SCHEMA_PATH_PREFIX": "/api/v1",
    "POSTPROCESSING_HOOKS": ["drf_spectacular.hooks.postprocess_schema_enums", "api.schema.created_object_links"],
    # One name for the webhook event types, used by the subscription and the delivery alike; one
    # for a session's states, in a session and in its progress events.
    "ENUM_NAME_OVERRIDES": {
        "WebhookEventTypeEnum": "webhooks.catalogue.EVENT_TYPE_CHOICES",
        "SessionStateEnum": "labs.models.LabSession.State",
        "ProgressEventTypeEnum": ["progress"],
    },
}
# OAuth 2.0 for LMS back ends (django-oauth-toolkit): client-credentials only, an application per
# institution (api.OAuthClient, made on /ops/tokens/), its scopes the API's (api.scopes, through
# api.oauth.InstitutionScopes); access tokens live an hour.
OAUTH2_PROVIDER_APPLICATION_MODEL = "oauth2_provider.Application"  # api.OAuthClient refers to it
OAUTH2_PROVIDER = {
    "SCOPES_BACKEND_CLASS": "api.oauth.InstitutionScopes",
    "ACCESS_TOKEN_EXPIRE_SECONDS": env_setting("API_OAUTH_TOKEN_SECONDS"),
    # RFC 9700 (the OAuth 2.0 security BCP) throughout: tokens stored hashed, only in the
    # Authorization header, no implicit or password grant, https redirect URIs (none are used).
    "COMPLIANT_BCP_RFC9700_IMPLICIT_GRANT": True,
    "COMPLIANT_BCP_RFC9700_PASSWORD_GRANT": True,
    "COMPLIANT_BCP_RFC9700_PKCE_METHOD": True,
    "COMPLIANT_BCP_RFC9700_ACCESS_TOKEN_TRANSPORT": True,
    "COMPLIANT_BCP_RFC9700_AUTHZ_RESPONSE_ISS": True,
    "COMPLIANT_BCP_RFC9700_TOKEN_STORAGE": True,
    "COMPLIANT_BCP_RFC9700_REFRESH_TOKEN": True,
    "REFRESH_TOKEN_REUSE_PROTECTION": True,
    "ALLOWED_REDIRECT_URI_SCHEMES": ["https"],
}
# Requests per token in any moving window (DRF's rate syntax, e.g. 600/minute), counted in Redis
# (REDIS_URL, keys under API_THROTTLE_PREFIX) so every web process shares the count (api.throttling).
API_THROTTLE_RATE = env_setting("API_THROTTLE_RATE")
if not re.fullmatch(r"[1-9][0-9]*/(s|sec|second|m|min|minute|h|hour|d|day)", API_THROTTLE_RATE):
    raise ImproperlyConfigured(
        f"API_THROTTLE_RATE={API_THROTTLE_RATE!r}: requests per second, minute, hour or day, e.g. 600/minute."
    )
API_THROTTLE_PREFIX = env_setting("API_CACHE_PREFIX")
CACHES = {"default": {"BACKEND": "django.core.cache.backends.locmem.LocMemCache"}}
# A launch's Idempotency-Key is remembered this long (the same key and body give the same
# session); then beat deletes it, and a retry with it makes a new session.
API_IDEMPOTENCY_RETENTION_HOURS = env_setting("API_IDEMPOTENCY_RETENTION_HOURS")
CELERY_BEAT_SCHEDULE["api-idempotency-prune"] = {"task": "api.tasks.idempotency_keys_prune", "schedule": 3600.0}
API_PROGRESS_MAX_SECONDS = env_setting("API_PROGRESS_MAX_SECONDS")
API_PROGRESS_POLL_SECONDS = env_setting("API_PROGRESS_POLL_SECONDS")

# --- Webhooks (webhooks/, docs/lms.md) ----------------------------------------------------------
# Called with session events inside the transaction of the change (labs.services.events): the LMS
# webhooks' outbox, and the LTI grade progress (lti.grading).
LAB_SESSION_EVENT_HOOKS = ["webhooks.hooks.session_events", "lti.grading.session_events"]
# One attempt waits this long for an answer; a failed delivery is tried again after about
# base, 4 x base, 16 x base, ... (at most WEBHOOK_RETRY_MAX_SECONDS), WEBHOOK_MAX_ATTEMPTS times in all.
WEBHOOK_TIMEOUT_SECONDS = env_setting("WEBHOOK_TIMEOUT_SECONDS")
WEBHOOK_MAX_ATTEMPTS = env_setting("WEBHOOK_MAX_ATTEMPTS")
WEBHOOK_RETRY_BASE_SECONDS = env_setting("WEBHOOK_RETRY_BASE_SECONDS")
WEBHOOK_RETRY_MAX_SECONDS = env_setting("WEBHOOK_RETRY_MAX_SECONDS")
WEBHOOK_AUTO_PAUSE_FAILURES = env_setting("WEBHOOK_AUTO_PAUSE_FAILURES")
# Beat looks this often for deliveries that are due and held by no worker (lost retries, killed workers).
WEBHOOK_SWEEP_SECONDS = env_setting("WEBHOOK_SWEEP_SECONDS")
WEBHOOK_RETENTION_DAYS = env_setting("WEBHOOK_RETENTION_DAYS")
CELERY_BEAT_SCHEDULE["webhooks-sweep"] = {
    "task": "webhooks.tasks.sweep",
    "schedule": WEBHOOK_SWEEP_SECONDS,
    "options": {"expires": max(5.0, 2 * WEBHOOK_SWEEP_SECONDS)},
}
CELERY_BEAT_SCHEDULE["webhooks-prune"] = {"task": "webhooks.tasks.prune", "schedule": 3600.0}
