"""One run per output: epochs claimed once, leases kept by beats, fences by epochs
(crawler.recovery.lease). No wall clock of another machine decides anything
(docs/invariants.md #14): the tests skew them on purpose."""

from __future__ import annotations

import asyncio
import os
import socket
import subprocess
import sys

import pytest

from crawler.clock import MockClock
from crawler.errors import OutputLeasedError
from crawler.output.fs import create_new, open_fs
from crawler.recovery.lease import Fence, Holder, Lease, LeaseRecord, LeaseStore, LeaseUnknownError

TTL = 6.0


class SkewedClock(MockClock):
    """A second machine's clock: the same monotonic time, a wall clock ``offset`` off."""

    def __init__(self, base: MockClock, offset: float) -> None:
        super().__init__()
        self.base, self.offset = base, offset

    def now(self) -> float:
        return self.base.now()

    def wall(self) -> float:
        return self.base.wall() + self.offset

    async def sleep(self, seconds: float) -> None:
        await self.base.sleep(seconds)


class FlakyStore(LeaseStore):
    """A lease store whose object store fails while ``down`` is set."""

    down = False

    def _read(self, path: str):
        if self.down:
            raise LeaseUnknownError(f"reading {path} failed: 503")
        return super()._read(path)

    def _put(self, path: str, rec: LeaseRecord) -> None:
        if self.down:
            raise LeaseUnknownError(f"writing {path} failed: 503")
        super()._put(path, rec)


def dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def run(clock: MockClock, coro):
    async def main():
        task = asyncio.ensure_future(coro)
        await clock.run_until(task.done, max_time=3600)
        return task.result()

    return asyncio.run(main())


@pytest.fixture
def store(tmp_path):
    return FlakyStore(str(tmp_path / "out"))


def lease(store, clock, holder=None) -> Lease:
    return Lease(store, TTL, clock=clock, holder=holder)


def test_epochs_grow_and_a_released_lease_is_free_at_once(store):
    clock = MockClock()
    a = lease(store, clock)
    assert run(clock, a.acquire()) == 1
    a.release()
    b = lease(store, clock)
    assert run(clock, b.acquire()) == 2 and clock.now() == 0.0 and not b.took_over
    assert store.newest().run_id == b.run_id
    assert store.read().run_id == b.run_id  # the hint follows


def test_a_live_holder_on_this_machine_is_refused_at_once_with_who_holds_it(store):
    clock = MockClock()
    run(clock, lease(store, clock).acquire())  # this process: alive
    with pytest.raises(OutputLeasedError, match=f"pid {os.getpid()} on {socket.gethostname()}"):
        run(clock, lease(store, clock).acquire())
    assert clock.now() == 0.0


def test_a_dead_holder_on_this_machine_is_replaced_at_once_after_a_short_grace(store):
    clock = MockClock()
    old = lease(store, clock, Holder(socket.gethostname(), dead_pid()))
    run(clock, old.acquire())
    new = lease(store, clock)
    assert run(clock, new.acquire()) == 2
    # Any shard of the old run still fetching rereads the epochs within 0.5 s: the new run
    # starts after that.
    assert new.took_over and 1.0 <= clock.now() <= 2.0
    assert old.renew() is False  # the old driver, should it come back, is fenced


def test_a_holder_elsewhere_that_beats_is_refused_whatever_its_clock_says(store):
    clock = MockClock()
    ahead = SkewedClock(clock, 120.0)  # its wall clock two minutes ahead: the record looks odd
    other = lease(store, ahead, Holder("other-host", 1))
    run(clock, other.acquire())

    async def keep_beating():
        while True:
            await clock.sleep(TTL / 4)
            other.renew()

    async def attempt():
        beats = asyncio.ensure_future(keep_beating())
        try:
            return await lease(store, clock).acquire()
        finally:
            beats.cancel()

    with pytest.raises(OutputLeasedError, match="being renewed"):
        run(clock, attempt())
    assert clock.now() <= TTL / 4 + 1.0  # refused at its first beat, not after a TTL


def test_a_silent_holder_elsewhere_is_replaced_after_a_ttl_of_our_clock_whatever_its_clock_says(store):
    for offset in (-300.0, 0.0, 300.0):
        clock = MockClock()
        st = FlakyStore(os.path.join(os.path.dirname(store.root), f"out{int(offset)}"))
        other = lease(st, SkewedClock(clock, offset), Holder("other-host", 1))
        run(clock, other.acquire())
        clock.advance(TTL / 2 + 1)  # it died a while ago: the record is no longer "a moment ago"
        start = clock.now()
        assert run(clock, lease(st, clock).acquire()) == 2
        # Exactly one TTL of *our* clock without a beat, then the grace: no clock comparison.
        assert TTL <= clock.now() - start <= TTL + 2.0, offset


def test_a_renewal_that_fails_is_no_verdict_and_freshness_runs_out_on_our_clock(store):
    clock = MockClock()
    a = lease(store, clock)
    run(clock, a.acquire())
    assert a.fresh()
    store.down = True
    with pytest.raises(LeaseUnknownError):
        a.renew()
    clock.advance(TTL - a.margin_s - 0.01)
    assert a.fresh()
    clock.advance(0.02)
    assert not a.fresh()  # the session stops vouching for its shards now
    store.down = False
    assert a.renew() and a.fresh()


def test_two_runs_racing_for_an_epoch_never_both_win(tmp_path):
    fs, root = open_fs(str(tmp_path / "out"))
    path = f"{root}/state/epochs/00000001.json"
    assert create_new(fs, path, b"a") is True
    assert create_new(fs, path, b"b") is False
    with open(path, "rb") as f:
        assert f.read() == b"a"


def test_a_fence_falls_only_to_a_newer_epoch_never_to_time(store):
    clock = MockClock()
    a = lease(store, clock)
    epoch = run(clock, a.acquire())
    fence = Fence(store, epoch, SkewedClock(clock, 3600.0), check_interval_s=0.5)
    clock.advance(10 * TTL)  # no renewal at all for ten TTLs: still ours until someone takes it
    assert fence.ok(fresh=True)
    store.down = True
    assert fence.ok() is True  # the reading of a moment ago still stands
    clock.advance(0.6)
    assert fence.ok() is False and not fence.lost  # unknown: shut for now, not for good
    with pytest.raises(LeaseUnknownError):
        fence.ok(fresh=True)  # a write waits and retries
    store.down = False
    assert fence.ok()
    fence.ok()
    store.claim(LeaseRecord(epoch + 1, "newer", "other-host", 2, TTL))  # a newer run takes over
    assert fence.ok() is True  # the reading of a moment ago, at most check_interval_s old
    assert fence.ok(fresh=True) is False and fence.lost
    assert fence.reason == f"epoch {epoch + 1} replaced ours ({epoch})"
    a.renew()
    assert fence.ok(fresh=True) is False  # once fenced, always fenced


def test_an_output_leased_before_epochs_existed_is_still_understood(store):
    clock = MockClock()
    old = {"epoch": 4, "run_id": "old", "host": socket.gethostname(), "pid": dead_pid(),
           "expires_at": clock.wall() + TTL, "ttl_s": TTL}
    fs, _ = open_fs(os.path.dirname(store.root))
    os.makedirs(store.root, exist_ok=True)
    import json

    with open(store.path, "w", encoding="utf-8") as f:
        json.dump(old, f)
    assert store.newest().epoch == 4
    assert run(clock, lease(store, clock).acquire()) == 5
