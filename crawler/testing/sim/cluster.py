"""A simulated Ray cluster: restartable actors, calls between processes, failure detection.

What the crawler relies on Ray for, and how Ray behaves when machines misbehave, is
modelled here -- and only that:

* an actor has one live incarnation at a time, in a process of its own; when that
  process dies (a crash: restarted at once on the same machine, with its disk; a lost
  machine: restarted elsewhere once the cluster noticed, after ``detect_s``) a new one is
  built, up to ``max_restarts`` times;
* a call copies its arguments and its result (pickle, as Ray serializes them), takes
  network time, runs when the callee's process runs, and fails with
  :class:`ActorUnavailable` (Ray: ``RayActorError``/``ActorUnavailableError``) when the
  callee is restarting or dies during the call; an exception the method raises reaches
  the caller as it was raised;
* a partitioned machine exchanges nothing with the others (calls wait) until it heals
  or the cluster declares it dead: then its actors are restarted elsewhere while the old
  processes run on, cut off -- *zombies* that still reach the object store and the
  web -- until the partition heals and the cluster kills them.

The crawl's own classes run inside: :class:`~crawler.engine.shardserver.ShardServer` for
shards, and the plain classes of crawler.seen and crawler.services for the
services (crawler.testing.sim.services).
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import pickle
import random
from dataclasses import dataclass, field
from typing import Any, Awaitable, Callable, Concatenate, ParamSpec, TypeVar

from crawler.clock import Clock, MockClock
from crawler.errors import ServiceUnavailableError
from crawler.testing.sim.nodes import Machine, Process

log = logging.getLogger(__name__)

T = TypeVar("T")
R = TypeVar("R")
P = ParamSpec("P")


class ActorUnavailable(Exception):
    """The actor is restarting, dead, or died during the call (Ray: RayActorError)."""


@dataclass
class Incarnation:
    """One life of an actor: its process and its object."""

    number: int
    process: Process
    obj: Any
    gone: asyncio.Event = field(default_factory=asyncio.Event)  # died, or replaced by a newer one


class SimActor:
    """A restartable actor (see the module docstring)."""

    def __init__(self, cluster: "Cluster", name: str, build: Callable[[Process, int], Any], *,
                 max_restarts: int, home: Machine | None = None) -> None:
        self.cluster = cluster
        self.name = name
        self.build = build
        self.max_restarts = max_restarts
        self.home = home
        self.current: Incarnation | None = None
        self.incarnations = 0
        self.restarts = 0
        self.dead = False  # out of restarts, or killed for good
        self.old: list[Incarnation] = []  # every earlier incarnation (zombies among them)

    def place(self, machine: Machine) -> bool:
        """Build a new incarnation on ``machine``; False if building it failed."""
        self.incarnations += 1
        process = self.cluster.process(f"{self.name}#{self.incarnations}", machine)
        try:
            obj = self.build(process, self.incarnations)
        except Exception as exc:  # noqa: BLE001 - Ray counts a failed constructor as a failed restart
            log.info("%s: incarnation %d failed to start: %r", self.name, self.incarnations, exc)
            self.cluster.record("actor_start_failed", self.name, repr(exc))
            process.kill()
            return False
        self.current = Incarnation(self.incarnations, process, obj)
        self.home = machine
        self.cluster.record("started", self.name, f"{process.name} on {machine.name}")
        return True

    def lose_current(self) -> Incarnation | None:
        """The current incarnation is gone (died, or declared dead): callers fail over."""
        inc = self.current
        if inc is not None:
            inc.gone.set()
            self.old.append(inc)
        self.current = None
        return inc


class Cluster:
    """The machines, the processes on them and the actors (see the module docstring).

    Args:
        clock: the simulation's true clock.
        rng: draws latencies and detection delays.
        io_latency: the simulated time of a process's blocking call.
        detect_s: (low, high) seconds before the cluster declares a silent machine dead.
    """

    def __init__(self, clock: MockClock, rng: random.Random, *, root: str,
                 io_latency: Callable[[str], float], detect_s: tuple[float, float] = (4.0, 12.0)) -> None:
        self.clock = clock
        self.rng = rng
        self.root = root
        self.io_latency = io_latency
        self.detect_s = detect_s
        self.machines: dict[str, Machine] = {}
        self.actors: list[SimActor] = []
        self.events: list[tuple[float, str, str, str]] = []  # (time, kind, subject, detail): the trace
        self._mono = itertools.count(1)

    # -- building ------------------------------------------------------------------

    def record(self, kind: str, subject: str, detail: str = "") -> None:
        self.events.append((round(self.clock.now(), 6), kind, subject, detail))

    def machine(self, name: str, **kw: Any) -> Machine:
        m = self.machines[name] = Machine(name, self.root, **kw)
        return m

    def process(self, name: str, machine: Machine) -> Process:
        # Monotonic clocks of two processes share no origin, as on two real machines.
        return Process(name, machine, self.clock, mono_origin=1000.0 * next(self._mono), io_latency=self.io_latency)

    def spawn(self, name: str, machine: Machine, build: Callable[[Process, int], Any], *, max_restarts: int) -> SimActor:
        actor = SimActor(self, name, build, max_restarts=max_restarts, home=machine)
        self.actors.append(actor)
        if not actor.place(machine):
            self._restart_later(actor, 0.5)
        return actor

    # -- failures ------------------------------------------------------------------

    def crash(self, actor: SimActor) -> None:
        """The actor's process dies (kill -9); Ray restarts it on the same machine."""
        inc = actor.current
        if inc is None or inc.process.state == "dead":
            return  # died with its machine: nothing left to crash, the cluster has yet to notice
        self.record("crash", actor.name, inc.process.name)
        inc.process.kill()
        actor.lose_current()
        self._restart_later(actor, self.rng.uniform(0.05, 1.0))

    def kill_actor(self, actor: SimActor) -> None:
        """``ray.kill``: the actor is gone for good."""
        actor.dead = True
        inc = actor.lose_current()
        if inc is not None:
            self.record("killed", actor.name, inc.process.name)
            inc.process.kill()

    def lose_machine(self, machine: Machine, *, wipe_disk: bool) -> None:
        """The machine stops (and its disk is lost, or kept for when it comes back)."""
        self.record("machine_lost", machine.name, "disk lost" if wipe_disk else "disk kept")
        machine.up = False
        for p in machine.processes:
            p.kill(machine_lost=True)
        if wipe_disk:
            machine.wipe_disk()
        self._declare_dead_later(machine)

    def restore_machine(self, machine: Machine) -> None:
        self.record("machine_back", machine.name)
        machine.up = True

    def partition(self, machine: Machine, duration: float) -> None:
        """Cut ``machine`` off from the others for ``duration`` seconds."""
        self.record("partition", machine.name, f"{duration:.1f}s")
        machine.partitioned = True
        self._declare_dead_later(machine)

        def heal() -> None:
            machine.partitioned = False
            self.record("heal", machine.name)
            # A machine the cluster declared dead is told so when it reconnects: its
            # processes that are no longer anyone's current incarnation exit.
            for actor in self.actors:
                for inc in actor.old:
                    if inc.process.machine is machine and inc.process.running:
                        self.record("zombie_killed", inc.process.name)
                        inc.process.kill()

        self.clock.call_later(duration, heal)

    def _declare_dead_later(self, machine: Machine) -> None:
        def declare() -> None:
            # A machine back up in time after a power loss is a new node all the same:
            # its processes died with it, and the cluster restarts their actors (Ray: the
            # old raylet's death is noticed, the node registers anew).
            rebooted = [a for a in self.actors if a.current is not None and not a.dead
                        and a.current.process.machine is machine and a.current.process.state == "dead"]
            if machine.up and not machine.partitioned and not rebooted:
                return  # it came back in time
            self.record("declared_dead", machine.name)
            for actor in self.actors:
                inc = actor.current
                if inc is not None and inc.process.machine is machine and not actor.dead:
                    actor.lose_current()
                    self._restart_later(actor, 0.0)

        self.clock.call_later(self.rng.uniform(*self.detect_s), declare)

    def _restart_later(self, actor: SimActor, delay: float) -> None:
        def restart() -> None:
            if actor.dead or actor.current is not None:
                return
            if actor.restarts >= actor.max_restarts:
                self.record("actor_dead", actor.name, "out of restarts")
                actor.dead = True
                return
            machine = self._placement(actor)
            if machine is None:
                self.clock.call_later(1.0, restart)
                return
            actor.restarts += 1
            self.record("restart", actor.name, machine.name)
            if not actor.place(machine):
                self.clock.call_later(self.rng.uniform(0.5, 2.0), restart)

        self.clock.call_later(delay, restart)

    def _placement(self, actor: SimActor) -> Machine | None:
        home = actor.home
        if home is not None and home.up and not home.partitioned:
            return home
        candidates = [m for m in self.machines.values() if m.up and not m.partitioned and m.name != "head"]
        return self.rng.choice(candidates) if candidates else None

    # -- calls ---------------------------------------------------------------------

    def _latency(self) -> float:
        return self.rng.uniform(0.0002, 0.002)

    async def _reachable(self, a: Machine, b: Machine, inc: Incarnation) -> None:
        """Wait while a partition separates ``a`` and ``b``; fail once ``inc`` is gone."""
        while a is not b and (a.partitioned or b.partitioned):
            if inc.gone.is_set():
                raise ActorUnavailable("the callee was declared dead")
            await self.clock.sleep(0.1)

    async def call(self, src: Process, actor: SimActor, method: Callable[Concatenate[Any, P], Awaitable[R]],
                   *args: P.args, **kwargs: P.kwargs) -> R:
        """``method(actor's object, *args)`` from ``src`` (see the module docstring): a
        method of the actor's class, so that the call is typed (as Ray's ``.remote`` of a
        method of the actor class is)."""
        await src.alive()
        payload = pickle.dumps((args, kwargs))
        await self.clock.sleep(self._latency())
        inc = actor.current
        if inc is None:
            raise ActorUnavailable(f"{actor.name} is {'dead' if actor.dead else 'restarting'}")
        await self._reachable(src.machine, inc.process.machine, inc)
        callee = inc.process

        async def run() -> R:
            await callee.alive()
            a, kw = pickle.loads(payload)
            return await method(inc.obj, *a, **kw)

        task = asyncio.ensure_future(run())
        gone = asyncio.ensure_future(inc.gone.wait())
        try:
            await asyncio.wait((task, gone), return_when=asyncio.FIRST_COMPLETED)
        finally:
            gone.cancel()
        if not task.done():
            task.add_done_callback(_drop_result)
            raise ActorUnavailable(f"{actor.name} died during {method.__name__}")
        exc = task.exception()
        reply = pickle.dumps(exc if exc is not None else task.result())
        await self.clock.sleep(self._latency())
        await self._reachable(inc.process.machine, src.machine, inc)
        await src.alive()
        value = pickle.loads(reply)
        if exc is not None:
            raise value
        result: R = value
        return result

    async def patient(self, clock: Clock, call: Callable[[], Awaitable[T]], give_up_s: float = 120.0) -> T:
        """``await call()``, again while the actor is restarting (actors/serviceactors.call_service)."""
        delay, deadline = 0.05, clock.now() + give_up_s
        while True:
            try:
                return await call()
            except ActorUnavailable as exc:
                if clock.now() >= deadline:
                    raise ServiceUnavailableError(f"unavailable for {give_up_s:.0f}s ({exc})") from exc
                await clock.sleep(delay)
                delay = min(delay * 2, 2.0)


def _drop_result(task: "asyncio.Future[Any]") -> None:
    if not task.cancelled():
        task.exception()  # retrieved: a call whose caller gave up
