"""One simulated crawl, start to finish, as a function of its seed.

A :class:`World` holds everything a seed decides: the synthetic web and its size, the
cluster (a head machine for the driver and the services, two or three workers for the
shards), the object store holding OUT, the crawl's config, and the nemesis's
:class:`~crawler.testing.sim.nemesis.FaultPlan`. :meth:`World.main` runs the crawl the
way an operator would on a real cluster: ``crawl run`` (a :class:`CrawlSession` over
:class:`~crawler.testing.sim.services.SimRuntime`, its exit status decided as
``python -m jobs.crawl`` decides it); when a run ends unfinished, or its driver dies, the
job is submitted again, until the crawl says it finished or :data:`MAX_RUNS` runs were
made. Faults happen in the first runs' time; the last runs have a healthy cluster, so a
crawl that cannot finish then has lost something.

Every source of nondeterminism comes from the seed: the event loop runs on simulated
time (crawler.testing.sim.loop), every component's ``random.Random`` is drawn from the
world's, and nothing runs in a thread. ``python -m benchmarks.simulate --seed N`` runs a
seed again, exactly (it fixes ``PYTHONHASHSEED`` too).
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import random
import tempfile
import time
from dataclasses import dataclass, field
from typing import Any

from crawler.clock import MockClock
from crawler.config import settings as config
from crawler.errors import REFUSALS, CrawlError
from crawler.recovery.lease import Holder
from crawler.session.crawlsession import CrawlSession
from crawler.session.ledger import exit_status
import crawler.testing.sim.loop as simloop
from crawler.testing.sim.cluster import Cluster, SimActor
from crawler.testing.sim.nemesis import FaultPlan, Nemesis, draw_plan
from crawler.testing.sim.nodes import Machine, Process
from crawler.testing.sim.objectstore import SimStore, StoreFaults
from crawler.testing.sim.services import SimRuntime
from crawler.testing.sim.web import SimWeb
from crawler.testing.fixtures import web_limits
from crawler.testing.web import USER_AGENT, SyntheticWeb

log = logging.getLogger(__name__)

#: Runs (job submissions) a seed may take to finish its crawl.
MAX_RUNS = 12
#: Simulated seconds a seed may take in all.
TIME_LIMIT_S = 4 * 3600.0
#: No fault starts after this (simulated seconds): later runs meet a healthy cluster.
QUIET_AFTER_S = 150.0


@dataclass
class RunRecord:
    """One job submission: how it ended, as the operator saw it."""

    number: int
    started: float
    ended: float | None = None
    exit: int | None = None  # None: the driver was killed
    error: str | None = None
    finished: bool = False
    ledger: dict[str, Any] | None = None
    stats: dict[str, Any] | None = None
    marked_finished: bool = False  # OUT/state/crawl.json says finished after the run


@dataclass
class Shape:
    """The size of a seed's world."""

    hosts: int
    shards: int
    seen_shards: int
    workers: int


@dataclass
class SimResult:
    """What a seed did and what the checker found."""

    seed: int
    plan: str
    faults: dict[str, int]
    runs: list[RunRecord]
    violations: list[str]
    sim_seconds: float
    cpu_seconds: float
    requests: int
    trace_digest: str
    events: list[tuple[float, str, str, str]] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.violations


def draw_shape(rng: random.Random) -> Shape:
    return Shape(hosts=rng.randint(3, 6), shards=rng.randint(1, 3), seen_shards=rng.randint(1, 2), workers=rng.randint(2, 3))


def crawl_config(web: SyntheticWeb, out: str) -> dict[str, Any]:
    """The crawl's config: the synthetic web's test settings (crawler.testing.fixtures),
    everything else -- leases, timeouts, flush windows, snapshots -- at its default."""
    prof = web.profile
    return {
        "seeds": web.seeds(),
        "scope": "any",
        "user_agent": USER_AGENT,
        "urls": {"follow_rel_nofollow": False},
        "limits": web_limits(web),
        "politeness": {"interval_s": 0.25, "max_interval_s": 2.0},
        "fetch": {"timeout_s": prof.fetch_timeout, "connect_timeout_s": prof.fetch_timeout, "attempts": 3,
                  "backoff_s": 1.0, "max_backoff_s": 2.0},
        "output": {"path": out},
    }


