"""Checks of values entering the domain: each names the record and field and what is allowed.

Used by the ``__post_init__`` of the domain's frozen records, so every entry point (a snapshot, a
request, a configuration, a quota) is checked once, where the value is made, and the engine
trusts it afterwards. Wrong types raise ``TypeError``, wrong values ``ValueError``.
"""

from __future__ import annotations

from enum import Enum
from typing import TypeVar

E = TypeVar("E", bound=Enum)


def check_int(owner: str, name: str, value: object, minimum: int | None = None, maximum: int | None = None) -> None:
    """``value`` is an int (not a bool) in ``minimum..maximum`` (either bound may be open)."""
    if type(value) is not int:
        # bool is an int subclass but never an amount; other subclasses (IntEnum) are not amounts either
        raise TypeError(f"{owner}.{name} must be an int, not {value!r} ({type(value).__name__})")
    if minimum is not None and value < minimum:
        if maximum is not None:
            raise ValueError(f"{owner}.{name} must be between {minimum} and {maximum}, not {value}")
        raise ValueError(f"{owner}.{name} must be >= {minimum}, not {value}")
    if maximum is not None and value > maximum:
        if minimum is not None:
            raise ValueError(f"{owner}.{name} must be between {minimum} and {maximum}, not {value}")
        raise ValueError(f"{owner}.{name} must be <= {maximum}, not {value}")


def check_optional_int(owner: str, name: str, value: object) -> None:
    if value is not None:
        check_int(owner, name, value)


def check_number(owner: str, name: str, value: object, minimum: float = 0) -> None:
    """``value`` is an int or a float (seconds, a time), not a bool, at least ``minimum``."""
    if type(value) not in (int, float):
        raise TypeError(f"{owner}.{name} must be a number, not {value!r} ({type(value).__name__})")
    if value < minimum:  # type: ignore[operator]  # int or float, checked above
        raise ValueError(f"{owner}.{name} must be >= {minimum}, not {value}")


def check_str(owner: str, name: str, value: object, *, empty: bool = True) -> None:
    if not isinstance(value, str) or (not empty and not value):
        raise (TypeError if not isinstance(value, str) else ValueError)(
            f"{owner}.{name} must be a {'' if empty else 'non-empty '}str, not {value!r}"
        )


def check_bool(owner: str, name: str, value: object) -> None:
    if type(value) is not bool:
        raise TypeError(f"{owner}.{name} must be True or False, not {value!r}")


def as_enum(owner: str, name: str, value: object, enum: type[E]) -> E:
    """``value`` as a member of ``enum``; its string value is accepted too (settings, the database)."""
    if isinstance(value, enum):
        return value
    try:
        return enum(value)
    except ValueError:
        allowed = ", ".join(str(member.value) for member in enum)
        raise ValueError(f"{owner}.{name} must be one of {allowed}, not {value!r}") from None


def check_type(owner: str, name: str, value: object, kind: type, label: str | None = None) -> None:
    if not isinstance(value, kind):
        raise TypeError(f"{owner}.{name} must be a {label or kind.__name__}, not {value!r} ({type(value).__name__})")
