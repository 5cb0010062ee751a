"""The one time seam of the crawler (model: trio's ``MockClock``).

Every object that needs time takes a :class:`Clock` instead of calling ``time`` or the
event loop's timers itself: politeness, robots and DNS TTLs, the frontier's backoff, the
shard dispatcher's waits, the link router's and micro-batchers' flush timers, the output
buffer and the checkpointer. Tests drive them with :class:`MockClock` and never sleep.

``now()`` is monotonic seconds (never jumps with NTP, so an adjustment cannot hand out a
free burst of requests); ``wall()`` is UTC epoch seconds, used only for timestamps that
leave the process (output rows, HTTP dates).
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
import time
from collections import deque
from typing import Any, Awaitable, Callable, Protocol, TypeVar

T = TypeVar("T")


class Timer(Protocol):
    """A scheduled callback (what :meth:`Clock.call_later` returns)."""

    def cancel(self) -> None: ...


class Clock(Protocol):
    """What the crawler needs from time."""

    def now(self) -> float:
        """Monotonic seconds."""

    def wall(self) -> float:
        """UTC epoch seconds."""

    async def sleep(self, seconds: float) -> None:
        """Wait ``seconds`` of this clock's time."""

    def call_later(self, delay: float, callback: Callable[[], Any]) -> Timer:
        """Run ``callback`` (in the running event loop) after ``delay`` seconds of this clock."""


class SystemClock:
    """The real clock: ``time.monotonic``, ``time.time`` and the event loop's timers."""

    # The C functions themselves, not Python methods calling them: ``now()`` is called
    # several times per URL, and a Python frame costs more than the clock read.
    now = staticmethod(time.monotonic)
    wall = staticmethod(time.time)

    async def sleep(self, seconds: float) -> None:
        await asyncio.sleep(max(0.0, seconds))

    def call_later(self, delay: float, callback: Callable[[], Any]) -> Timer:
        return asyncio.get_running_loop().call_later(max(0.0, delay), callback)


class _MockTimer:
    __slots__ = ("callback", "cancelled")

    def __init__(self, callback: Callable[[], Any]) -> None:
        self.callback = callback
        self.cancelled = False

    def cancel(self) -> None:
        self.cancelled = True


class MockClock:
    """A clock that only moves when told to.

    Sleepers and timers wait in a heap by deadline; :meth:`advance` moves time forward and
    fires, in deadline order, everything that came due. :meth:`run_until` is the test
    driver: it lets the event loop settle, and when nothing can run until a deadline, jumps
    to that deadline (trio's autojump clock), so a dispatcher that waits for politeness,
    backoff or a flush timer runs at once while observing exact times.
    """

    def __init__(self, start: float = 0.0, wall_start: float = 1_700_000_000.0) -> None:
        self._now = float(start)
        self._wall_offset = float(wall_start) - float(start)
        self._timers: list[tuple[float, int, _MockTimer]] = []
        self._seq = itertools.count()

    def now(self) -> float:
        return self._now

    def wall(self) -> float:
        return self._now + self._wall_offset

    def call_later(self, delay: float, callback: Callable[[], Any]) -> Timer:
        timer = _MockTimer(callback)
        heapq.heappush(self._timers, (self._now + max(0.0, delay), next(self._seq), timer))
        return timer

    async def sleep(self, seconds: float) -> None:
        if seconds <= 0:
            await asyncio.sleep(0)
            return
        fut = asyncio.get_running_loop().create_future()

        def wake() -> None:
            if not fut.done():
                fut.set_result(None)

        timer = self.call_later(seconds, wake)
        try:
            await fut
        finally:
            timer.cancel()

    def next_deadline(self) -> float | None:
        """The earliest pending timer's time, or None."""
        while self._timers and self._timers[0][2].cancelled:
            heapq.heappop(self._timers)
        return self._timers[0][0] if self._timers else None

    def advance(self, seconds: float) -> None:
        """Move time forward by ``seconds`` (>= 0), firing every timer that comes due."""
        if seconds < 0:
            raise ValueError("a clock cannot go backwards")
        target = self._now + seconds
        while True:
            due = self.next_deadline()
            if due is None or due > target:
                break
            _, _, timer = heapq.heappop(self._timers)
            self._now = max(self._now, due)
            timer.cancelled = True
            timer.callback()
        self._now = target

    async def settle(self, rounds: int = 50) -> None:
        """Let every task that can run without time passing do so."""
        for _ in range(rounds):
            await asyncio.sleep(0)

    async def run_until(self, done: Callable[[], bool], *, max_time: float = 3600.0) -> float:
        """Settle, and jump to the next deadline whenever nothing else can happen, until
        ``done()``. Returns the clock time then. Raises if nothing can ever happen again
        (a deadlock) or if ``max_time`` of clock time passes."""
        limit = self._now + max_time
        while True:
            await self.settle()
            if done():
                return self._now
            due = self.next_deadline()
            if due is None:
                raise RuntimeError("MockClock.run_until: nothing is scheduled and the condition is not met")
            if due > limit:
                raise TimeoutError(f"MockClock.run_until: condition not met by t={limit}")
            self.advance(max(0.0, due - self._now))