class World:
    """One seed's simulated crawl (see the module docstring).

    Args:
        seed: decides everything.
        plan: the faults (default: drawn from the seed).
        shape: the sizes (default: drawn from the seed).
        root: a folder for the machines' disks (default: a temporary folder).
    """

    def __init__(self, seed: int, root: str, *, plan: FaultPlan | None = None, shape: Shape | None = None) -> None:
        self.seed = seed
        self.rng = random.Random(seed)
        self.clock = MockClock(start=0.0, wall_start=1_800_000_000.0)
        self.shape = shape or draw_shape(self.rng)
        self.plan = plan if plan is not None else draw_plan(random.Random(self.rng.random()))
        self.store = SimStore(f"sim{seed}-{hashlib.sha1(root.encode()).hexdigest()[:8]}", self.clock.now,
                              random.Random(self.rng.random()))
        self.web = SimWeb(SyntheticWeb(seed=seed % 1000, profile="test", hosts=self.shape.hosts), self.clock,
                          random.Random(self.rng.random()))
        io_rng = random.Random(self.rng.random())
        self.cluster = Cluster(self.clock, random.Random(self.rng.random()), root=root,
                               io_latency=lambda what: io_rng.uniform(0.001, 0.02))
        self.head = self.cluster.machine("head")
        self.workers: list[Machine] = [self.cluster.machine(f"w{i}") for i in range(1, self.shape.workers + 1)]
        self.out = self.store.url("out")
        self.cfg = config.from_dict(crawl_config(self.web.web, self.out))
        self.nemesis = Nemesis(self, self.plan)
        self.runs: list[RunRecord] = []
        self.driver: Process | None = None
        self.runtime: SimRuntime | None = None
        self._driver_killed: asyncio.Event | None = None
        self._resubmit_after = 0.0

    # -- what the nemesis reaches ----------------------------------------------------------

    def shard_actors(self) -> list[SimActor]:
        return list(self.runtime.shards.values()) if self.runtime is not None else []

    def service_actor(self, name: str) -> SimActor | None:
        rt = self.runtime
        if rt is None:
            return None
        if name == "seen":
            return rt.seen_actors[0] if rt.seen_actors else None
        return rt.content if name == "content" else rt.budget

    def heal_store(self, faults: StoreFaults) -> None:
        if self.store.faults is faults:
            self.store.faults = StoreFaults()

    def kill_driver(self, *, resubmit_after: float, stall_first: bool) -> None:
        """The driver dies (after a stall, if ``stall_first``); the job is resubmitted later.
        Ray ends the job's actors soon after, except those it cannot reach (zombies)."""
        driver, runtime = self.driver, self.runtime
        if driver is None or runtime is None or not driver.running and driver.state == "dead":
            return

        def kill() -> None:
            driver.kill()
            self.cluster.record("driver_killed", driver.name)
            if self._driver_killed is not None:
                self._driver_killed.set()

            def fate() -> None:
                for actor in runtime.actors():
                    inc = actor.current
                    if inc is not None and not inc.process.machine.partitioned:
                        self.cluster.kill_actor(actor)
                    else:
                        actor.dead = True  # a zombie until its partition heals
                        actor.lose_current()

            self.clock.call_later(self.cluster.rng.uniform(0.2, 2.0), fate)

        self._resubmit_after = resubmit_after
        if stall_first:
            self.cluster.record("stopped", driver.name, "until killed")
            driver.stop()
            self.clock.call_later(min(20.0, resubmit_after / 2), kill)
        else:
            kill()

    # -- running ---------------------------------------------------------------------------

    async def main(self) -> None:
        self.nemesis.arm()
        for number in range(1, MAX_RUNS + 1):
            record = RunRecord(number, self.clock.now())
            self.runs.append(record)
            await self._one_run(record)
            if record.exit == 0 and (record.finished or (record.stats or {}).get("already_finished")):
                return
            if record.exit is None:
                await self.clock.sleep(self._resubmit_after)
            elif self.clock.now() < QUIET_AFTER_S:
                await self.clock.sleep(5.0)  # the operator resubmits the unfinished job
            else:
                await self.clock.sleep(16.0)  # past the faults: give a dead run's lease time to lapse

    async def _one_run(self, record: RunRecord) -> None:
        number = record.number
        driver = self.cluster.process(f"driver#{number}", self.head)
        self.driver = driver
        runtime = SimRuntime(self.cluster, driver, self.web, shard_machines=self.workers, service_machine=self.head,
                             shards=self.shape.shards, seen_shards=self.shape.seen_shards, run=number)
        self.runtime = runtime
        self._driver_killed = asyncio.Event()
        holder = Holder(self.head.name, number, self._driver_alive)
        session = CrawlSession(self.cfg, runtime, clock=driver.clock, run_blocking=driver.run_blocking, holder=holder)
        task = asyncio.ensure_future(session.run())
        killed = asyncio.ensure_future(self._driver_killed.wait())
        await asyncio.wait((task, killed), return_when=asyncio.FIRST_COMPLETED)
        killed.cancel()
        record.ended = self.clock.now()
        if task.done():
            driver.kill()  # the command exited: its pid is gone (the next run's lease sees it)
        if not task.done():
            task.add_done_callback(_quiet)
            record.error = "driver killed"
            return
        try:
            stats = task.result()
        except REFUSALS as exc:
            record.exit, record.error = 2, f"{type(exc).__name__}: {exc}"
            await self._close(runtime)
            return
        except CrawlError as exc:
            record.exit, record.error = 1, f"{type(exc).__name__}: {exc}"
            await self._close(runtime)
            return
        except Exception as exc:  # noqa: BLE001 - a bug of the crawler: the checker reports it
            record.exit, record.error = 1, f"internal error: {type(exc).__name__}: {exc}"
            log.exception("seed %d run %d: the driver failed", self.seed, number)
            await self._close(runtime)
            return
        record.stats = stats
        record.ledger = stats.get("ledger")
        record.finished = bool(stats.get("finished"))
        record.exit = exit_status(stats)
        record.marked_finished = self._marked_finished()

    def _driver_alive(self, number: int) -> bool:
        """Whether the driver of run ``number`` still runs (the lease's pid check)."""
        name = f"driver#{number}"
        return any(p.name == name and p.state != "dead" for p in self.head.processes)

    async def _close(self, runtime: SimRuntime) -> None:
        for actor in runtime.actors():
            self.cluster.kill_actor(actor)

    def _marked_finished(self) -> bool:
        try:
            data = json.loads(self.store.get("out/state/crawl.json"))
        except (FileNotFoundError, OSError, ValueError):
            return False
        return bool(data.get("finished"))


