"""Each place the portal replaces or copies framework internals is pinned to the code it was written against.

``docs/framework-overrides.md`` has one section per override: what it replaces, why, what it
gained and what to check when upgrading. Here each override records the versions of the
libraries it was written against and a hash of the source of every upstream function it copies,
subclasses or relies on. An upgrade of one of them fails here, naming what to re-check, and so
does a change of that upstream code within a version (a patched wheel, a vendored fork). Once
the override has been re-checked against the new code (and its tests run), record the new
version and hashes below: the failure message prints them.
"""

from __future__ import annotations

import hashlib
import importlib
import inspect
import re
from dataclasses import dataclass, field
from functools import cached_property
from importlib.metadata import version

import pytest

from tests.conftest import ROOT

DOC = "docs/framework-overrides.md"


@dataclass(frozen=True)
class Pin:
    """One override: where it is, its section of the doc, what to re-check, and what it was written against."""

    override: str
    section: str
    recheck: str
    versions: dict[str, str]
    # "module:Qualified.name" of upstream code -> the first 16 hex digits of the sha256 of its source.
    sources: dict[str, str] = field(default_factory=dict)


PINS = [
    Pin(
        override="portal.handlers.SyncChainASGIHandler (and portal.collector in portal.asgi and the workers)",
        section="The ASGI handler",
        recheck=(
            "diff Django's ASGIHandler.handle against SyncChainASGIHandler.handle and port the changes; check that "
            "ASGIHandler.__init__ still only loads the chain async and that asgiref's ThreadSensitiveContext still takes "
            "executor=; run tests/test_asgi_handler.py"
        ),
        versions={"Django": "5.2.19", "asgiref": "3.13.0"},
        sources={
            "django.core.handlers.asgi:ASGIHandler.__init__": "41379d4f4b69f900",
            "django.core.handlers.asgi:ASGIHandler.__call__": "f756809e9c9308dc",
            "django.core.handlers.asgi:ASGIHandler.handle": "98faeb5bef800331",
            "django.core.handlers.asgi:ASGIHandler.send_response": "77eda2b08689b44e",
            "asgiref.sync:ThreadSensitiveContext": "da8ec00f861b8bdf",
        },
    ),
    Pin(
        override="portal.middleware.SyncMiddlewareChain",
        section="The sync middleware chain",
        recheck=(
            "check in BaseHandler.load_middleware that a middleware with async_capable = False still makes the ones "
            "above it run sync; run tests/test_asgi_handler.py and make bench-requests (the floor)"
        ),
        versions={"Django": "5.2.19"},
        sources={"django.core.handlers.base:BaseHandler.load_middleware": "a1fb7ee5f8586195"},
    ),
    Pin(
        override="portal.middleware.LostConnectionRetry",
        section="The retry of a request whose connection was cut",
        recheck=(
            "check that BaseHandler._get_response still calls process_exception of the middleware with the view's "
            "exception and uses its response; run tests/views/test_cut_connection_retry.py"
        ),
        versions={"Django": "5.2.19"},
        sources={
            "django.core.handlers.base:BaseHandler._get_response": "ec767cf1bf0296fa",
            "django.core.handlers.base:BaseHandler.process_exception_by_middleware": "44eeb9df97bfd373",
        },
    ),
    Pin(
        override="portal.channel_layer.ResyncingPubSubChannelLayer",
        section="The channel layer",
        recheck=(
            "check the private attributes it uses (RedisPubSubChannelLayer._layers and _get_layer, the loop layer's "
            "_shards, channels and channel_layer, the shard's _redis, _pubsub, _lock and _ensure_redis), that the "
            "shard's publish still only takes the lock and PUBLISHes (the override batches them), and that redis-py's "
            "PubSub.on_connect is still called on every reconnect; run tests/consumers/test_resync.py, "
            "tests/consumers/test_publish_round_trips.py and tests/browser/test_resync.py"
        ),
        versions={"channels-redis": "4.3.0", "redis": "7.4.0"},
        sources={
            "channels_redis.pubsub:RedisPubSubChannelLayer._get_layer": "1862b87a25ac72b2",
            "channels_redis.pubsub:RedisSingleShardConnection.__init__": "9c8f408acb4c2d7b",
            "channels_redis.pubsub:RedisSingleShardConnection._ensure_redis": "ba228d3cee7116dc",
            "channels_redis.pubsub:RedisSingleShardConnection.publish": "5a18093dbcb440f5",
            "channels_redis.pubsub:RedisPubSubLoopLayer.__init__": "fd9d37e275298a58",
            "redis.asyncio.client:PubSub.on_connect": "1f0ed7db5be28e52",
        },
    ),
    Pin(
        override="labs.consumers.WithoutDatabase",
        section="The consumers' dispatch without the database",
        recheck=(
            "compare Channels' AsyncConsumer.dispatch with WithoutDatabase.dispatch: it may only skip "
            "close_old_connections; run tests/consumers"
        ),
        versions={"channels": "4.3.2"},
        sources={
            "channels.consumer:AsyncConsumer.dispatch": "39f34e7d4fb0f655",
            "channels.consumer:get_handler_name": "c88c7b7d8763fb61",
        },
    ),
    Pin(
        override="labs.worker.PromptConsumer (CELERY_WORKER_CONSUMER)",
        section="The Celery worker's consumer",
        recheck=(
            "check that Celery's Consumer.ensure_connected still calls conn.ensure_connection and Consumer.connect "
            "still counts restart_count from 0, and kombu's Connection.ensure_connection's interval arguments; "
            "run tests/tasks/test_broker_restart.py"
        ),
        versions={"celery": "5.7.0", "kombu": "5.7.0"},
        sources={
            "celery.worker.consumer.consumer:Consumer.ensure_connected": "3f79cf3bb6d6da8c",
            "celery.worker.consumer.consumer:Consumer.connect": "7ca359b806be9347",
            "celery.worker.consumer.consumer:Consumer.start": "53bd1abe3456722d",
            "kombu.connection:Connection.ensure_connection": "6eadd030fa740ae6",
        },
    ),
    Pin(
        override="CELERY_DB_REUSE_MAX and portal.celery.connections_back_to_the_pool",
        section="The worker's database connections kept between tasks",
        recheck=(
            "check that DjangoWorkerFixup still reads CELERY_DB_REUSE_MAX, that close_database then closes (and a "
            "prefork process's pool with it) only once in that many tasks, and that task_postrun still runs for every "
            "task; run tests/tasks/test_worker_database_connections.py and tests/tasks/test_dead_database_connections.py"
        ),
        versions={"celery": "5.7.0", "Django": "5.2.19"},
        sources={
            "celery.fixups.django:DjangoWorkerFixup.__init__": "f7662483be764827",
            "celery.fixups.django:DjangoWorkerFixup.close_database": "886a5f0b2c37f5ba",
            "celery.fixups.django:DjangoWorkerFixup._close_database": "38c5a1bca1e28805",
            "celery.fixups.django:DjangoWorkerFixup.on_task_postrun": "bf5528dff9b582d2",
        },
    ),
    Pin(
        override="server-side binding and psycopg's prepare_threshold (DATABASE_PREPARE_THRESHOLD, portal.env.env_database)",
        section="Prepared statements",
        recheck=(
            "check that the PostgreSQL backend still passes OPTIONS' prepare_threshold to psycopg and gives a connection "
            "ServerBindingCursor for server_side_binding, that psycopg still prepares a statement run more than "
            "prepare_threshold times and drops a connection's prepared statements on ROLLBACK, DROP and ALTER; run "
            "tests/test_prepared_statements.py and tests/selectors/test_usage_spans_prepared.py"
        ),
        versions={"Django": "5.2.19", "psycopg": "3.3.9"},
        sources={
            "django.db.backends.postgresql.base:DatabaseWrapper.get_connection_params": "c3b08b880d604ccb",
            "psycopg._preparing:PrepareManager.get": "92bd487924222918",
            "psycopg._preparing:PrepareManager._should_discard": "a7e528828b827d8e",
            "psycopg._connection_base:BaseConnection._rollback_gen": "64b119095ea9b755",
        },
    ),
    Pin(
        override="labs.exposition (the /metrics text)",
        section="The Prometheus exposition",
        recheck=(
            "check what generate_latest writes now (format, escaping, sorting of labels, the number format of "
            "floatToGoString); run tests/metrics/test_exposition.py, which compares the bytes"
        ),
        versions={"prometheus-client": "0.26.0"},
        sources={
            "prometheus_client.exposition:generate_latest": "f1ddd8f74f012069",
            "prometheus_client.utils:floatToGoString": "ee5e2185d99da842",
        },
    ),
    Pin(
        override="portal.postgresql.base.DatabaseWrapper",
        section="The PostgreSQL backend",
        recheck=(
            "check Django's DatabaseWrapper.get_new_connection and pool (how a pooled connection is handed out and "
            "given back) and psycopg_pool's ConnectionPool.check and check_connection; "
            "run tests/{views,api,tasks}/test_dead_database_connections.py"
        ),
        versions={"Django": "5.2.19", "psycopg-pool": "3.3.3"},
        sources={
            "django.db.backends.postgresql.base:DatabaseWrapper.get_new_connection": "acc4e253c2e311a4",
            "django.db.backends.postgresql.base:DatabaseWrapper.pool": "e5c2654fdf2d5090",
            "psycopg_pool.pool:ConnectionPool.check": "f2cfe00edfe3a102",
            "psycopg_pool.pool:ConnectionPool.check_connection": "5a7c233f4096105a",
        },
    ),
    Pin(
        override="portal.postgresql.base.UtcTimestamptzLoader (with_compiled_timestamps)",
        section="The timestamps' loader",
        recheck=(
            "check that Django's BaseTzLoader still only replaces the zone of psycopg's TimestamptzLoader result, that "
            "get_adapters_template still registers it through register_tzloader and that create_cursor still compares "
            "the loader's timezone; run tests/test_timestamp_loader.py"
        ),
        versions={"Django": "5.2.19", "psycopg": "3.3.9", "psycopg-binary": "3.3.9"},
        sources={
            "django.db.backends.postgresql.psycopg_any:BaseTzLoader": "54da5c943c5192bc",
            "django.db.backends.postgresql.psycopg_any:register_tzloader": "b98320a954840389",
            "django.db.backends.postgresql.psycopg_any:get_adapters_template": "5dffb67d36e05cee",
            "django.db.backends.postgresql.base:DatabaseWrapper.create_cursor": "5309d92ffca3e871",
            "django.db.backends.postgresql.base:DatabaseWrapper.get_connection_params": "c3b08b880d604ccb",
            "psycopg.types.datetime:TimestamptzLoader": "b29652fbe498ffc0",
        },
    ),
    Pin(
        override="portal.sessions.SessionStore (SESSION_ENGINE)",
        section="The session store",
        recheck=(
            "diff Django's db SessionStore._get_session_from_db against portal.sessions (the expiry test, forgetting "
            "an unknown key); run tests/test_session_store.py"
        ),
        versions={"Django": "5.2.19"},
        sources={"django.contrib.sessions.backends.db:SessionStore._get_session_from_db": "775c8d22becd60bd"},
    ),
    Pin(
        override="portal.auth.AuthenticationMiddleware and get_user (the signed-in user's read)",
        section="The user's read",
        recheck=(
            "diff Django's django.contrib.auth.get_user against portal.auth.get_user (the session's keys, the hash "
            "check, the fallback keys, the flush) and port the changes; check that ModelBackend.get_user still reads "
            "the user by pk and asks user_can_authenticate, and that AuthenticationMiddleware.process_request still "
            "only sets request.user and request.auser; run tests/views/test_user_read.py"
        ),
        versions={"Django": "5.2.19"},
        sources={
            "django.contrib.auth:get_user": "08a852f701f765bc",
            "django.contrib.auth.backends:ModelBackend.get_user": "ab2f0fe767938110",
            "django.contrib.auth.middleware:AuthenticationMiddleware.process_request": "6dd39b90ad6373e2",
        },
    ),
    Pin(
        override=(
            "the written-out reads (labs.selectors.rows, session_read, courses, sessions, usage, console; webhooks.hooks; "
            "api.authentication.token_read)"
        ),
        section="The written-out reads",
        recheck=(
            "check Model.from_db and what Model.__init__ leaves on an instance (session_read._made makes the same "
            "without it: _state, the loaded fields in __dict__), the related-object cache "
            "(FieldCacheMixin.set_cached_value, _prefetched_objects_cache "
            "as prefetch_one_level sets it), the backends' value converters and, for rows.one, whether an ORDER BY still "
            "costs what it did (SQLCompiler.get_order_by); run tests/selectors and tests/api/test_token_read.py"
        ),
        versions={"Django": "5.2.19"},
        sources={
            "django.db.models.base:Model.from_db": "eba347895d11fa79",
            "django.db.models.base:Model.__init__": "2950c3a90d8343b5",
            "django.db.models.base:ModelState": "1c36c15dcbfdd1a9",
            "django.db.models.fields.mixins:FieldCacheMixin.set_cached_value": "9f818c1ef6b0abe9",
            "django.db.models.query:prefetch_one_level": "80f1773ec0be528f",
            "django.db.backends.base.operations:BaseDatabaseOperations.get_db_converters": "7aa03e720078cf97",
            "django.db.backends.sqlite3.base:DatabaseOperations.get_db_converters": "bd348b459bcf9ca2",
            "django.db.models.fields:Field.get_db_converters": "500e7255cd2940d1",
            "django.db.models.fields:Field.get_col": "c2b8e9059b77826e",
            "django.db.models.sql.compiler:SQLCompiler.get_order_by": "5952ea8ba8f077cd",
        },
    ),
    Pin(
        override="labs.services.rows.rows_update",
        section="The batched update",
        recheck=(
            "check whether QuerySet.bulk_update still builds a CASE WHEN per row and field (if it no longer does, "
            "rows_update may go); run tests/services/test_batched_writes.py"
        ),
        versions={"Django": "5.2.19"},
        sources={"django.db.models.query:QuerySet.bulk_update": "2369a42464b0fd03"},
    ),
    Pin(
        override="labs.models.lookups (field__one_of)",
        section="The one_of lookup",
        recheck=(
            "check that In.process_rhs still drops None and raises EmptyResultSet on an empty list, that get_rhs_op "
            "still writes the operator around the placeholders, and that a relation's lookups are still its own "
            "(RelatedIn on ForeignObject); run tests/test_one_of_lookup.py on PostgreSQL and SQLite"
        ),
        versions={"Django": "5.2.19"},
        sources={
            "django.db.models.lookups:In": "27e2479997e290f1",
            "django.db.models.fields.related_lookups:RelatedIn": "daca64c66268ae16",
        },
    ),
    Pin(
        override="labs.services.rows.row_insert",
        section="The launch's insert",
        recheck=(
            "check that SQLInsertCompiler still writes a plain %s per value and sends get_db_prep_save(pre_save(obj, "
            "add=True)) of each field, and whether Model.save now reuses its INSERT (then row_insert may go); run "
            "tests/services/test_row_insert.py"
        ),
        versions={"Django": "5.2.19"},
        sources={
            "django.db.models.sql.compiler:SQLInsertCompiler.field_as_sql": "505120b18cf35c28",
            "django.db.models.sql.compiler:SQLInsertCompiler.prepare_value": "2e49a07e78afaae1",
            "django.db.models.sql.compiler:SQLInsertCompiler.pre_save_val": "f9efbaa8ba5cb0c8",
            "django.db.models.base:Model._save_table": "2a39268c21f5b8e6",
            "django.db.models.base:Model._prepare_related_fields_for_save": "d6d6a4ed2512cbb5",
        },
    ),
    Pin(
        override="portal.csp_header.CSPMiddleware",
        section="The CSP header",
        recheck=(
            "diff CSPMiddleware.process_response with the override's: the response attributes that change the policy, "
            "the nonce, the debug pages, the exempt and excluded-prefix conditions; check that build_policy still "
            "depends on nothing but the settings when given no parts; run tests/test_csp_header.py"
        ),
        versions={"django-csp": "4.0"},
        sources={
            "csp.middleware:CSPMiddleware.process_response": "fa72a0cd0d633c49",
            "csp.middleware:CSPMiddleware.get_policy_parts": "835e17fa636ab681",
            "csp.middleware:CSPMiddleware.process_request": "bf5a743128a430b8",
            "csp.utils:build_policy": "fcfef1d3a5051582",
        },
    ),
]


