"""The event loop every crawl process runs on: uvloop where it is installed.

uvloop (libuv, Cython) runs the same asyncio programs with less CPU per callback,
socket read and timer than the pure-Python selector loop; a shard is a few thousand
such events per second, so it is one of the cheapest per-page savings (measured in
benchmarks/RESULTS.md). Ray's async actors already pick uvloop when it is importable
(``RAY_USE_UVLOOP``, on by default), so the HostShard actors run on it; this module
gives the in-process runtime and the notebook handle the same loop. Where uvloop is
not available (Windows), asyncio's own loop is used: behaviour is the same.
"""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from typing import Any, TypeVar

try:  # pragma: no cover - which branch runs depends on the platform
    import uvloop as _uvloop
except ImportError:  # pragma: no cover
    _uvloop = None

__all__ = ["new_event_loop", "run", "uses_uvloop"]

T = TypeVar("T")


def uses_uvloop() -> bool:
    """True when crawl processes run on uvloop."""
    return _uvloop is not None


def new_event_loop() -> asyncio.AbstractEventLoop:
    """A new event loop: uvloop's when installed, asyncio's otherwise."""
    return _uvloop.new_event_loop() if _uvloop is not None else asyncio.new_event_loop()


def run(coro: Coroutine[Any, Any, T]) -> T:
    """``asyncio.run(coro)`` on :func:`new_event_loop` (Ctrl-C handling as asyncio.run)."""
    with asyncio.Runner(loop_factory=new_event_loop) as runner:
        return runner.run(coro)
