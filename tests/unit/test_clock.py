"""The mock clock: timers fire in deadline order, at their exact times, without sleeping."""

import asyncio

import pytest

from crawler.clock import SYSTEM_CLOCK, MockClock, Timeouts, wait_event, within


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


def test_timeouts_cut_each_scope_at_its_own_deadline_on_the_injected_clock():
    async def scenario():
        clock = MockClock(start=100.0)
        timeouts = Timeouts(clock, 10.0)
        log = []

        async def job(name, start, work):
            await clock.sleep(start)
            try:
                with timeouts.scope() as scope:
                    await clock.sleep(work)
                log.append((name, "done", clock.now(), scope.expired))
            except TimeoutError:
                log.append((name, "timeout", clock.now(), scope.expired))

        tasks = [
            asyncio.ensure_future(job("a", 0.0, 60.0)),  # deadline 110
            asyncio.ensure_future(job("b", 1.0, 2.0)),  # done at 103
            asyncio.ensure_future(job("c", 2.0, 9.5)),  # done at 111.5, before its 112
            asyncio.ensure_future(job("d", 3.0, 30.0)),  # deadline 113
        ]
        await clock.run_until(lambda: all(t.done() for t in tasks))
        assert sorted(log, key=lambda e: e[2]) == [
            ("b", "done", 103.0, False),
            ("a", "timeout", 110.0, True),
            ("c", "done", 111.5, False),
            ("d", "timeout", 113.0, True),
        ]
        assert clock.next_deadline() is None and not timeouts._queue  # nothing left behind

    asyncio.run(scenario())


def test_timeouts_let_an_outside_cancellation_through():
    async def scenario():
        clock = MockClock()
        timeouts = Timeouts(clock, 10.0)

        async def body():
            with timeouts.scope():
                await clock.sleep(60.0)

        task = asyncio.ensure_future(body())
        await clock.settle()
        clock.advance(3.0)
        task.cancel()  # shutdown, not the deadline
        with pytest.raises(asyncio.CancelledError):
            await task
        # The deadline timer still fires at 10 and finds nothing to cancel.
        clock.advance(10.0)
        assert clock.next_deadline() is None and not timeouts._queue

    asyncio.run(scenario())


@pytest.mark.timeout(10)  # a regression hangs instead of failing
def test_timeouts_still_cut_after_moving_to_a_new_event_loop():
    # A fetcher kept across two asyncio.run calls: the first loop's timer died with it.
    timeouts = Timeouts(SYSTEM_CLOCK, 0.05)

    async def stalled():
        with timeouts.scope():
            await asyncio.Event().wait()

    async def quick():
        with timeouts.scope():
            await asyncio.sleep(0)

    asyncio.run(quick())  # leaves the timer armed on a loop that is now closed
    with pytest.raises(TimeoutError):
        asyncio.run(stalled())
