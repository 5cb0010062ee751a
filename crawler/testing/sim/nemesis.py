"""The nemesis: which faults a simulated crawl meets, and when (FoundationDB's "buggify"
and Jepsen's nemesis, drawn from the seed).

A :class:`FaultPlan` is a list of :class:`Fault` s, each a kind, a start time, a duration
and a few parameters, all drawn from one ``random.Random``; :meth:`Nemesis.arm` schedules
them on the simulation's clock. The kinds (:data:`KINDS`) are the faults of a real
``ray up`` cluster that the fault model of the README's "Guarantees" names:

driver_stall   the driver process stopped (SIGSTOP, a GC or VM pause), then continued
driver_kill    the driver killed; the job submitted again after a while (a resume)
shard_crash    one shard's process killed; the cluster restarts it
loop_block     one shard's process stopped for a while (an event loop blocked)
machine_loss   a worker machine lost, with or without its disk; it comes back later
partition      a worker cut off from the cluster (it still reaches OUT and the web); the
               cluster may declare it dead and restart its shards elsewhere: zombies
service_crash  the seen, content or budget service's process killed and restarted
store_put      object-store PUTs failing, or landing and reporting failure, for a while
store_get      object-store GETs failing for a while
store_list     listings that miss recent objects, miss one in the middle, or come shuffled
clock_skew     machines whose wall clocks are off by up to a minute and drift
clock_jump     a machine's wall clock stepped by up to a minute (an NTP step)
slow_web       every response slow for a while (within the fetch timeout)
"""

from __future__ import annotations

import random
from functools import partial
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from crawler.testing.sim.objectstore import StoreFaults

if TYPE_CHECKING:
    from crawler.testing.sim.world import World

KINDS = (
    "driver_stall", "driver_kill", "shard_crash", "loop_block", "machine_loss", "partition", "service_crash",
    "store_put", "store_get", "store_list", "clock_skew", "clock_jump", "slow_web",
)

#: The window in which faults start (simulated seconds after the first run starts): a
#: test-sized crawl runs for roughly this long.
FAULT_WINDOW_S = (0.5, 10.0)


@dataclass(frozen=True)
class Fault:
    """One fault: ``kind`` at ``at`` for ``duration`` seconds, with its parameters."""

    kind: str
    at: float
    duration: float = 0.0
    params: tuple[tuple[str, Any], ...] = ()

    def get(self, key: str, default: Any = None) -> Any:
        return dict(self.params).get(key, default)

    def describe(self) -> str:
        extra = ", ".join(f"{k}={v}" for k, v in self.params)
        return f"{self.kind}@{self.at:.2f}s" + (f" for {self.duration:.1f}s" if self.duration else "") + \
            (f" ({extra})" if extra else "")


@dataclass
class FaultPlan:
    """The faults of one seed."""

    faults: list[Fault] = field(default_factory=list)

    def kinds(self) -> list[str]:
        return [f.kind for f in self.faults]

    def describe(self) -> str:
        return "; ".join(f.describe() for f in self.faults) or "no faults"


def _draw_one(kind: str, rng: random.Random) -> Fault:
    at = round(rng.uniform(*FAULT_WINDOW_S), 3)
    u = rng.uniform
    if kind == "driver_stall":
        return Fault(kind, at, round(u(2.0, 40.0), 2))
    if kind == "driver_kill":
        return Fault(kind, at, 0.0, (("resubmit_after", round(u(1.0, 40.0), 2)), ("stalled_first", rng.random() < 0.5)))
    if kind == "shard_crash":
        return Fault(kind, at, 0.0, (("shard", rng.randrange(8)),))
    if kind == "loop_block":
        return Fault(kind, at, round(u(0.5, 40.0), 2), (("shard", rng.randrange(8)),))
    if kind == "machine_loss":
        return Fault(kind, at, round(u(5.0, 60.0), 2), (("machine", rng.randrange(8)), ("wipe_disk", rng.random() < 0.7)))
    if kind == "partition":
        return Fault(kind, at, round(u(1.0, 45.0), 2), (("machine", rng.randrange(8)),))
    if kind == "service_crash":
        return Fault(kind, at, 0.0, (("service", rng.choice(["seen", "content", "budget"])),))
    if kind == "store_put":
        return Fault(kind, at, round(u(1.0, 30.0), 2),
                     (("put_fail", round(u(0.05, 0.6), 2)), ("put_unknown", round(u(0.0, 0.3), 2))))
    if kind == "store_get":
        return Fault(kind, at, round(u(1.0, 30.0), 2), (("get_fail", round(u(0.05, 0.6), 2)),))
    if kind == "store_list":
        return Fault(kind, at, round(u(2.0, 60.0), 2),
                     (("list_lag_s", round(rng.choice([0.0, u(0.5, 20.0)]), 2)),
                      ("list_drop", round(rng.choice([0.0, u(0.05, 0.5)]), 2)),
                      ("list_shuffle", rng.random() < 0.5)))
    if kind == "clock_skew":
        return Fault(kind, 0.0, 0.0, (("max_offset_s", round(u(1.0, 60.0), 2)), ("max_drift", round(u(0.0, 1e-4), 6))))
    if kind == "clock_jump":
        return Fault(kind, at, 0.0, (("machine", rng.randrange(8)), ("step_s", round(u(-60.0, 60.0), 2))))
    if kind == "slow_web":
        # Slow, not broken: every response still arrives within the fetch timeout of the
        # test web (1 s), so the ground truth of what must be fetched still holds.
        return Fault(kind, at, round(u(2.0, 60.0), 2), (("slow_s", round(u(0.05, 0.8), 2)),))
    raise ValueError(f"unknown fault kind {kind!r}")


