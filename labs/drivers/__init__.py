"""Cluster drivers; ``get_driver()`` builds the one named by ``settings.LAB_DRIVER``."""

from __future__ import annotations

from functools import lru_cache

from django.conf import settings
from django.core.exceptions import ImproperlyConfigured
from django.utils.module_loading import import_string

from labs.drivers.base import (
    ClusterDriver,
    DriverError,
    DriverRefused,
    LaunchSpec,
    NodeBoot,
    NodePod,
    NodeStatus,
    Observed,
    PollResult,
    PollStatus,
)
from labs.drivers.options import check_options

__all__ = [
    "ClusterDriver",
    "DriverError",
    "DriverRefused",
    "LaunchSpec",
    "NodeBoot",
    "NodePod",
    "NodeStatus",
    "Observed",
    "PollResult",
    "PollStatus",
    "get_driver",
    "build_driver",
    "driver_class",
]


def driver_class(config: dict) -> type[ClusterDriver]:
    """The backend class of ``{"BACKEND": dotted.path, "OPTIONS": {...}}``, its options checked but not used.

    ``ImproperlyConfigured`` for a backend that is not a driver, an option the backend does not
    take (naming it, the backend, the closest accepted key and all of them) or a value of the
    wrong type. Values in range are the constructor's to check.
    """
    if not isinstance(config, dict) or "BACKEND" not in config:
        raise ImproperlyConfigured('LAB_DRIVER must be {"BACKEND": "dotted.path.Driver", "OPTIONS": {...}}.')
    backend = config["BACKEND"]
    try:
        cls = import_string(backend)
    except ImportError as exc:
        raise ImproperlyConfigured(f"LAB_DRIVER backend {backend!r} cannot be imported: {exc}") from exc
    if not (isinstance(cls, type) and issubclass(cls, ClusterDriver)):
        raise ImproperlyConfigured(f"LAB_DRIVER backend {backend!r} is not a ClusterDriver.")
    options = config.get("OPTIONS") or {}
    if not isinstance(options, dict):
        raise ImproperlyConfigured(f"LAB_DRIVER OPTIONS must be a dict, got {type(options).__name__}.")
    try:
        check_options(cls, options, owner=backend, accepted=getattr(cls, "option_names", None))
    except ValueError as exc:
        raise ImproperlyConfigured(f"LAB_DRIVER: {exc}") from None
    return cls


def build_driver(config: dict) -> ClusterDriver:
    """Build a driver from ``{"BACKEND": dotted.path, "OPTIONS": {...}}``; see ``driver_class`` for what is refused."""
    cls = driver_class(config)
    try:
        return cls(**(config.get("OPTIONS") or {}))
    except (TypeError, ValueError) as exc:
        raise ImproperlyConfigured(f"LAB_DRIVER options for {config['BACKEND']}: {exc}") from exc


@lru_cache(maxsize=1)
def get_driver() -> ClusterDriver:
    return build_driver(settings.LAB_DRIVER)
