"""Micro-batching: turn many small awaits into one call per batch.

The engine asks the content index about one page at a time, but across a process or
actor boundary one call per page costs ~1 ms of round trip. :class:`MicroBatcher`
collects requests for up to ``max_delay_s`` (on the injected clock) or ``max_size``
items and resolves each caller's future from one batched call.
"""

from __future__ import annotations

import asyncio
from typing import Awaitable, Callable, Generic, Sequence, TypeVar

from crawler.clock import SYSTEM_CLOCK, Clock, Timer

T = TypeVar("T")
R = TypeVar("R")


class MicroBatcher(Generic[T, R]):
    """Batch single requests into calls of ``fn(list[T]) -> list[R]`` (same order)."""

    def __init__(
        self,
        fn: Callable[[list[T]], Awaitable[Sequence[R]]],
        *,
        max_size: int = 256,
        max_delay_s: float = 0.01,
        clock: Clock = SYSTEM_CLOCK,
    ) -> None:
        self._fn = fn
        self._clock = clock
        self._max_size = max_size
        self._max_delay_s = max_delay_s
        self._items: list[T] = []
        self._futures: list[asyncio.Future[R]] = []
        self._timer: Timer | None = None
        self._tasks: dict[asyncio.Task[None], int] = {}  # call -> requests it answers
        self.calls = 0

    async def submit(self, item: T) -> R:
        """Queue ``item`` and wait for its answer."""
        loop = asyncio.get_running_loop()
        fut: asyncio.Future[R] = loop.create_future()
        self._items.append(item)
        self._futures.append(fut)
        if len(self._items) >= self._max_size:
            self._fire()
        elif self._timer is None:
            self._timer = self._clock.call_later(self._max_delay_s, self._fire)
        return await fut

    def pending(self) -> int:
        """Requests queued or in a call that has not answered yet."""
        return len(self._items) + sum(n for t, n in self._tasks.items() if not t.done())

    def _fire(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if not self._items:
            return
        items, futures = self._items, self._futures
        self._items, self._futures = [], []
        task = asyncio.get_running_loop().create_task(self._call(items, futures))
        self._tasks[task] = len(items)
        task.add_done_callback(self._forget)

    def _forget(self, task: asyncio.Task[None]) -> None:
        self._tasks.pop(task, None)

    async def _call(self, items: list[T], futures: list[asyncio.Future[R]]) -> None:
        self.calls += 1
        try:
            results = await self._fn(items)
            if len(results) != len(items):
                raise RuntimeError(f"batch function returned {len(results)} results for {len(items)} items")
        except BaseException as exc:  # noqa: BLE001 - every waiter must learn of the failure
            for f in futures:
                if not f.done():
                    f.set_exception(exc)
            if isinstance(exc, asyncio.CancelledError):
                raise
            return
        for f, r in zip(futures, results):
            if not f.done():
                f.set_result(r)