def draw_plan(rng: random.Random, *, kinds: tuple[str, ...] = KINDS, most: int = 3) -> FaultPlan:
    """Up to ``most`` faults of the given kinds (a tenth of seeds get none: the control)."""
    if rng.random() < 0.1:
        return FaultPlan([])
    n = rng.randint(1, most)
    chosen = [rng.choice(kinds) for _ in range(n)]
    return FaultPlan(sorted((_draw_one(k, rng) for k in chosen), key=lambda f: f.at))


class Nemesis:
    """Applies a :class:`FaultPlan` to a :class:`~crawler.testing.sim.world.World`."""

    def __init__(self, world: "World", plan: FaultPlan) -> None:
        self.world = world
        self.plan = plan
        self.injected: dict[str, int] = {}

    def arm(self) -> None:
        clock = self.world.clock
        for fault in self.plan.faults:
            if fault.kind == "clock_skew":
                self._apply(fault)  # from the start
            else:
                clock.call_later(fault.at, partial(self._apply, fault))

    def _count(self, kind: str) -> None:
        self.injected[kind] = self.injected.get(kind, 0) + 1

    def _pick(self, items: list[Any], index: int) -> Any:
        return items[index % len(items)] if items else None

    def _stop(self, process: Any, duration: float) -> None:
        """SIGSTOP ``process`` for ``duration`` seconds (a pause, or a loop blocked that long)."""
        cluster = self.world.cluster
        cluster.record("stopped", process.name, f"{duration:.1f}s")
        process.stop()

        def cont() -> None:
            cluster.record("continued", process.name)
            process.cont()

        self.world.clock.call_later(duration, cont)

    def _apply(self, fault: Fault) -> None:
        w = self.world
        cluster, clock, kind = w.cluster, w.clock, fault.kind
        cluster.record("fault", kind, fault.describe())
        self._count(kind)
        if kind == "driver_stall":
            driver = w.driver
            if driver is not None:
                self._stop(driver, fault.duration)
        elif kind == "driver_kill":
            w.kill_driver(resubmit_after=fault.get("resubmit_after"), stall_first=fault.get("stalled_first"))
        elif kind in ("shard_crash", "loop_block"):
            shard = self._pick(w.shard_actors(), fault.get("shard"))
            if shard is None or shard.current is None:
                return
            if kind == "shard_crash":
                cluster.crash(shard)
            else:
                self._stop(shard.current.process, fault.duration)
        elif kind == "machine_loss":
            machine = self._pick(w.workers, fault.get("machine"))
            if machine is None or not machine.up:
                return
            cluster.lose_machine(machine, wipe_disk=fault.get("wipe_disk"))
            clock.call_later(fault.duration, lambda: cluster.restore_machine(machine))
        elif kind == "partition":
            machine = self._pick(w.workers, fault.get("machine"))
            if machine is not None and not machine.partitioned:
                cluster.partition(machine, fault.duration)
        elif kind == "service_crash":
            actor = w.service_actor(fault.get("service"))
            if actor is not None:
                cluster.crash(actor)
        elif kind in ("store_put", "store_get", "store_list"):
            faults = StoreFaults(**{k: v for k, v in fault.params})
            w.store.faults = faults
            clock.call_later(fault.duration, lambda: w.heal_store(faults))
        elif kind == "clock_skew":
            rng = random.Random(w.seed ^ 0x5EED)
            for m in w.cluster.machines.values():
                m.wall_offset_s = rng.uniform(-fault.get("max_offset_s"), fault.get("max_offset_s"))
                m.rate = 1.0 + rng.uniform(-fault.get("max_drift"), fault.get("max_drift"))
        elif kind == "clock_jump":
            machine = self._pick(list(w.cluster.machines.values()), fault.get("machine"))
            if machine is not None:
                machine.wall_offset_s += fault.get("step_s")
        elif kind == "slow_web":
            w.web.slow_s = fault.get("slow_s")
            clock.call_later(fault.duration, lambda: setattr(w.web, "slow_s", 0.0))
