"""The mock clock: timers fire in deadline order, at their exact times, without sleeping."""

import asyncio

import pytest

from crawler.clock import MockClock, wait_event, within


def test_advance_fires_due_timers_in_order_at_their_times():
    clock = MockClock(start=10.0)
    fired = []
    clock.call_later(2.0, lambda: fired.append(("b", clock.now())))
    clock.call_later(1.0, lambda: fired.append(("a", clock.now())))
    late = clock.call_later(5.0, lambda: fired.append(("late", clock.now())))
    clock.advance(3.0)
    assert fired == [("a", 11.0), ("b", 12.0)]
    assert clock.now() == 13.0
    late.cancel()
    clock.advance(10.0)
    assert len(fired) == 2
    with pytest.raises(ValueError):
        clock.advance(-1)


def test_run_until_jumps_from_deadline_to_deadline():
    async def scenario():
        clock = MockClock()
        seen = []

        async def worker():
            for delay in (0.5, 2.0, 0.25):
                await clock.sleep(delay)
                seen.append(clock.now())

        task = asyncio.ensure_future(worker())
        end = await clock.run_until(task.done)
        assert seen == [0.5, 2.5, 2.75] and end == 2.75

    asyncio.run(scenario())


def test_run_until_reports_a_deadlock_instead_of_hanging():
    async def scenario():
        clock = MockClock()
        with pytest.raises(RuntimeError, match="nothing is scheduled"):
            await clock.run_until(lambda: False)

    asyncio.run(scenario())


def test_wait_event_and_within_time_out_on_the_mock_clock():
    async def scenario():
        clock = MockClock()
        event = asyncio.Event()
        waiter = asyncio.ensure_future(wait_event(clock, event, 3.0))
        assert await clock.run_until(waiter.done) == 3.0 and waiter.result() is False

        never = asyncio.get_running_loop().create_future()
        guarded = asyncio.ensure_future(within(clock, never, 1.5))
        await clock.run_until(guarded.done)
        assert clock.now() == 4.5 and isinstance(guarded.exception(), asyncio.TimeoutError)
        assert never.cancelled()

        clock.call_later(0.5, event.set)
        waiter = asyncio.ensure_future(wait_event(clock, event, 10.0))
        assert await clock.run_until(waiter.done) == 5.0 and waiter.result() is True

    asyncio.run(scenario())
