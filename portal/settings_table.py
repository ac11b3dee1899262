"""Every setting the portal reads from the environment: its name, type, default, limits and help, written once.

``portal/settings.py`` reads each one with ``env_setting(name)``, which parses it with the matching
``portal.env`` helper (so ``NAME_FILE`` works and a malformed value stops start-up with
``ImproperlyConfigured`` naming the variable). ``docs/settings.md`` is generated from this table
(``python -m portal.settings_doc``, ``make settings-doc``); tests/test_settings_reference.py fails when
the page is stale or when settings.py reads a variable the table does not hold.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

from django.core.exceptions import ImproperlyConfigured

from portal import env

Kind = Literal["str", "bool", "int", "float", "list", "json", "fernet", "database", "redis"]


class _Computed:
    """The default of a setting that depends on others: settings.py passes it, ``default_doc`` says it."""

    def __repr__(self) -> str:
        return "COMPUTED"


COMPUTED: Any = _Computed()


@dataclass(frozen=True)
class Setting:
    name: str
    kind: Kind
    default: Any
    help: str
    minimum: float | None = None
    maximum: float | None = None
    choices: tuple[str, ...] = ()
    required: bool = False
    # How the default reads on the page when it is computed or better said in words.
    default_doc: str | None = None


S = Setting
DAY = 24 * 3600

SECTIONS: dict[str, tuple[Setting, ...]] = {
    "The portal": (
        S("SECRET_KEY", "str", None, "Django's signing key, at least 32 characters (`make demo` generates `var/secret_key`).",
          required=True, default_doc="— (required)"),
        S("FIELD_ENCRYPTION_KEY", "fernet", None,
          "Fernet keys, comma- or line-separated, that encrypt the LTI private keys and webhook secrets in the database: the"
          " first encrypts, all decrypt (see [Encryption at rest](security.md)). Required outside the SQLite demo; `make demo`"
          " generates `var/field_encryption_key`.", default_doc="—"),
        S("DEBUG", "bool", False, "Django's debug mode."),
        S("PORTAL_VAR_DIR", "str", COMPUTED, "SQLite file, driver state, static files.", default_doc="`var/` in the checkout"),
        S("ALLOWED_HOSTS", "list", ["localhost", "127.0.0.1", "[::1]"], "Host names the portal answers to."),
        S("CSRF_TRUSTED_ORIGINS", "list", [], "Origins trusted for unsafe requests (Django's `CSRF_TRUSTED_ORIGINS`)."),
        S("DATABASE_URL", "database", COMPUTED,
          "`sqlite:///path` or `postgres://user:pass@host:5432/name` (production).",
          default_doc="`sqlite:///<PORTAL_VAR_DIR>/portal.sqlite3`"),
        S("DATABASE_POOL_SIZE", "int", 10,
          "PostgreSQL connections each process keeps in its pool (0: no pool, a connection per request); a web process serves"
          " at most as many requests at once in its threads, the others wait on its event loop.", minimum=0),
        S("DATABASE_POOL_MIN_SIZE", "int", 1,
          "Of DATABASE_POOL_SIZE, the connections a pool keeps open while idle (psycopg_pool closes the others after"
          " 10 idle minutes). Set it to the pool size on the web processes (deploy/ does): a class start then finds"
          " their connections open instead of making each (a password exchange and a new server process, about 10 ms of"
          " CPU on each side). Leave the workers' at 1: a worker process runs one task at a time.", minimum=0),
        S("DATABASE_PREPARE_THRESHOLD", "int", 1,
          "PostgreSQL: the runs of a statement on a connection after which psycopg prepares it (its parameters bound on the"
          " server), so PostgreSQL parses and plans it once per connection, not on every call. 0: Django's default, the"
          " parameters bound on the client and nothing prepared, for a PgBouncer that pools by transaction without"
          " `max_prepared_statements` (before 1.21).", minimum=0),
        S("REDIS_URL", "redis", "redis://127.0.0.1:6379/0",
          "Celery broker and Channels layer (`make demo` uses database 15)."),
        S("CHANNELS_LAYER", "str", "pubsub",
          "How the live updates reach the web processes: `pubsub` (channels_redis's Redis Pub/Sub layer, which Redis pushes to"
          " the processes whose sockets joined a group) or `list` (its original layer: each process pops its sockets' messages"
          " off one Redis key, one round trip per message). Pub/Sub keeps nothing: an update sent while a web process's"
          " subscription is down never reaches it; once it has subscribed again the process tells every socket it holds and"
          " each page reads again what it shows. `list` keeps messages a minute.", choices=("pubsub", "list")),
        S("CHANNELS_PREFIX", "str", "portal", "Prefix of the channel layer's keys in Redis."),
        S("CHANNELS_CAPACITY", "int", 10_000,
          "With `CHANNELS_LAYER=list`: messages waiting for one web process before more are dropped (all its websockets share"
          " one key; the layer's default of 100 lost updates whenever one controller round told a few hundred students of"
          " their labs).", minimum=100),
        S("LANGUAGE_CODE", "str", "en", "Django's `LANGUAGE_CODE`: the language when the reader's choice and browser name none."),
        S("TIME_ZONE", "str", "UTC", "The portal's time zone: weekly budgets and class reservations are counted in it."),
        S("LOG_LEVEL", "str", "INFO", "Level of the root logger (the console)."),
    ),
    "Security": (
        S("HTTPS", "bool", False,
          "The portal is served over TLS (itself or behind a TLS-terminating proxy): turns on secure cookies, the HTTPS"
          " redirect and HSTS."),
        S("SECURE_COOKIES", "bool", COMPUTED, "Session and CSRF cookies sent over HTTPS only.",
          default_doc="on with `HTTPS` (unless `DEBUG`)"),
        S("SESSION_COOKIE_SAMESITE", "str", "Lax",
          "`None` lets the portal keep its session inside an LMS iframe (needs secure cookies); also the CSRF cookie's.",
          choices=("Lax", "Strict", "None")),
        S("SECURE_SSL_REDIRECT", "bool", COMPUTED, "Plain HTTP is redirected to HTTPS (not `/metrics`, scraped in the cluster).",
          default_doc="on with `HTTPS`"),
        S("SECURE_HSTS_SECONDS", "int", COMPUTED, "`Strict-Transport-Security` max-age; 0: no header.", minimum=0,
          default_doc="31536000 (a year) with `HTTPS`, else 0"),
        S("SECURE_HSTS_INCLUDE_SUBDOMAINS", "bool", COMPUTED, "HSTS `includeSubDomains`.", default_doc="on with `HTTPS`"),
        S("SECURE_HSTS_PRELOAD", "bool", False,
          "HSTS `preload`: a commitment for the whole domain, not undone by a setting (see [Security](security.md))."),
        S("SECURE_PROXY_SSL_HEADER", "str", "",
          "Behind a TLS-terminating proxy, the header it sets to `https` (`X-Forwarded-Proto`); only with a proxy that"
          " overwrites the client's.", default_doc="—"),
        S("TRUSTED_PROXY_COUNT", "int", 0,
          "Reverse proxies in front of the portal that append to `X-Forwarded-For`; the client's address for login lockouts is"
          " the entry the outermost one added (0: the header is ignored).", minimum=0, maximum=10),
        S("LOGIN_FAILURE_LIMIT", "int", 5, "Failed logins before logging in is refused.", minimum=1, maximum=1000),
        S("LOGIN_LOCKOUT_MINUTES", "int", 15, "How long logging in is refused after the last failure.",
          minimum=1, maximum=7 * 24 * 60),
        S("LOGIN_LOCKOUT_PARAMETERS", "str", "username+ip_address",
          "What a lockout counts failures by: groups of `username`, `ip_address`, `user_agent` joined by `+`, groups separated"
          " by `,` (e.g. `username+ip_address,ip_address` also locks an address out)."),
        S("METRICS_TOKEN", "str", "",
          "Bearer token a scrape of `/metrics` must send; without one `/metrics` answers 403 unless `DEBUG` is on (`make demo`"
          " generates `var/metrics_token`).", default_doc="—"),
        S("OUTBOUND_ALLOW_HTTP", "bool", COMPUTED,
          "URLs the portal calls (webhooks; an LMS's keyset, token, roster and score URLs; its login URL) may be plain http.",
          default_doc="`WEBHOOK_ALLOW_HTTP`"),
        S("WEBHOOK_ALLOW_HTTP", "bool", COMPUTED, "The former name of `OUTBOUND_ALLOW_HTTP`, read when that is not set.",
          default_doc="on with `DEBUG`"),
        S("OUTBOUND_ALLOW_PRIVATE_ADDRESSES", "bool", COMPUTED,
          "URLs the portal calls may point to local or private addresses (checked when a URL is saved and again at each"
          " request).", default_doc="`WEBHOOK_ALLOW_PRIVATE_ADDRESSES`"),
        S("WEBHOOK_ALLOW_PRIVATE_ADDRESSES", "bool", COMPUTED,
          "The former name of `OUTBOUND_ALLOW_PRIVATE_ADDRESSES`, read when that is not set.", default_doc="on with `DEBUG`"),
        S("OUTBOUND_RESOLVER", "str", "labs.outbound.system_resolve",
          "Resolves a name the portal calls, once per request: a dotted path to a function `(host, port) -> [addresses]`."),
    ),
    "Celery and the lifecycle controller": (
        S("CELERY_BROKER_URL", "redis", COMPUTED, "Celery's broker.", default_doc="`REDIS_URL`"),
        S("CELERY_VISIBILITY_TIMEOUT", "int", 300, "Seconds before a dead worker's task is re-delivered.", minimum=5),
        S("CELERY_UNACKED_RESTORE_SECONDS", "int", 10,
          "How often the broker transport looks for the unacknowledged tasks of dead workers to put back.", minimum=1),
        S("CELERY_TASK_ALWAYS_EAGER", "bool", False, "Tasks run in the process that sends them, not on a worker (Celery's own)."),
        S("LAB_CONTROLLER_SECONDS", "float", 1.0,
          "Beat period of the lifecycle controller (it is also woken by launches and stops).", minimum=0.2),
        S("LAB_CONTROLLER_FOLLOW_UP_SECONDS", "float", 0.25,
          "While labs start or stop, the controller looks again after this.", minimum=0.05),
        S("LAB_CONTROLLER_ROUND_PAUSE_SECONDS", "float", 0.1,
          "Least pause between two rounds of one run (a burst of launches is taken in batches); a round that cost more CPU"
          " is followed by a pause as long as its CPU (the wait for its driver calls counted in it), and so is the"
          " follow-up.", minimum=0.0),
        S("LAB_CONTROLLER_THREADS", "int", 16,
          "Driver calls (create, delete) made at once, per worker process (a round sends as many creates as they"
          " clear in a third of LAB_CREATE_LEASE_SECONDS, 4 per thread until calls are timed).",
          minimum=1, maximum=64),
        S("LAB_CREATE_ATTEMPTS", "int", 5, "Tries of a create that fails transiently before the session fails.",
          minimum=1, maximum=20),
        S("LAB_CREATE_BACKOFF_MAX_SECONDS", "float", 1.0, "Longest wait between two tries (0.5 s, then doubling up to this).",
          minimum=0.1),
        S("LAB_CONTROLLER_WAIT_SECONDS", "float", 3.0,
          "How long a controller run waits for the driver's answers; later ones are picked up from the next observation.",
          minimum=0.1),
        S("LAB_CREATE_LEASE_SECONDS", "int", 15,
          "A create under way is not asked again before this (a slow cluster); a dead worker's leases end in 3 s.", minimum=2),
        S("LAB_ALLOCATION_BATCH", "int", 512,
          "Queued sessions one allocation pass admits at most; the controller's next pass admits the rest.", minimum=1),
        S("RECONCILE_SECONDS", "float", 30.0, "Beat period of the node reconciler.", minimum=1.0),
        S("LAB_IDLE_CHECK_SECONDS", "float", 60.0, "Idle culling: how often running labs are looked at.", minimum=1.0),
        S("LAB_BUDGET_CHECK_SECONDS", "float", 30.0, "Weekly budgets: how often running labs are checked.", minimum=1.0),
        S("LAB_RESERVATION_CHECK_SECONDS", "float", 30.0, "Class reservations: how often beat runs the rule.", minimum=1.0),
        S("LAB_EVACUATION_CHECK_SECONDS", "float", 15.0,
          "Nodes emptied for maintenance: how often beat stops what is still there at the deadline.", minimum=1.0),
    ),
    "The cluster driver": (
        S("LAB_DRIVER", "str", "labs.drivers.local.LocalDriver",
          "Dotted path of the cluster driver (`labs.drivers.simulator.SimulatorDriver` for load tests,"
          " `labs.drivers.kubernetes.KubernetesDriver` in production); each reads only its own variables below."),
        S("LAB_DRIVER_OPTIONS", "json", None,
          "More options for the chosen driver, over its variables (e.g. `profile_settings`, `pod_options`,"
          " `spawn_timeout_seconds`); an option the driver does not take stops start-up.", default_doc="—"),
        S("LAB_LOCAL_HOST", "str", "127.0.0.1", "Local driver: the address JupyterLab listens on."),
        S("LAB_SIMULATOR_DELAY_SECONDS", "float", 2.0, "Simulator driver: how long a lab takes to start."),
        S("LAB_SIMULATOR_CREATE_DELAY_SECONDS", "float", 0.0, "Simulator driver: how long `create` blocks."),
        S("LAB_SIMULATOR_CREATE_FAILURE_RATE", "float", 0.0, "Simulator driver: share of create calls that fail (faults)."),
        S("LAB_SIMULATOR_DELETE_FAILURE_RATE", "float", 0.0, "Simulator driver: share of delete calls that fail (faults)."),
        S("LAB_K8S_API_URL", "str", "", "Kubernetes driver: the API server (in the cluster, its ServiceAccount's).",
          default_doc="in-cluster"),
        S("LAB_K8S_TOKEN", "str", "", "Kubernetes driver: the bearer token (in the cluster, its ServiceAccount's).",
          default_doc="—"),
        S("LAB_K8S_NAMESPACE_PREFIX", "str", "lab-", "Kubernetes driver: a course's namespace is this prefix and its code."),
        S("LAB_K8S_PROFILE", "str", "flexnpu", "Kubernetes driver: the device profile of the nodes (`flexnpu`, `vnpu`, `hami`)."),
        S("LAB_K8S_POOL_PROFILES", "str", "",
          "Kubernetes driver: a profile per node pool, by node label: `pool=research:vnpu,pool=hami-nodes:hami` (a pool's own"
          " profile options go in `LAB_DRIVER_OPTIONS`).", default_doc="—"),
        S("LAB_K8S_INGRESS_HOST", "str", "",
          "Kubernetes driver: the host students open labs on; each session gets an Ingress for `/labs/<session>/` there.",
          default_doc="— (no route)"),
        S("LAB_K8S_INGRESS_CLASS", "str", "nginx", "Kubernetes driver: the Ingress class of those routes."),
        S("LAB_K8S_URL_PATTERN", "str", None, "Kubernetes driver: the address a student opens, with `{session_id}`.",
          default_doc="`https://<ingress host>/labs/{session_id}/` or the in-cluster address"),
    ),
    "Labs, placement and policies": (
        S("LAB_VLLM_IMAGE", "str", "quay.io/ascend/vllm-ascend:v0.18.0",
          "The container image serving a vLLM model an operator allows without naming one (the CCE FlexNPU guide's image:"
          " vLLM Ascend v0.18.0, CANN 8.5.0; a mirror of it where nodes cannot reach quay.io)."),
        S("LAB_SHARES_ENFORCED", "bool", COMPUTED,
          "Off: the student page says NPU shares are booked but not enforced on this machine.",
          default_doc="on with the `kubernetes` driver, else off"),
        S("LAB_SPAWN_TIMEOUT_SECONDS", "int", 300, "A session not running by then fails with the reason.", minimum=5),
        S("LAB_START_RESTARTS", "int", 3,
          "Restarts a starting lab may take (normal in a FlexNPU batch creation) before it fails; 0: the first fails it.",
          minimum=0, maximum=20),
        S("LAB_REBOOT_DEVICE_WAIT", "int", 300,
          "Seconds a restarted node has to report its NPUs again before the labs caught in the restart fail.",
          minimum=0, maximum=3600),
        S("LAB_STOP_TIMEOUT_SECONDS", "int", 120, "A pod still being deleted after this is asked to go again.", minimum=5),
        S("LAB_NODE_POLICY", "str", "binpack", "Placement policy at node level (`binpack` or `spread`)."),
        S("LAB_CARD_POLICY", "str", "binpack", "Placement policy at card level (`binpack` or `spread`)."),
        S("LAB_SCORE_WEIGHT_INSTANCES", "int", 1, "Weight of instance-count utilisation in the placement score.", minimum=0),
        S("LAB_SCORE_WEIGHT_CORE", "int", 1, "Weight of AI-Core utilisation in the placement score.", minimum=0),
        S("LAB_SCORE_WEIGHT_MEMORY", "int", 1, "Weight of memory utilisation in the placement score.", minimum=0),
        S("LAB_RECLAIM_MIN_RUNTIME_SECONDS", "int", 600, "A borrowed session younger than this is never planned for reclaim.",
          minimum=0),
        S("LAB_RECLAIM_WARNING_SECONDS", "int", 300,
          "A borrowed session planned for reclaim is warned and stopped this long after.", minimum=0, maximum=DAY),
        S("LAB_NODE_RESERVE_CPU_MILLICORES", "int", 2000,
          "Host CPU of every node kept from lab sessions (system, kubelet, FlexNPU daemon); placement offers the rest.",
          minimum=0),
        S("LAB_NODE_RESERVE_MEMORY_MIB", "int", 12288, "Host memory of every node kept from lab sessions.", minimum=0),
        S("LAB_FAIR_SHARE_HALF_LIFE_HOURS", "float", 24.0, "Fair order in a course's queue: how fast past usage is forgotten.",
          minimum=0.0),
        S("LAB_FAIR_SHARE_SECONDS_PER_PERCENT_HOUR", "float", 30.0,
          "Fair order: how far back each AI-Core-% × hour of recent usage puts a launch.", minimum=0.0),
        S("LAB_FAIR_SHARE_MAX_DELAY_SECONDS", "float", 1800.0, "Fair order: how far back a launch is put at most.", minimum=0.0),
        S("LAB_IDLE_WARNING_SECONDS", "int", 600, "Idle culling: how long before the stop the student is warned.",
          minimum=0, maximum=DAY),
        S("LAB_IDLE_PROBE_TIMEOUT_SECONDS", "float", 3.0, "Idle culling: how long a look waits for a lab.", minimum=0.1),
        S("LAB_BUDGET_WARNING_PERCENT", "int", 80, "Weekly budgets: the share used that warns.", minimum=1, maximum=99),
        S("LAB_BUDGET_GRACE_SECONDS", "int", 300, "Weekly budgets: the time to save work once the budget is used up.",
          minimum=0, maximum=DAY),
        S("LAB_RESERVATION_PRESTART_SECONDS", "int", 600,
          "Class reservations: how long before a class its labs are pre-started (and its guarantee raised).",
          minimum=0, maximum=DAY),
        S("LAB_RESERVATION_GRACE_SECONDS", "int", 900,
          "Class reservations: how long after the class begins unclaimed labs are stopped.", minimum=0, maximum=DAY),
    ),
    "Node agents and the reconciler": (
        S("LAB_AGENT_TOKEN", "str", "",
          "Bearer token for the node agents (`make demo` generates `var/agent_token`).", default_doc="—"),
        S("LAB_AGENT_TIMEOUT_SECONDS", "float", 5.0, "How long a call to a node agent waits when the caller names no deadline.",
          minimum=0.1),
        S("LAB_AGENT_RECHECK_TIMEOUT_SECONDS", "float", 1.0,
          "Twice per `LAB_CONTROLLER_SECONDS` (every half period, at least 0.5 s) the agent of an unavailable node is asked this"
          " briefly whether it is back.", minimum=0.1),
        S("LAB_AGENT_DEADLINE_SECONDS", "float", 2.0,
          "How long each of the controller's calls to an agent (register, unregister) waits; a node whose agent does not"
          " answer in time is marked unavailable until its quick check answers.", minimum=0.1),
        S("LAB_AGENT_REGISTERS_INSTANCES", "bool", True,
          "The portal registers instances with the agents itself (off on Kubernetes, where the device plugin does)."),
        S("LAB_RESIDUAL_GRACE_SECONDS", "int", 300,
          "How long an instance whose pod exists nowhere (the FlexNPU residual rule) is left alone before it is unregistered.",
          minimum=0),
        S("LAB_GUARANTEE_WINDOW_SECONDS", "int", 300,
          "Guarantee monitor: an instance that demanded at least its AI-Core floor but got less than the floor minus the"
          " tolerance in every sample of this window is a breach.", minimum=1),
        S("LAB_GUARANTEE_TOLERANCE_PERCENT", "int", 10,
          "Guarantee monitor: the tolerance, in percent of the card (the openFuyao bound is 10).", minimum=0, maximum=100),
        S("LAB_GUARANTEE_MIN_SAMPLES", "int", 3, "Guarantee monitor: samples needed in the window.", minimum=1),
    ),
    "LTI 1.3": (
        S("LTI_KEY_GRACE_DAYS", "int", 7, "A rotated-out LTI key stays in `/lti/jwks/` this long.", minimum=0, maximum=365),
        S("LTI_ROSTER_SYNC_SECONDS", "float", 3600.0, "How often beat syncs LMS-linked rosters (NRPS).", minimum=60.0),
        S("LTI_HTTP_TIMEOUT_SECONDS", "float", 10.0, "How long a call to an LMS (keyset, token, roster, score) may take.",
          minimum=1.0),
        S("LTI_SCORE_MAX_ATTEMPTS", "int", 6, "Attempts at posting a score before it is marked failed.", minimum=1, maximum=30),
        S("LTI_SCORE_RETRY_BASE_SECONDS", "float", 10.0,
          "Backoff: after the n-th failed attempt the next waits base × 2ⁿ⁻¹, at most `LTI_SCORE_RETRY_MAX_SECONDS`.",
          minimum=0.05),
        S("LTI_SCORE_RETRY_MAX_SECONDS", "float", 600.0, "The longest wait between two attempts at a score.", minimum=1.0),
        S("LTI_SCORE_SWEEP_SECONDS", "float", 60.0, "How often beat sends scores that are due and held by no worker.",
          minimum=0.2),
        S("LTI_SCORE_RETENTION_DAYS", "int", 30, "Sent scores are deleted after this (pending and failed ones stay).",
          minimum=1, maximum=3650),
    ),
    "The LMS API": (
        S("API_THROTTLE_RATE", "str", "600/minute",
          "Requests per API token (per `second`, `minute`, `hour` or `day`), counted in Redis across all web processes; more"
          " get 429 with `Retry-After`."),
        S("API_CACHE_PREFIX", "str", "portal-api", "Key prefix of the API's throttle counts in Redis."),
        S("API_OAUTH_TOKEN_SECONDS", "int", 3600, "How long an OAuth 2.0 access token of an LMS (client credentials) lasts.",
          minimum=60),
        S("API_IDEMPOTENCY_RETENTION_HOURS", "int", 24,
          "How long a launch's `Idempotency-Key` is remembered before beat deletes it.", minimum=1, maximum=24 * 365),
        S("API_PROGRESS_MAX_SECONDS", "int", 300,
          "How long `GET /api/v1/sessions/<id>/progress` streams at most (the client reconnects).", minimum=1),
        S("API_PROGRESS_POLL_SECONDS", "float", 1.0, "How often the progress stream looks at the session.", minimum=0.05),
    ),
    "Webhooks": (
        S("WEBHOOK_TIMEOUT_SECONDS", "float", 5.0, "How long one delivery attempt waits for the LMS's answer.", minimum=0.5),
        S("WEBHOOK_MAX_ATTEMPTS", "int", 8, "Attempts before a delivery is marked failed.", minimum=1, maximum=30),
        S("WEBHOOK_RETRY_BASE_SECONDS", "float", 15.0,
          "Backoff: after the n-th failed attempt the next waits about base × 4ⁿ⁻¹ (jittered), at most"
          " `WEBHOOK_RETRY_MAX_SECONDS`.", minimum=0.05),
        S("WEBHOOK_RETRY_MAX_SECONDS", "float", 21600.0, "The longest wait between two delivery attempts.", minimum=1.0),
        S("WEBHOOK_AUTO_PAUSE_FAILURES", "int", 20,
          "A subscription is paused after this many deliveries in a row failed for good (0: never).", minimum=0),
        S("WEBHOOK_SWEEP_SECONDS", "float", 30.0, "How often beat sends deliveries that are due and held by no worker.",
          minimum=0.2),
        S("WEBHOOK_RETENTION_DAYS", "int", 30, "Finished deliveries and their log are deleted after this.",
          minimum=1, maximum=3650),
    ),
}

SETTINGS: dict[str, Setting] = {setting.name: setting for group in SECTIONS.values() for setting in group}


def env_setting(name: str, *, default: Any = COMPUTED) -> Any:
    """The value of the setting ``name`` from the environment, parsed as its table entry says.

    A setting whose default is ``COMPUTED`` takes it from the caller; any other takes the table's.
    """
    setting = SETTINGS[name]
    if (setting.default is COMPUTED) != (default is not COMPUTED):
        raise TypeError(f"{name}: pass a default exactly when the table's is COMPUTED.")
    if setting.default is not COMPUTED:
        default = setting.default
    value = _READERS[setting.kind](setting, default)
    if setting.choices and value not in setting.choices:
        raise ImproperlyConfigured(f"{name}={value!r}: use {', '.join(setting.choices[:-1])} or {setting.choices[-1]}.")
    return value


def _limits(setting: Setting) -> dict[str, float]:
    return {key: value for key in ("minimum", "maximum") if (value := getattr(setting, key)) is not None}


_READERS: dict[Kind, Callable[[Setting, Any], Any]] = {
    "str": lambda s, default: env.env_str(s.name, default, required=s.required),
    "bool": lambda s, default: env.env_bool(s.name, default),
    "int": lambda s, default: env.env_int(s.name, default, **_limits(s)),
    "float": lambda s, default: env.env_float(s.name, default, **_limits(s)),
    "list": lambda s, default: env.env_list(s.name, default),
    "json": lambda s, default: env.env_json_object(s.name),
    "fernet": lambda s, default: env.env_fernet_keys(s.name),
    "redis": lambda s, default: env.env_redis_url(s.name, default),
    "database": lambda s, default: env.env_database(
        s.name,
        default,
        pool_size=lambda: env_setting("DATABASE_POOL_SIZE"),
        pool_min_size=lambda: env_setting("DATABASE_POOL_MIN_SIZE"),
        prepare_threshold=lambda: env_setting("DATABASE_PREPARE_THRESHOLD"),
    ),
}
