"""An asyncio event loop that runs on a :class:`~crawler.clock.MockClock`: simulated time.

The fault simulator runs a whole crawl -- driver, shards, services, object store and web
-- in one process. For a run to be a function of its seed alone, nothing may depend on
real time or on threads:

* the loop's own clock (``loop.time()``, which ``asyncio.sleep``, ``wait_for`` and
  ``call_later`` use) *is* the MockClock, so code that uses asyncio's timers directly
  runs on simulated time too;
* when nothing is ready to run, the loop does not wait: its selector moves the MockClock
  to the next deadline -- its own timers' or the MockClock's, whichever comes first --
  and fires what came due (trio's autojump clock, FoundationDB's simulated time);
* the default executor refuses work: a thread would finish at a moment no seed decides,
  so every blocking call in the simulation goes through an injected ``run_blocking``
  (crawler.testing.sim.nodes.Process.run_blocking) and a call that forgot one fails
  loudly instead of making runs differ.

Ready callbacks run in FIFO order, exactly as in asyncio, so two runs of one seed
schedule every task in the same order.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import gc
import math
import selectors
import sys
from typing import Any, Awaitable, Callable, TypeVar

from crawler.clock import MockClock

T = TypeVar("T")


class SimDeadlock(RuntimeError):
    """Nothing can ever run again: no ready callback, no timer, no I/O."""


class SimTimeLimit(RuntimeError):
    """The simulation passed its limit of simulated seconds."""


class SimLivelock(RuntimeError):
    """Simulated time stopped passing: some task wakes itself forever without waiting
    (on a real loop, a core burnt at 100% doing nothing)."""


#: Loop iterations at one simulated instant before the simulation calls it a livelock.
SPIN_LIMIT = 200_000


class _JumpingSelector(selectors.BaseSelector):
    """A selector that never blocks: instead of waiting it advances the MockClock."""

    def __init__(self, clock: MockClock, limit: float) -> None:
        self._real = selectors.DefaultSelector()  # the loop's self-pipe lives here
        self._clock = clock
        self._limit = limit
        self._instant = clock.now()
        self._spins = 0
        self._spin_limit: float = SPIN_LIMIT

    def register(self, fileobj: Any, events: int, data: Any = None) -> selectors.SelectorKey:
        return self._real.register(fileobj, events, data)

    def unregister(self, fileobj: Any) -> selectors.SelectorKey:
        return self._real.unregister(fileobj)

    def modify(self, fileobj: Any, events: int, data: Any = None) -> selectors.SelectorKey:
        return self._real.modify(fileobj, events, data)

    def get_map(self) -> Any:
        return self._real.get_map()

    def close(self) -> None:
        self._real.close()

    def select(self, timeout: float | None = None) -> list[tuple[selectors.SelectorKey, int]]:
        clock = self._clock
        if clock.now() == self._instant:
            self._spins += 1
            if self._spins > self._spin_limit:
                raise SimLivelock(f"no simulated time passed in {SPIN_LIMIT} loop iterations at t={clock.now():.3f}")
        else:
            self._instant, self._spins = clock.now(), 0
        events = self._real.select(0)
        if events or timeout == 0:
            return events
        due = clock.next_deadline()
        jump = math.inf if timeout is None else timeout
        if due is not None:
            jump = min(jump, max(0.0, due - clock.now()))
        if jump == math.inf:
            raise SimDeadlock(f"nothing can run at t={clock.now():.3f}: every task waits for something that never comes")
        if clock.now() + jump > self._limit:
            raise SimTimeLimit(f"simulated time passed {self._limit:.0f}s")
        clock.advance(jump)
        return []


class _NoThreads(concurrent.futures.ThreadPoolExecutor):
    """The default executor of a simulation: any use is a missing ``run_blocking`` seam."""

    def submit(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> concurrent.futures.Future[Any]:
        raise RuntimeError(f"a thread was asked for in the simulation ({getattr(fn, '__qualname__', fn)!r}): "
                           "pass the process's run_blocking instead of asyncio.to_thread")


class SimLoop(asyncio.SelectorEventLoop):
    """The simulation's event loop (see the module docstring)."""

    def __init__(self, clock: MockClock, *, limit_s: float = 86_400.0) -> None:
        super().__init__(_JumpingSelector(clock, clock.now() + limit_s))
        self.mock_clock = clock
        self.set_default_executor(_NoThreads())
        # A dead process's tasks wait forever on futures nobody else holds: without a
        # strong reference the garbage collector would close them mid-simulation and run
        # their ``finally`` blocks (a killed process releasing its lease). Held until done.
        self._unfinished: set[asyncio.Task[Any]] = set()
        self.set_task_factory(self._task)

    def _task(self, loop: asyncio.AbstractEventLoop, coro: Any, **kwargs: Any) -> asyncio.Task[Any]:
        task = asyncio.Task(coro, loop=loop, **kwargs)
        self._unfinished.add(task)
        task.add_done_callback(self._unfinished.discard)
        return task

    def time(self) -> float:
        return self.mock_clock.now()


def run(main: Callable[[], Awaitable[T]], clock: MockClock, *, limit_s: float = 86_400.0) -> T:
    """Run ``main()`` to completion on a fresh :class:`SimLoop`, then end what is left.

    Tasks of processes the simulation killed wait forever (a dead process runs nothing):
    they are cancelled here, given a bounded stretch of simulated time to unwind, and
    whatever still waits is dropped with the loop, its complaints silenced."""
    loop = SimLoop(clock, limit_s=limit_s)
    try:
        asyncio.set_event_loop(loop)
        return loop.run_until_complete(main())
    finally:
        _end(loop)


def _end(loop: SimLoop) -> None:
    """Cancel what is left, let it unwind for a bounded stretch, drop the rest quietly."""
    hook = sys.unraisablehook
    sys.unraisablehook = lambda _unraisable: None  # coroutines of dead processes, closed unfinished
    try:
        loop.set_exception_handler(lambda _loop, _context: None)
        selector = loop._selector  # type: ignore[attr-defined]  # the simulated loop's own selector (crawler.testing.sim.loop)
        selector._limit = math.inf  # unwinding may take simulated time
        selector._spin_limit = math.inf
        pending = [t for t in asyncio.all_tasks(loop) if not t.done()]
        for t in pending:
            t.cancel()
        if pending:
            try:
                loop.run_until_complete(asyncio.wait(pending, timeout=60.0))
            except (SimDeadlock, RuntimeError):
                pass  # nothing left that can run: drop it
        del pending
        loop._unfinished.clear()
        asyncio.set_event_loop(None)
        loop.close()
        gc.collect()
    finally:
        sys.unraisablehook = hook
