"""A shard's watch on its driver and its lease (crawler.recovery.watchdog), on the mock clock.

The actor (actors/host_shard.py) gates fetches and accepted work on ``may_work()``, flushes
on ``on_driver_silent`` and closes on ``on_lease_lost``; these tests pin when each happens.
"""

from __future__ import annotations

import asyncio

from crawler.clock import MockClock
from crawler.recovery.lease import Fence, LeaseRecord, LeaseStore
from crawler.recovery.watchdog import WATCH_INTERVAL_S, ShardWatchdog

TIMEOUT = 1.0


class Hooks:
    """Records what the watchdog asked for, with the clock's time."""

    def __init__(self, clock: MockClock, fail_flush: bool = False) -> None:
        self.clock = clock
        self.fail_flush = fail_flush
        self.flushes: list[float] = []
        self.lost: list[tuple[float, str | None]] = []
        self.ticks = 0

    async def on_driver_silent(self) -> None:
        self.flushes.append(self.clock.now())
        if self.fail_flush:
            raise OSError("disk gone")

    async def on_lease_lost(self, reason: str | None) -> None:
        self.lost.append((self.clock.now(), reason))

    def on_tick(self) -> None:
        self.ticks += 1


def _lease(store: LeaseStore, clock: MockClock, epoch: int = 1, ttl: float = 60.0) -> None:
    """Run ``epoch`` claims the output (an epoch's claim: crawler.recovery.lease)."""
    assert store.claim(LeaseRecord(epoch=epoch, run_id=f"run{epoch}", host="h", pid=1, ttl_s=ttl, renewed_at=clock.wall()))


def test_the_gate_shuts_after_the_driver_timeout_and_a_beat_opens_it():
    clock = MockClock()
    dog = ShardWatchdog(clock, TIMEOUT, None, Hooks(clock))
    assert dog.may_work()
    clock.advance(TIMEOUT)
    assert dog.may_work()  # exactly the timeout is not yet silence
    clock.advance(0.01)
    assert dog.silent() and not dog.may_work()
    dog.contact()
    assert dog.may_work()
    clock.advance(TIMEOUT - 0.01)
    dog.contact()  # beats keep it open indefinitely
    clock.advance(TIMEOUT - 0.01)
    assert dog.may_work()


def test_silence_flushes_once_per_silence_and_again_after_a_new_one():
    clock = MockClock()
    hooks = Hooks(clock)
    dog = ShardWatchdog(clock, TIMEOUT, None, hooks)

    async def main() -> None:
        task = asyncio.ensure_future(dog.run())
        # The first look after the timeout sees the silence.
        await clock.run_until(lambda: len(hooks.flushes) == 1)
        assert hooks.flushes == [1.25]
        await clock.run_until(lambda: clock.now() >= 5.0)
        assert hooks.flushes == [1.25]  # a long silence is flushed once
        dog.contact()
        await clock.run_until(lambda: clock.now() >= 5.5)
        assert hooks.flushes == [1.25] and dog.may_work()
        await clock.run_until(lambda: len(hooks.flushes) == 2)
        assert hooks.flushes == [1.25, 6.25]  # a second silence, a second flush
        dog.stop()
        await clock.run_until(task.done)

    asyncio.run(main())
    assert hooks.lost == []
    # One per look, 0.25 s apart; the look whose sleep the stop fell into still runs.
    assert hooks.ticks == 26


def test_a_failed_flush_is_logged_and_the_watch_goes_on(caplog):
    clock = MockClock()
    hooks = Hooks(clock, fail_flush=True)
    dog = ShardWatchdog(clock, TIMEOUT, None, hooks, name="shard-007")

    async def main() -> None:
        task = asyncio.ensure_future(dog.run())
        await clock.run_until(lambda: clock.now() >= 3.0)
        assert not task.done()
        dog.stop()
        await clock.run_until(task.done)

    asyncio.run(main())
    assert hooks.flushes == [1.25]
    assert "shard-007: flush on driver silence failed: OSError('disk gone')" in caplog.text


