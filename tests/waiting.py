"""Waiting for a condition in async tests: the coroutine counterpart of ``tests.conftest.wait_for``.

A test that waits for something to happen polls for it with a deadline instead of sleeping a
fixed time: it goes on as soon as the condition holds, and on a slow machine it waits longer
instead of failing.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import TypeVar

T = TypeVar("T")


async def eventually(
    predicate: Callable[[], Awaitable[T]],
    *,
    timeout: float = 30,
    interval: float = 0.05,
    message: str | Callable[[], str] = "condition",
) -> T:
    """Await ``predicate()`` until it is truthy and return that value; after ``timeout`` seconds fail,
    saying what was awaited (``message``, a callable evaluated only then)."""
    deadline = time.monotonic() + timeout
    while True:
        value = await predicate()
        if value:
            return value
        if time.monotonic() >= deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {message() if callable(message) else message}")
        await asyncio.sleep(interval)
