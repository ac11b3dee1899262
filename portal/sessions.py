"""Django's database sessions, read with one written-out statement.

Every request of a signed-in user reads its session row first. Django's ``db`` backend composes
``Session.objects.get(session_key=..., expire_date__gt=now)`` for it, and building it and turning
it into a model cost several times running it (docs/framework-overrides.md, "The session store").
This store sends the same ``SELECT`` written out (names from the model) and is otherwise Django's
own: the same table, the same cookie, the same saving, expiry and ``clearsessions``; sessions
made before it stay valid.
"""

from __future__ import annotations

from functools import cache

from django.contrib.sessions.backends import db
from django.db import connections, router
from django.utils import timezone

from labs.selectors.rows import column, table


class SessionStore(db.SessionStore):
    def _get_session_from_db(self):
        model = self.model
        alias = router.db_for_read(model)
        connection = connections[alias]
        expire = model._meta.get_field("expire_date").get_db_prep_value(timezone.now(), connection)
        with connection.cursor() as cursor:
            cursor.execute(_load_sql(model, alias), [self.session_key, expire])
            row = cursor.fetchone()
        if row is None:
            self._session_key = None  # as Django's: a key that is not (or no longer) there is forgotten
            return None
        return model(session_key=self.session_key, session_data=row[0])


@cache
def _load_sql(model, alias: str) -> str:
    """The session's data if its key is there and it has not expired. Parameters: key, now."""
    col = lambda name: column(model, name, using=alias)  # noqa: E731
    return (
        f"SELECT {col('session_data')} FROM {table(model, using=alias)}"
        f" WHERE {col('session_key')} = %s AND {col('expire_date')} > %s"
    )