def test_a_lost_lease_shuts_the_gate_for_good_and_ends_the_watch(tmp_path):
    clock = MockClock()
    store = LeaseStore(str(tmp_path / "out"))
    _lease(store, clock, epoch=1)
    fence = Fence(store, 1, clock, check_interval_s=0.5)
    hooks = Hooks(clock)
    dog = ShardWatchdog(clock, TIMEOUT, fence, hooks)

    async def main() -> None:
        task = asyncio.ensure_future(dog.run())
        await clock.run_until(lambda: clock.now() >= 0.9)
        dog.contact()
        await clock.run_until(lambda: clock.now() >= 1.8)
        dog.contact()
        await clock.run_until(lambda: clock.now() >= 2.0)
        assert hooks.lost == [] and dog.may_work()
        _lease(store, clock, epoch=2)  # a newer run took the output
        await clock.run_until(task.done)
        # The fence rereads the lease at most every 0.5 s: the loss is seen within that.
        assert len(hooks.lost) == 1
        at, reason = hooks.lost[0]
        assert 2.0 < at <= 2.5 + WATCH_INTERVAL_S
        assert reason == "epoch 2 replaced ours (1)"

    asyncio.run(main())
    dog.contact()
    assert not dog.may_work()  # a beat from the old driver cannot reopen it
    assert hooks.flushes == []  # the driver was never silent


def test_a_lease_nobody_renews_does_not_fence_a_shard_whatever_its_clock_says(tmp_path):
    """Time alone never fences (docs/invariants.md #14): a shard whose wall clock runs far
    ahead of the driver's, or a driver that renews late, leaves the gate to the silence
    rule on the shard's own monotonic clock; only a newer epoch closes it for good."""
    clock = MockClock(wall_start=1_700_000_000.0 + 3600.0)  # an hour ahead of the driver
    store = LeaseStore(str(tmp_path / "out"))
    _lease(store, clock, epoch=3, ttl=2.0)
    hooks = Hooks(clock)
    dog = ShardWatchdog(clock, 100.0, Fence(store, 3, clock, check_interval_s=0.5), hooks)

    async def main() -> None:
        task = asyncio.ensure_future(dog.run())
        await clock.run_until(lambda: clock.now() >= 60.0)
        assert hooks.lost == [] and dog.may_work()
        dog.stop()
        await clock.run_until(task.done)

    asyncio.run(main())


class _Generation:
    """Stands in for crawler.recovery.incarnation.Incarnation: a successor claims the next
    generation at ``successor_at``; reads may fail."""

    def __init__(self, clock: MockClock, successor_at: float | None, failing: int = 0) -> None:
        self.clock, self.successor_at, self.failing = clock, successor_at, failing
        self.reads = 0
        self.fenced = False

    def ok(self, fresh: bool = False) -> bool:
        from crawler.errors import StorageError

        self.reads += 1
        if self.failing:
            self.failing -= 1
            raise StorageError("store down")
        if self.successor_at is not None and self.clock.now() >= self.successor_at:
            self.fenced = True
        return not self.fenced


def test_calls_parked_during_a_stop_do_not_reopen_the_gate_beside_a_successor():
    """A shard stopped (or cut off) for a while gets the calls parked meanwhile when it
    runs again; they say nothing of how old they are. The gate reopens only once the
    shard's generation was read again, and stays shut if a successor claimed the next."""
    clock = MockClock()
    gen = _Generation(clock, successor_at=5.0)
    dog = ShardWatchdog(clock, TIMEOUT, None, Hooks(clock), incarnation=gen)
    assert dog.may_work() and gen.reads == 0  # no read while the driver is heard from
    clock.advance(20.0)  # stopped; meanwhile the cluster started a successor
    assert not dog.may_work()
    dog.contact()  # a heartbeat parked during the stop
    assert not dog.may_work() and gen.fenced
    dog.contact()
    assert not dog.may_work()


def test_after_a_silence_the_gate_reopens_once_the_generation_reads_ours():
    clock = MockClock()
    gen = _Generation(clock, successor_at=None, failing=1)
    dog = ShardWatchdog(clock, TIMEOUT, None, Hooks(clock), incarnation=gen)
    clock.advance(3.0)
    dog.contact()
    assert not dog.may_work()  # the store could not tell: shut, asked again next time
    assert dog.may_work() and gen.reads == 2
    assert dog.may_work() and gen.reads == 2  # one read per silence, not per fetch