async def wait_event(clock: Clock, event: asyncio.Event, timeout: float) -> bool:
    """Wait until ``event`` is set or ``timeout`` seconds of ``clock`` pass. True if set."""
    if event.is_set():
        return True
    waiter = asyncio.ensure_future(event.wait())
    sleeper = asyncio.ensure_future(clock.sleep(timeout))
    try:
        await asyncio.wait((waiter, sleeper), return_when=asyncio.FIRST_COMPLETED)
    finally:
        for t in (waiter, sleeper):
            t.cancel()
        await asyncio.gather(waiter, sleeper, return_exceptions=True)
    return event.is_set()


async def within(clock: Clock, aw: Awaitable[T], seconds: float) -> T:
    """Await ``aw``, raising :class:`asyncio.TimeoutError` after ``seconds`` of ``clock``."""
    task = asyncio.ensure_future(aw)
    sleeper = asyncio.ensure_future(clock.sleep(seconds))
    try:
        await asyncio.wait((task, sleeper), return_when=asyncio.FIRST_COMPLETED)
    except asyncio.CancelledError:
        task.cancel()
        sleeper.cancel()
        raise
    sleeper.cancel()
    if task.done():
        return task.result()
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)
    raise asyncio.TimeoutError(f"no result within {seconds}s")


class Timeouts:
    """Deadlines of one fixed length for many tasks, on a single timer of ``clock``.

    ``with timeouts.scope():`` raises :class:`TimeoutError` if the block is still running
    ``seconds`` of ``clock`` after it was entered (trio's ``fail_after``, Python's
    ``asyncio.timeout``, on the injected clock): the block's task is cancelled at the
    deadline and that cancellation becomes ``TimeoutError`` as it leaves the block. A
    cancellation from elsewhere (shutdown) still propagates as ``CancelledError``.

    Why one timer: every scope has the same length and the clock is monotonic, so
    deadlines come due in the order the scopes were entered. A FIFO queue with one timer
    armed for its head serves every open scope; entering and leaving a scope costs a few
    attribute writes, not a ``call_later`` plus ``cancel`` (which cost as much as the rest
    of a fetch's bookkeeping). A finished scope is dropped when it reaches the head and
    releases its task at once, so the queue holds no results.
    """

    __slots__ = ("clock", "seconds", "_queue", "_timer", "_loop")

    def __init__(self, clock: Clock, seconds: float) -> None:
        self.clock = clock
        self.seconds = float(seconds)
        self._queue: deque[_Scope] = deque()
        self._timer: Timer | None = None
        self._loop: asyncio.AbstractEventLoop | None = None

    def _current_task(self) -> asyncio.Task[Any]:
        # asyncio.current_task() without a loop calls get_running_loop(), which on
        # CPython 3.11 makes a getpid() system call each time; the loop of the last
        # scope is almost always the loop of this one.
        loop = self._loop
        task = asyncio.current_task(loop) if loop is not None else None
        if task is None:
            running = asyncio.get_running_loop()
            if running is not loop:
                # A new event loop (a second asyncio.run): the old loop's timer will
                # never fire, and its scopes can never close.
                self._loop = running
                self._queue.clear()
                self._timer = None
            task = asyncio.current_task(running)
            if task is None:
                raise RuntimeError("a Timeouts scope must be entered inside a task")
        return task

    def scope(self) -> _Scope:
        """A context manager: the deadline starts when it is entered."""
        return _Scope(self)

    def _arm(self) -> None:
        self._timer = self.clock.call_later(self._queue[0].deadline - self.clock.now(), self._fire)

    def _fire(self) -> None:
        self._timer = None
        now = self.clock.now()
        queue = self._queue
        while queue:
            head = queue[0]
            if head.state == _OPEN and head.deadline > now:
                break
            queue.popleft()
            if head.state == _OPEN:
                head.expire()
        if queue:
            self._arm()


_OPEN, _EXPIRING, _DONE = 1, 2, 3


class _Scope:
    """One deadline of :class:`Timeouts` (a synchronous context manager)."""

    __slots__ = ("_owner", "_task", "_cancelling", "deadline", "state", "expired")

    def __init__(self, owner: Timeouts) -> None:
        self._owner = owner
        self.state = 0
        self.expired = False  # the deadline cancelled the block

    def __enter__(self) -> _Scope:
        owner = self._owner
        task = owner._current_task()
        self._task: asyncio.Task[Any] | None = task
        self._cancelling = task.cancelling()
        self.deadline = owner.clock.now() + owner.seconds
        self.state = _OPEN
        owner._queue.append(self)
        if owner._timer is None:
            owner._arm()
        return self

    def expire(self) -> None:
        """Called by the timer: cancel the task inside the block."""
        self.state = _EXPIRING
        self.expired = True
        assert self._task is not None
        self._task.cancel()

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: Any) -> None:
        task, self._task = self._task, None
        expiring = self.state == _EXPIRING
        self.state = _DONE
        queue = self._owner._queue
        while queue and queue[0].state == _DONE:  # finished scopes leave from the head
            queue.popleft()
        if expiring and task is not None:
            # As asyncio.timeout does: only our own cancellation becomes a TimeoutError.
            if task.uncancel() <= self._cancelling and exc_type is asyncio.CancelledError:
                raise TimeoutError(f"deadline of {self._owner.seconds}s passed") from exc
        return None


SYSTEM_CLOCK = SystemClock()
