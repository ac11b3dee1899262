"""Why a session waits, failed or changed: a code with parameters, put into words when shown.

The engine and the services return and store a ``Reason`` (``code`` + ``params``), never a
sentence. A page renders it in the reader's language at display time: ``reason.render(gettext)``
looks the code's message up in ``MESSAGES`` and translates it before filling in the parameters;
``str(reason)`` is the English text (logs, the admin, tests).

Messages are marked with ``gettext_noop`` so that Django's ``makemessages`` extracts them into
the catalogues, although this module imports nothing from Django. Parameters are ints, strings
or another ``Reason`` (rendered in the same language), so a reason can carry its cause.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Union


def gettext_noop(message: str) -> str:
    """Marks ``message`` for translation; the translation happens when a reason is rendered."""
    return message


MESSAGES: dict[str, str] = {
    # -- the session's own life (labs/services) ---------------------------------------------------
    "session.queued": gettext_noop("waiting for the allocation pass"),
    "session.requesting": gettext_noop("requesting an NPU instance"),
    "session.starting": gettext_noop("starting"),
    "session.create_retry": gettext_noop("the cluster did not create the instance (try %(attempt)s of %(attempts)s): %(error)s"),
    "session.create_failed": gettext_noop("could not start: %(error)s"),
    "session.spawn_timeout": gettext_noop("did not start within %(seconds)s s"),
    "session.vanished": gettext_noop("the lab's instance disappeared from the cluster"),
    "session.vanished_before_start": gettext_noop("the instance disappeared before it started"),
    "session.vanished_from_node": gettext_noop("its NPU instance vanished from node %(node)s"),
    "session.cluster_unreachable": gettext_noop("waiting for the cluster: %(error)s"),
    "session.driver": gettext_noop("%(message)s"),
    "session.stopped_by": gettext_noop("stopped by %(who)s"),
    "session.lifetime": gettext_noop("reached the %(minutes)s-minute limit"),
    "session.portal_shutdown": gettext_noop("the portal was shut down"),
    "session.stop_retry": gettext_noop("stopping: the cluster has not removed the instance yet (%(error)s)"),
    # -- admission and placement (labs/domain) ------------------------------------------------------
}

ParamValue = Union[int, str, "Reason"]


@dataclass(frozen=True, slots=True)
class Reason:
    """A code from ``MESSAGES`` and its parameters (sorted ``(name, value)`` pairs)."""

    code: str
    params: tuple[tuple[str, ParamValue], ...] = ()

    def __post_init__(self) -> None:
        if self.code not in MESSAGES:
            raise ValueError(f"unknown reason code {self.code!r}")
        for name, value in self.params:
            if isinstance(value, bool) or not isinstance(value, int | str | Reason):
                raise TypeError(f"reason {self.code}: parameter {name} must be an int, a str or a Reason, not {value!r}")

    @classmethod
    def of(cls, code: str, **params: ParamValue) -> Reason:
        return cls(code, tuple(sorted(params.items())))

    @property
    def kwargs(self) -> dict[str, ParamValue]:
        return dict(self.params)

    def render(self, translate: Callable[[str], str] = gettext_noop) -> str:
        """The reason in words: ``translate`` is ``gettext`` for the reader's language."""
        values = {name: value.render(translate) if isinstance(value, Reason) else value for name, value in self.params}
        return translate(MESSAGES[self.code]) % values

    def __str__(self) -> str:
        return self.render()

    def to_json(self) -> dict[str, Any]:
        return {
            "code": self.code,
            "params": {name: value.to_json() if isinstance(value, Reason) else value for name, value in self.params},
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any] | None) -> Reason | None:
        """The reason stored by ``to_json``; ``None`` for an empty value. Unknown codes raise ``ValueError``."""
        if not data:
            return None
        params = {
            name: cls.from_json(value) if isinstance(value, Mapping) else value
            for name, value in (data.get("params") or {}).items()
        }
        return cls.of(data["code"], **params)
