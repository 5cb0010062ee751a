"""Injectable clocks (model: trio's ``MockClock``).

Every policy object that needs time takes a clock instead of calling ``time`` itself,
so rate limits, backoff and TTLs are tested by advancing a :class:`MockClock` rather
than by sleeping.

``now()`` is monotonic seconds (never jumps with NTP, so an adjustment cannot hand out a
free burst of requests); ``wall()`` is UTC epoch seconds, used only for timestamps that
leave the process (output rows, HTTP dates).
"""

from __future__ import annotations

import asyncio
import time
from typing import Protocol


class Clock(Protocol):
    """What policy objects need from time."""

    def now(self) -> float:
        """Monotonic seconds."""

    def wall(self) -> float:
        """UTC epoch seconds."""

    async def sleep(self, seconds: float) -> None:
        """Wait ``seconds`` of this clock's time."""


class SystemClock:
    """The real clock: ``time.monotonic`` and ``time.time``."""

    def now(self) -> float:
        return time.monotonic()

    def wall(self) -> float:
        return time.time()

    async def sleep(self, seconds: float) -> None:
        await asyncio.sleep(max(0.0, seconds))


class MockClock:
    """A clock that only moves when told to.

    ``sleep`` advances the clock by the requested amount and yields once, so code that
    waits for a politeness slot runs instantly in tests while still observing the
    passage of time (like trio's autojump clock, simplified for a single waiter at a time).
    """

    def __init__(self, start: float = 0.0, wall_start: float = 1_700_000_000.0) -> None:
        self._now = float(start)
        self._wall_offset = float(wall_start) - float(start)

    def now(self) -> float:
        return self._now

    def wall(self) -> float:
        return self._now + self._wall_offset

    def advance(self, seconds: float) -> None:
        """Move time forward by ``seconds`` (must be >= 0)."""
        if seconds < 0:
            raise ValueError("a clock cannot go backwards")
        self._now += seconds

    async def sleep(self, seconds: float) -> None:
        if seconds > 0:
            self._now += seconds
        await asyncio.sleep(0)


SYSTEM_CLOCK = SystemClock()