def _quiet(task: "asyncio.Future[Any]") -> None:
    if not task.cancelled():
        task.exception()


def run_seed(seed: int, *, plan: FaultPlan | None = None, shape: Shape | None = None, keep_events: bool = False) -> SimResult:
    """Run one seed's crawl and check it (crawler.testing.sim.checker)."""
    from crawler.testing.sim.checker import check

    cpu0 = time.process_time()
    with tempfile.TemporaryDirectory(prefix=f"raycrawl-sim-{seed}-") as root:
        world = World(seed, root, plan=plan, shape=shape)
        problems: list[str] = []
        try:
            simloop.run(world.main, world.clock, limit_s=TIME_LIMIT_S)
        except (simloop.SimDeadlock, simloop.SimTimeLimit, simloop.SimLivelock) as exc:
            problems.append(f"the simulation stopped: {exc}")
        world.store.faults = StoreFaults()  # the checker reads the store as it truly is
        try:
            problems.extend(check(world))
        finally:
            world.store.close()
        digest = hashlib.sha256(repr([(r.start, r.host, r.path_qs, r.process) for r in world.web.log]).encode()).hexdigest()[:16]
        return SimResult(
            seed=seed, plan=world.plan.describe(), faults=dict(world.nemesis.injected), runs=world.runs,
            violations=problems, sim_seconds=world.clock.now(), cpu_seconds=time.process_time() - cpu0,
            requests=len(world.web.log), trace_digest=digest, events=world.cluster.events if keep_events else [],
        )
