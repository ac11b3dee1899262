"""Strict reading of settings from the environment.

Every value may come from ``NAME`` or from a file named by ``NAME_FILE`` (a mounted Kubernetes
or Docker secret), through django-environ's ``FileAwareEnv``. A value that is present but
malformed raises ``ImproperlyConfigured`` naming the variable and what it accepts, so a typo in
a deployment stops the portal at start-up instead of silently meaning something else.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from typing import Any

import environ
from django.core.exceptions import ImproperlyConfigured

_env = environ.FileAwareEnv()

_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off", ""}


def _raw(name: str) -> str | None:
    try:
        value = _env.str(name, default=None)
    except OSError as exc:  # NAME_FILE points at a file that cannot be read
        raise ImproperlyConfigured(f"{name}_FILE cannot be read: {exc}") from exc
    return None if value is None else value.strip()


def env_str(name: str, default: str | None = None, *, required: bool = False) -> str | None:
    value = _raw(name)
    if value in (None, ""):
        if required:
            raise ImproperlyConfigured(f"{name} is not set: set {name} or {name}_FILE.")
        return default
    return value


def env_bool(name: str, default: bool = False) -> bool:
    value = _raw(name)
    if value is None:
        return default
    lowered = value.lower()
    if lowered in _TRUE:
        return True
    if lowered in _FALSE:
        return False
    raise ImproperlyConfigured(f"{name}={value!r} is not a boolean: use one of 1/0, true/false, yes/no, on/off.")


def env_int(name: str, default: int, *, minimum: int | None = None, maximum: int | None = None) -> int:
    value = _raw(name)
    if value in (None, ""):
        return default
    try:
        number = int(value)
    except ValueError:
        raise ImproperlyConfigured(f"{name}={value!r} is not an integer.") from None
    if minimum is not None and number < minimum or maximum is not None and number > maximum:
        raise ImproperlyConfigured(f"{name}={number} is out of range [{minimum}, {maximum}].")
    return number


def env_float(name: str, default: float, *, minimum: float = 0.0) -> float:
    value = _raw(name)
    if value in (None, ""):
        return default
    try:
        number = float(value)
    except ValueError:
        raise ImproperlyConfigured(f"{name}={value!r} is not a number.") from None
    if number < minimum:
        raise ImproperlyConfigured(f"{name}={number} must be at least {minimum}.")
    return number


def env_list(name: str, default: list[str]) -> list[str]:
    value = _raw(name)
    if value is None:
        return list(default)
    return [item.strip() for item in value.split(",") if item.strip()]


def env_json_object(name: str) -> dict[str, Any]:
    """A JSON object (``{}`` when unset); the error names the variable but never repeats the value (it may hold a token)."""
    value = _raw(name)
    if value in (None, ""):
        return {}
    try:
        parsed = json.loads(value)
    except ValueError as exc:
        raise ImproperlyConfigured(f"{name} is not valid JSON: {exc.msg} at line {exc.lineno} column {exc.colno}.") from None
    if not isinstance(parsed, dict):
        raise ImproperlyConfigured(f"{name} must be a JSON object {{...}}, got a {type(parsed).__name__}.")
    return parsed


def env_fernet_keys(name: str) -> list[str]:
    """Fernet keys (32 url-safe base64-encoded bytes each), separated by commas or whitespace
    (one a line in a file); ``[]`` when unset. A malformed one is refused by its position, never
    repeated (it is a secret)."""
    from cryptography.fernet import Fernet

    value = _raw(name)
    keys = [key for key in re.split(r"[\s,]+", value or "") if key]
    for position, key in enumerate(keys, start=1):
        try:
            Fernet(key)
        except ValueError:
            raise ImproperlyConfigured(
                f"{name}: key {position} of {len(keys)} is not a Fernet key (32 url-safe base64-encoded bytes); make one with"
                ' python -c "from cryptography.fernet import Fernet; print(Fernet.generate_key().decode())".'
            ) from None
    return keys


def env_database(
    name: str,
    default: str,
    *,
    pool_size: Callable[[], int],
    pool_min_size: Callable[[], int] = lambda: 1,
    prepare_threshold: Callable[[], int] = lambda: 0,
) -> dict[str, Any]:
    """Parse a database URL (``sqlite:///path`` or ``postgres://user:pass@host:port/db``); ``pool_size()``
    (read only for PostgreSQL) is the connections each process's pool holds at most, 0 for none, and
    ``pool_min_size()`` those it keeps open while idle; ``prepare_threshold()`` (PostgreSQL only)
    the executions of a statement on a connection after which PostgreSQL keeps it prepared, 0 for none."""
    url = env_str(name, default)
    assert url is not None
    scheme = url.split(":", 1)[0].lower()
    if scheme not in {"sqlite", "postgres", "postgresql", "pgsql"}:
        raise ImproperlyConfigured(
            f"{name} has scheme {scheme!r}: use sqlite:///path/to/file.sqlite3 or postgres://user:password@host:5432/name."
        )
    try:
        config = environ.Env.db_url_config(url)
    except Exception as exc:  # django-environ raises a mix of errors on malformed URLs
        raise ImproperlyConfigured(f"{name} is not a valid database URL: {exc}") from exc
    if not config.get("NAME"):
        raise ImproperlyConfigured(f"{name} names no database.")
    if config["ENGINE"] == "django.db.backends.sqlite3":
        # IMMEDIATE makes every transaction take SQLite's write lock up front, so the allocation
        # pass is serialised across processes without a separate lock; WAL lets reads go on.
        config["OPTIONS"] = {
            "transaction_mode": "IMMEDIATE",
            "timeout": 30,
            "init_command": "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;",
        }
    else:
        # A connection pool per process (psycopg's), not persistent per-thread connections:
        # under ASGI every request may run in a new thread, and per-thread connections pile up
        # until PostgreSQL refuses more ("too many clients") during a class-start burst.
        size = pool_size()
        config["CONN_MAX_AGE"] = 0
        # Django's backend with each pooled connection checked as it is handed out (portal/postgresql).
        config["ENGINE"] = "portal.postgresql"
        # Parameters bound on the server, and each statement a connection has run prepare_threshold
        # times prepared: PostgreSQL then parses and plans it once per connection, not on every call
        # (planning was two thirds of its time; docs/framework-overrides.md "Prepared statements").
        # Django's default (0 here) binds on the client, where psycopg can prepare nothing.
        config["OPTIONS"] = dict(config.get("OPTIONS", {}))
        if threshold := prepare_threshold():
            config["OPTIONS"].update(server_side_binding=True, prepare_threshold=threshold)
        if size:
            keep = pool_min_size()
            if keep > size:
                raise ImproperlyConfigured(
                    f"DATABASE_POOL_MIN_SIZE ({keep}) is more than DATABASE_POOL_SIZE ({size}): a pool keeps open at most"
                    " the connections it may hold."
                )
            # A web process keeps its whole pool open (deploy/ sets the minimum to the size): the
            # connections a class start needs are there, not made during it (docs/performance.md).
            config["OPTIONS"]["pool"] = {"min_size": keep, "max_size": size, "timeout": 30, "reset": _release_session_locks}
        else:
            config["CONN_HEALTH_CHECKS"] = True
    return config


# Set on a psycopg connection about to take a session-level advisory lock, by
# labs.services.locks.try_lock (its SESSION_LOCKS_MARK, the same name).
SESSION_LOCKS_MARK = "_portal_session_locks"


def _release_session_locks(connection) -> None:
    """A pooled connection goes back without session-level advisory locks (the controller's),
    so a lock its user failed to release cannot outlive the use and block every other process.
    Only a connection marked as it took one is asked: the others (every web request's) go back
    without a round trip and a transaction of their own."""
    if getattr(connection, SESSION_LOCKS_MARK, False):
        connection.execute("SELECT pg_advisory_unlock_all()")
        setattr(connection, SESSION_LOCKS_MARK, False)


def env_redis_url(name: str, default: str) -> str:
    url = env_str(name, default)
    assert url is not None
    if not url.startswith(("redis://", "rediss://", "unix://")):
        raise ImproperlyConfigured(f"{name}={url!r} is not a Redis URL: use redis://host:6379/0.")
    return url
