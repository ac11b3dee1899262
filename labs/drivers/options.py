"""Checking a backend's options before it is built: every key known, every value of the right type.

The options a class accepts are its keyword-only constructor parameters, and their types are the
parameters' annotations, so a driver or device profile declares its options once, in its
``__init__``. Range checks (a negative delay, an unknown mode) stay in the constructors, which
name the option in their ``ValueError``.
"""

from __future__ import annotations

import difflib
import inspect
import types
import typing
from collections.abc import Iterable, Mapping
from typing import Any


def option_types(cls: type) -> dict[str, Any] | None:
    """``{name: annotation}`` of the options ``cls(...)`` takes; ``None`` when it takes ``**kwargs``."""
    parameters = inspect.signature(cls).parameters.values()
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters):
        return None
    hints = typing.get_type_hints(cls.__init__)
    return {p.name: hints.get(p.name, Any) for p in parameters if p.kind is not inspect.Parameter.VAR_POSITIONAL}


def check_options(cls: type, options: Mapping[str, object], *, owner: str, accepted: Iterable[str] | None = None) -> None:
    """``ValueError`` for the first option of ``options`` that ``cls`` does not take or of the wrong type.

    ``accepted`` narrows the keys (a driver's ``option_names``); by default every keyword of the
    constructor is accepted. The message names the key, ``owner`` and the accepted keys, and
    suggests the closest accepted key for a typo.
    """
    hints = option_types(cls)
    if hints is None:
        return
    names = sorted(accepted if accepted is not None else hints)
    for key, value in options.items():
        if key not in names:
            close = difflib.get_close_matches(str(key), names, n=1)
            hint = f"did you mean {close[0]!r}? " if close else ""
            raise ValueError(f"unknown option {key!r} for {owner}; {hint}accepted: {', '.join(names) or '(none)'}")
        expected = hints.get(key, Any)
        if not _is_instance(value, expected):
            raise ValueError(f"option {key!r} for {owner} must be {_describe(expected)}, got {value!r}")


def _is_instance(value: object, hint: Any) -> bool:
    if hint is Any:
        return True
    if hint is None or hint is type(None):
        return value is None
    origin = typing.get_origin(hint)
    if origin in (typing.Union, types.UnionType):
        return any(_is_instance(value, arg) for arg in typing.get_args(hint))
    if hint is float:  # as in Python's own typing, an int is a float, a bool is neither
        return isinstance(value, int | float) and not isinstance(value, bool)
    if hint is int:
        return isinstance(value, int) and not isinstance(value, bool)
    cls = origin or hint
    # Only the outer type is checked (dict, not dict[str, str]); the constructor checks the items.
    return isinstance(value, cls) if isinstance(cls, type) else True


def _describe(hint: Any) -> str:
    if isinstance(hint, type) and not typing.get_args(hint):
        return hint.__name__
    return str(hint).replace("typing.", "").replace("collections.abc.", "")