def upstream(dotted: str) -> object:
    """The function or class ``module:Qualified.name`` names (a property's getter, a cached_property's function)."""
    module, _, qualname = dotted.partition(":")
    found: object = importlib.import_module(module)
    for name in qualname.split("."):
        found = vars(found)[name] if isinstance(found, type) and name in vars(found) else getattr(found, name)
    if isinstance(found, property):
        return found.fget
    if isinstance(found, cached_property):
        return found.func
    return found


def source_hash(dotted: str) -> str:
    return hashlib.sha256(inspect.getsource(upstream(dotted)).encode()).hexdigest()[:16]


def where(pin: Pin) -> str:
    return f'{pin.override}: re-check it ({pin.recheck}); see {DOC}, "{pin.section}"'


@pytest.mark.parametrize("pin", PINS, ids=lambda pin: pin.section)
def test_each_override_runs_on_the_versions_it_was_written_against(pin: Pin):
    installed = {name: version(name) for name in pin.versions}
    assert installed == pin.versions, (
        f"{where(pin)}. It was written against {pin.versions}; installed: {installed}. "
        "Once it is checked, record the installed versions in tests/test_framework_pins.py and in the doc."
    )


@pytest.mark.parametrize("pin", PINS, ids=lambda pin: pin.section)
def test_the_upstream_code_each_override_copies_or_relies_on_is_unchanged(pin: Pin):
    found = {dotted: source_hash(dotted) for dotted in pin.sources}
    changed = {dotted: digest for dotted, digest in found.items() if digest != pin.sources[dotted]}
    assert not changed, (
        f"{where(pin)}. The source of {sorted(changed)} is not the one it was written against. "
        f"Once it is checked, record the new hashes in tests/test_framework_pins.py: {changed}"
    )


def test_each_pinned_override_has_its_section_in_the_doc_with_the_versions():
    text = (ROOT / DOC).read_text(encoding="utf-8")
    headings = set(re.findall(r"^## (.+)$", text, flags=re.MULTILINE))
    missing = [pin.section for pin in PINS if pin.section not in headings]
    assert not missing, f"{DOC} has no section {missing}"
    for pin in PINS:
        body = text.split(f"## {pin.section}\n", 1)[1].split("\n## ", 1)[0]
        unnamed = [f"{name} {v}" for name, v in pin.versions.items() if f"{name} {v}" not in body]
        assert not unnamed, f'{DOC}, "{pin.section}" does not say it was written against {unnamed}'
