"""One run per output: the lease, its epochs, and the fence shards check (crawler.recovery.lease)."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time

import pytest

from crawler.clock import MockClock
from crawler.errors import OutputLeasedError
from crawler.recovery.lease import Fence, Lease, LeaseRecord, LeaseStore

TTL = 6.0


class Wall:
    """Wall-clock seconds that move only when told (shared by lease and fence)."""

    def __init__(self, clock: MockClock) -> None:
        self.clock = clock
        self.slept: list[float] = []

    def __call__(self) -> float:
        return self.clock.wall()

    def sleep(self, s: float) -> None:
        self.slept.append(s)
        self.clock.advance(s)


@pytest.fixture
def env(tmp_path):
    clock = MockClock()
    wall = Wall(clock)
    store = LeaseStore(str(tmp_path / "out"))

    def lease() -> Lease:
        return Lease(store, TTL, wall=wall, sleep=wall.sleep)

    return clock, wall, store, lease


def dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def test_epochs_grow_and_a_released_lease_is_free_at_once(env):
    clock, wall, store, lease = env
    a = lease()
    assert a.acquire() == 1
    a.release()
    b = lease()
    assert b.acquire() == 2 and wall.slept == []
    assert store.read().run_id == b.run_id


def test_a_live_holder_is_refused_with_who_holds_it(env):
    clock, wall, store, lease = env
    lease().acquire()  # this process: alive
    with pytest.raises(OutputLeasedError, match=f"pid {os.getpid()} on {socket.gethostname()}"):
        lease().acquire()


def test_a_dead_holder_is_waited_out_then_replaced_with_a_higher_epoch(env):
    clock, wall, store, lease = env
    store.write(LeaseRecord(4, "old", socket.gethostname(), dead_pid(), wall() + TTL, TTL))
    new = lease()
    assert new.acquire() == 5
    # Its shards may run until they notice: the new run waited for the old lease to end.
    assert sum(wall.slept) >= TTL
    assert wall() >= store.read().expires_at - TTL


@pytest.mark.skipif(not os.path.exists("/proc/self/stat"), reason="zombies are read from Linux /proc")
def test_a_killed_driver_not_yet_reaped_counts_as_gone(env):
    """A SIGKILLed driver whose parent has not reaped it still answers signal 0; it runs
    no more, so the next run waits out its lease instead of being refused."""
    clock, wall, store, lease = env
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        proc.kill()
        deadline = time.monotonic() + 30
        while True:  # until the kernel has made it a zombie (no wait(): we do not reap it)
            with open(f"/proc/{proc.pid}/stat") as f:
                if f.read().rsplit(")", 1)[1].split()[0] == "Z":
                    break
            assert time.monotonic() < deadline, "the killed child never became a zombie"
        store.write(LeaseRecord(1, "old", socket.gethostname(), proc.pid, wall() + TTL, TTL))
        assert lease().acquire() == 2 and sum(wall.slept) >= TTL
    finally:
        proc.wait()


def test_an_expired_lease_of_another_machine_is_taken(env):
    clock, wall, store, lease = env
    store.write(LeaseRecord(2, "elsewhere", "other-host", 1, wall() + TTL, TTL))
    with pytest.raises(OutputLeasedError):
        lease().acquire()  # alive as far as we can tell
    clock.advance(TTL)
    assert lease().acquire() == 3


def test_renewal_keeps_the_lease_and_fails_once_replaced(env):
    clock, wall, store, lease = env
    a = lease()
    a.acquire()
    clock.advance(TTL - 1)
    assert a.renew()
    clock.advance(TTL - 1)  # would have expired without the renewal
    with pytest.raises(OutputLeasedError):
        lease().acquire()
    clock.advance(TTL)  # the driver died: no renewals
    b = lease()
    assert b.acquire() == 2
    assert a.renew() is False  # the old driver, if it comes back, is fenced


def test_a_fence_stops_its_shard_when_replaced_or_expired(env):
    clock, wall, store, lease = env
    a = lease()
    epoch = a.acquire()
    fence = Fence(store, epoch, clock, check_interval_s=0.5)
    assert fence.ok()
    # A newer run takes over (after the old lease expired).
    clock.advance(TTL)
    lease().acquire()
    # The per-fetch check reads the lease at most every 0.5 s; a write or ack reads it now.
    assert fence.ok(fresh=True) is False
    assert "replaced ours" in fence.reason
    a.renew()
    assert fence.ok(fresh=True) is False  # once fenced, always fenced

    b = lease()
    clock.advance(TTL)
    epoch_b = b.acquire()
    quiet = Fence(store, epoch_b, clock, check_interval_s=0.5)
    assert quiet.ok()
    clock.advance(TTL)  # the driver stopped renewing
    assert quiet.ok() is False and "stopped renewing" in quiet.reason
