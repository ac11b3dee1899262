"""Checks of the Kubernetes driver's options (``LAB_DRIVER["OPTIONS"]``)."""

from __future__ import annotations

import re
from decimal import Decimal, InvalidOperation
from typing import Any

from labs.drivers.kubernetes.profiles import DeviceProfile, get_profile


def as_bool(value: object) -> bool:
    if isinstance(value, str):
        if value.strip().lower() in {"1", "true", "yes", "on"}:
            return True
        if value.strip().lower() in {"0", "false", "no", "off", ""}:
            return False
        raise ValueError(f"not a boolean: {value!r}")
    return bool(value)


HOST = re.compile(r"(?=.{1,253}$)[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?(\.[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?)*")
DNS_NAME = re.compile(r"[a-z0-9]([a-z0-9.-]{0,251}[a-z0-9])?")


def check_vllm_pod_options(pod_options: dict[str, Any]) -> None:
    fraction = pod_options.get("vllm_memory_fraction", "0.90")
    try:
        ok = isinstance(fraction, str) and 0 < Decimal(fraction) <= 1
    except InvalidOperation:
        ok = False
    if not ok:
        raise ValueError(
            f"pod_options: vllm_memory_fraction must be a decimal in (0, 1] written as a string like '0.90', got {fraction!r}"
        )
    if pod_options.get("vllm_enforce_eager") not in (None, True, False):
        raise ValueError(
            "pod_options: vllm_enforce_eager must be true, false or null (null: eager on a shared card), "
            f"got {pod_options['vllm_enforce_eager']!r}"
        )


def option_profile(where: str, name: str, settings: dict[str, Any]) -> DeviceProfile:
    """``get_profile``, its ``ValueError`` prefixed with the option that asked for the profile."""
    try:
        return get_profile(name, **settings)
    except ValueError as exc:
        raise ValueError(f"{where}: {exc}") from None


def parse_pool_profiles(option: dict[str, str | dict[str, Any]] | str | None) -> list[tuple[tuple[str, str], DeviceProfile]]:
    """Node pools by label and their profiles, first match first: ``[((label, value), profile)]``.

    ``"pool=research:vnpu,pool=lab:hami"``, ``{"pool=research": "vnpu"}``, or a pool's profile with
    its own options: ``{"pool=research": {"profile": "vnpu", "mode": "hard"}}``. A pool gets only
    its own options, never the default profile's ``profile_settings`` (they may not even apply).
    """
    if not option:
        return []
    if isinstance(option, dict):
        items = list(option.items())
    else:
        items = [tuple(item.strip().rsplit(":", 1)) for item in option.split(",") if item.strip()]
    result = []
    for item in items:
        if len(item) != 2:
            raise ValueError(f"pool_profiles: {item[0]!r} is not a label selector and a profile like pool=research:vnpu")
        selector, entry = item
        key, sep, value = str(selector).strip().partition("=")
        if not sep or not key or not value:
            raise ValueError(f"pool_profiles: {selector!r} is not a node label selector like pool=research")
        where = f"pool_profiles[{selector!r}]"
        if isinstance(entry, str):
            name, settings = entry.strip(), {}
        elif isinstance(entry, dict) and "profile" in entry:
            settings = {k: v for k, v in entry.items() if k != "profile"}
            name = entry["profile"]
        else:
            raise ValueError(f"{where} must be a profile name or {{'profile': name, ...its options}}, got {entry!r}")
        result.append(((key, value), option_profile(where, name, settings)))
    return result
