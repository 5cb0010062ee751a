"""MicroBatcher on the mock clock: single requests become one call per batch, answered in
order; a failed call fails every waiter of that batch and no other."""

from __future__ import annotations

import asyncio

import pytest

from crawler.engine.batching import MicroBatcher
from crawler.clock import MockClock


async def test_requests_within_the_delay_share_one_call_and_get_their_own_answers() -> None:
    clock = MockClock()
    calls: list[tuple[float, list[int]]] = []

    async def double(items: list[int]) -> list[int]:
        calls.append((clock.now(), items))
        return [2 * i for i in items]

    b = MicroBatcher(double, max_size=100, max_delay_s=0.01, clock=clock)
    first = [asyncio.ensure_future(b.submit(i)) for i in range(5)]
    await clock.settle()
    assert calls == [] and b.pending() == 5  # waiting for the delay, not calling per item
    clock.advance(0.01)
    assert await asyncio.gather(*first) == [0, 2, 4, 6, 8]
    later = asyncio.ensure_future(b.submit(7))
    await clock.run_until(later.done)
    assert later.result() == 14
    assert calls == [(0.01, [0, 1, 2, 3, 4]), (0.02, [7])] and b.calls == 2 and b.pending() == 0


async def test_a_full_batch_goes_at_once_without_waiting_for_the_delay() -> None:
    clock = MockClock()
    sizes: list[int] = []

    async def echo(items: list[int]) -> list[int]:
        sizes.append(len(items))
        return items

    b = MicroBatcher(echo, max_size=3, max_delay_s=60.0, clock=clock)
    futs = [asyncio.ensure_future(b.submit(i)) for i in range(7)]
    await clock.settle()
    assert sizes == [3, 3] and clock.now() == 0.0  # the seventh waits for its timer
    await clock.run_until(lambda: all(f.done() for f in futs))
    assert sizes == [3, 3, 1] and clock.now() == 60.0
    assert [f.result() for f in futs] == list(range(7))


@pytest.mark.parametrize("failure", ["raises", "short answer"])
async def test_a_failed_call_fails_its_own_waiters_only(failure: str) -> None:
    clock = MockClock()
    batches = 0

    async def flaky(items: list[int]) -> list[int]:
        nonlocal batches
        batches += 1
        if batches == 1:
            if failure == "raises":
                raise ConnectionError("index restarting")
            return items[:-1]
        return items

    b = MicroBatcher(flaky, max_size=2, max_delay_s=1.0, clock=clock)
    doomed = [asyncio.ensure_future(b.submit(i)) for i in range(2)]
    fine = asyncio.ensure_future(b.submit(9))
    await clock.run_until(lambda: fine.done() and all(f.done() for f in doomed))
    for f in doomed:
        assert isinstance(f.exception(), (ConnectionError, RuntimeError))
    assert fine.result() == 9


async def test_requests_in_a_call_that_has_not_answered_count_as_pending() -> None:
    # The pipeline reports these as work in transit: a shard waiting on the content
    # index is not idle, so the crawl cannot be declared finished under it.
    clock = MockClock()
    answer = asyncio.Event()

    async def slow(items: list[int]) -> list[int]:
        await answer.wait()
        return items

    b = MicroBatcher(slow, max_size=2, max_delay_s=1.0, clock=clock)
    futs = [asyncio.ensure_future(b.submit(i)) for i in range(3)]
    await clock.settle()
    assert b.calls == 1 and b.pending() == 3  # two requests in a call, one queued for the next
    clock.advance(1.0)
    await clock.settle()
    assert b.calls == 2 and b.pending() == 3  # two calls out, neither answered
    answer.set()
    await clock.run_until(lambda: all(f.done() for f in futs))
    assert b.pending() == 0 and [f.result() for f in futs] == [0, 1, 2]
