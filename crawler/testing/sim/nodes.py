"""Machines and processes of a simulated cluster, each with its own clock.

A :class:`Machine` is a node of the cluster: a local disk (a folder), a wall clock that
may be off by seconds and run fast or slow, and a network link that may be cut. A
:class:`Process` runs on a machine (the driver, one shard incarnation, a service): it
can be stopped (SIGSTOP, a VM pause or a loop blocked for seconds) and continued, or
killed. Nothing in the crawler tells the simulation apart from the real thing: each
process gets a :class:`ProcessClock` (the crawler's ``Clock``) and a ``run_blocking``
for its blocking I/O, and the simulation decides what they do:

* a stopped process runs nothing: its timers and sleeps come due only once it is
  continued, its blocking calls and messages wait for it;
* a killed process never runs again: its timers never fire, its sleeps never end, its
  blocking calls never return, so nothing it had in flight completes (kill -9);
* its ``now()`` is its own monotonic clock (an arbitrary origin per process: no two
  processes' monotonic readings are comparable, as on real machines), its ``wall()`` is
  its machine's wall clock, offset and drifting (docs/invariants.md #14: nothing may
  rely on two machines agreeing).
"""

from __future__ import annotations

import asyncio
import os
import shutil
from typing import Any, Callable, TypeVar

from crawler.clock import MockClock, Timer

T = TypeVar("T")


class Machine:
    """One node of the simulated cluster.

    Args:
        name: the node's name.
        root: the folder its local disk lives in.
        wall_offset_s: how far its wall clock is ahead of true time (negative: behind).
        rate: how fast its clocks run (1.0: true time; 1.0001 gains 0.1 ms a second).
    """

    def __init__(self, name: str, root: str, *, wall_offset_s: float = 0.0, rate: float = 1.0) -> None:
        self.name = name
        self.disk = os.path.join(root, name)
        os.makedirs(self.disk, exist_ok=True)
        self.wall_offset_s = wall_offset_s
        self.rate = rate
        self.partitioned = False  # cut off from the other machines (not from the object store or the web)
        self.up = True
        self.processes: list[Process] = []

    def wipe_disk(self) -> None:
        """The machine's disk is lost (a replaced VM)."""
        shutil.rmtree(self.disk, ignore_errors=True)
        os.makedirs(self.disk, exist_ok=True)


class Process:
    """One process on a :class:`Machine` (see the module docstring).

    Args:
        name: for the trace.
        machine: where it runs.
        clock: the simulation's true clock.
        mono_origin: where this process's monotonic clock starts.
        io_latency: simulated seconds each blocking call takes (a function of the call's name).
    """

    def __init__(self, name: str, machine: Machine, clock: MockClock, *, mono_origin: float,
                 io_latency: Callable[[str], float] = lambda _what: 0.0) -> None:
        self.name = name
        self.machine = machine
        self.true_clock = clock
        self.state = "up"  # up | stopped | dead
        self._continued = asyncio.Event()
        self._continued.set()
        self._parked: list[Callable[[], Any]] = []
        self._hangups: list[Callable[[], Any]] = []
        self._io_latency = io_latency
        self.clock = ProcessClock(clock, self, mono_origin)
        machine.processes.append(self)

    @property
    def running(self) -> bool:
        return self.state == "up"

    async def alive(self) -> None:
        """Return at once while the process runs; after a stop, once it continues; never
        once it is dead."""
        while self.state != "up":
            if self.state == "dead":
                await asyncio.get_running_loop().create_future()  # never set: a dead process runs nothing
            await self._continued.wait()

    def stop(self) -> None:
        """SIGSTOP: nothing of this process runs until :meth:`cont`."""
        if self.state == "up":
            self.state = "stopped"
            self._continued.clear()

    def cont(self) -> None:
        """SIGCONT: late timers fire now, waiting calls go on."""
        if self.state != "stopped":
            return
        self.state = "up"
        self._continued.set()
        parked, self._parked = self._parked, []
        for callback in parked:
            callback()

    def kill(self, *, machine_lost: bool = False) -> None:
        """kill -9: the process never runs again. Its kernel closes its connections (the
        peers see them hang up: :meth:`on_hangup`) unless the whole machine went dark
        (``machine_lost``: no kernel is left to say anything)."""
        self.state = "dead"
        self._parked = []
        self._continued.set()  # waiters wake, find it dead, and wait forever
        hangups, self._hangups = self._hangups, []
        if not machine_lost:
            for callback in hangups:
                callback()

    def on_hangup(self, callback: Callable[[], Any]) -> Callable[[], None]:
        """Call ``callback`` when this process dies and its connections close; returns
        how to forget it (the connection ended first)."""
        self._hangups.append(callback)

        def forget() -> None:
            if callback in self._hangups:
                self._hangups.remove(callback)

        return forget

    def fire(self, callback: Callable[[], Any]) -> None:
        """Run a timer callback of this process now, later (stopped) or never (dead)."""
        if self.state == "up":
            callback()
        elif self.state == "stopped":
            self._parked.append(callback)

    async def run_blocking(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        """A blocking call (object store, disk): it takes the simulated time the
        simulation decides, and only happens while the process runs."""
        await self.alive()
        delay = self._io_latency(getattr(fn, "__name__", "call"))
        if delay > 0:
            await self.clock.sleep(delay)
        else:
            await asyncio.sleep(0)
            await self.alive()
        return fn(*args, **kwargs)


class _Deferred:
    __slots__ = ("_timer",)

    def __init__(self, timer: Timer) -> None:
        self._timer = timer

    def cancel(self) -> None:
        self._timer.cancel()


class ProcessClock:
    """A process's view of time (the crawler's ``Clock``): see the module docstring."""

    def __init__(self, true_clock: MockClock, process: Process, mono_origin: float) -> None:
        self._true = true_clock
        self._process = process
        self._t0 = true_clock.now()
        self._mono0 = mono_origin

    @property
    def _rate(self) -> float:
        return self._process.machine.rate

    def now(self) -> float:
        return self._mono0 + (self._true.now() - self._t0) * self._rate

    def wall(self) -> float:
        m = self._process.machine
        return self._true.wall() + m.wall_offset_s + (self._true.now() - self._t0) * (m.rate - 1.0)

    async def sleep(self, seconds: float) -> None:
        if seconds > 0:
            await self._true.sleep(seconds / self._rate)
        else:
            await asyncio.sleep(0)
        await self._process.alive()

    def call_later(self, delay: float, callback: Callable[[], Any]) -> Timer:
        process = self._process
        return _Deferred(self._true.call_later(max(0.0, delay) / self._rate, lambda: process.fire(callback)))
