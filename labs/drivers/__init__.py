"""Cluster drivers; ``get_driver()`` builds the one named by ``settings.LAB_DRIVER``."""

from __future__ import annotations

from functools import lru_cache

from django.conf import settings
from django.core.exceptions import ImproperlyConfigured
from django.utils.module_loading import import_string

from labs.drivers.base import ClusterDriver, DriverError, DriverRefused, LaunchSpec, Observed, PollResult, PollStatus

__all__ = [
    "ClusterDriver",
    "DriverError",
    "DriverRefused",
    "LaunchSpec",
    "Observed",
    "PollResult",
    "PollStatus",
    "get_driver",
    "build_driver",
]


def build_driver(config: dict) -> ClusterDriver:
    """Build a driver from ``{"BACKEND": dotted.path, "OPTIONS": {...}}``."""
    if not isinstance(config, dict) or "BACKEND" not in config:
        raise ImproperlyConfigured('LAB_DRIVER must be {"BACKEND": "dotted.path.Driver", "OPTIONS": {...}}.')
    backend = config["BACKEND"]
    try:
        cls = import_string(backend)
    except ImportError as exc:
        raise ImproperlyConfigured(f"LAB_DRIVER backend {backend!r} cannot be imported: {exc}") from exc
    if not (isinstance(cls, type) and issubclass(cls, ClusterDriver)):
        raise ImproperlyConfigured(f"LAB_DRIVER backend {backend!r} is not a ClusterDriver.")
    options = dict(config.get("OPTIONS") or {})
    accepted = getattr(cls, "option_names", None)
    if accepted is not None:
        options = {k: v for k, v in options.items() if k in accepted}
    try:
        return cls(**options)
    except (TypeError, ValueError) as exc:
        raise ImproperlyConfigured(f"LAB_DRIVER options for {backend}: {exc}") from exc


@lru_cache(maxsize=1)
def get_driver() -> ClusterDriver:
    return build_driver(settings.LAB_DRIVER)
