"""The Ray runtime of a crawl session: shards and shared services as actors.

Ray plumbing only: which actors exist, where they are placed, and how a call reaches
them. The crawl logic is the session (crawler.session.crawlsession) and the shards (crawler.engine.assembly).
Ray is joined at ``--address`` / ``runtime.address`` / ``RAY_ADDRESS`` when given;
otherwise an embedded, loopback-only, quiet Ray is started and shut down with the crawl.
The start never waits in silence (docs/invariants.md #17): settings the cluster cannot hold
are refused before any actor exists, the render pool is sized from what the shards
leave (crawler.render.sizing), and every actor is placed within a few seconds or the
run says what is short (actors/placement.py). Ctrl-C stops a start at once.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import threading
import time
import uuid
from functools import partial
from typing import Any, Awaitable, Iterator

from crawler.recovery import stamps, statefiles as state
from crawler.recovery.copyschedule import CopySchedule
from crawler.config.sections import RuntimeConfig
from crawler.config.settings import CrawlConfig, resolve_shards
from crawler.config.typed import to_dict
from crawler.session.inprocess import seen_capacity_per_shard
from crawler.session.runtime import Plan
from crawler.services.contentindex import CONTENT_LOG
from crawler.session.shardcalls import ShardCalls, merge_seen_stats
from crawler.placement.topology import Topology
from crawler.engine.shardapi import ShardApi
from crawler.engine.status import ShardStatus
from crawler.errors import ShardFailedError
from crawler.render.sizing import ClusterCpus, RenderPlan, check_shards_fit, plan_render_pool
from actors.rayclasses import remote_class
from actors.placement import Pending, cluster_cpus, render_unplaced, reserve, reserved, wait_placed

log = logging.getLogger(__name__)

#: How long a status round may take before the view counts as inconsistent (a restart).
STATUS_TIMEOUT_S = 30.0
#: How long shards get to flush and close at the end.
STOP_TIMEOUT_S = 120.0
#: How long one heartbeat round waits for the shards' answers (RayRuntime.heartbeat).
HEARTBEAT_WAIT_S = 0.2


def _retrieve(fut: "asyncio.Future[Any]") -> None:
    if not fut.cancelled() and fut.exception() is not None:
        log.debug("late heartbeat failed: %r", fut.exception())


def init_ray(address: str | None = None, *, num_cpus: int | None = None, temp_dir: str | None = None) -> bool:
    """Connect to a cluster, or start an embedded loopback Ray. Returns True if we started it.

    The embedded Ray binds to 127.0.0.1, starts no dashboard (it costs seconds and ~1 GB
    here; clusters started with ``ray up`` have their own) and sends nothing off the
    machine: no usage stats, no cloud metadata probe (actors.quietray; docs/invariants.md #18).
    """
    import ray

    from actors import quietray

    if ray.is_initialized():
        return False
    address = address or os.environ.get("RAY_ADDRESS") or None
    if address:
        ray.init(address=address, log_to_driver=False, logging_level=logging.WARNING)
        return False
    with quietray.quiet_head():
        ray.init(
            **quietray.INIT_KWARGS,
            num_cpus=num_cpus,
            log_to_driver=False,
            logging_level=logging.WARNING,
            configure_logging=True,
            **({"_temp_dir": temp_dir} if temp_dir else {}),
        )
    return True


@contextlib.contextmanager
def _ctrl_c_interrupts() -> Iterator[None]:
    """Ctrl-C raises KeyboardInterrupt at once inside the block, event loop or not.

    Starting an embedded Ray blocks its thread for seconds (tens on a busy machine); the
    driver's loop cannot run its Ctrl-C handler meanwhile, so a Ctrl-C would wait for the
    whole start. A Python-level handler runs between bytecodes even there; what Ray had
    started dies with the driver (its processes share the driver's fate)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    before = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, before)


def _ship(actor: Any, wall: float, schedule: CopySchedule, final: bool) -> Awaitable[None]:
    ship: Awaitable[None] = actor.ship.remote(wall, schedule, final)
    return ship


class RayRuntime(ShardCalls):
    """Runs a session's shards as HostShard actors and its services as actors."""

    def __init__(self, address: str | None = None) -> None:
        self.address = address
        self._owns_ray = False
        self.shards: dict[str, Any] = {}
        self.seen_actors: list[Any] = []
        self.content_actor: Any = None
        self.budget_actor: Any = None
        self._copies = CopySchedule.of(RuntimeConfig())  # the crawl's, once started
        self.crawl_name = ""
        self._seen: Any = None
        self.render_workers: list[Any] = []
        self.render_pool: dict[str, Any] | None = None  # the pool's size, or why there is none
        self._render_group: Any = None  # the render workers' placement group
        self._placed = False  # every actor of start() placed and created

    def _ray(self) -> Any:
        import ray

        if not ray.is_initialized():
            with _ctrl_c_interrupts():
                self._owns_ray = init_ray(self.address)
        return ray

    def default_shards(self, cfg: CrawlConfig) -> tuple[int, int]:
        """(shards, seen shards) for a new crawl; shard counts or render settings the
        cluster cannot hold at all are refused here (ConfigError), before anything starts."""
        self._ray()
        cluster = cluster_cpus()
        n = resolve_shards(cfg.runtime.shards, int(cluster.total or 2))
        self._render_plan(cfg, n, cluster)
        return n, resolve_shards(cfg.runtime.seen_shards, int(cluster.total or 2))

    def _render_plan(self, cfg: CrawlConfig, shards: int, cluster: ClusterCpus) -> RenderPlan | None:
        """crawler.render.sizing's plan (None: no rendering); the shards' fit checked either way."""
        from actors.host_shard import SHARD_CPUS

        if cfg.render.mode == "never":
            check_shards_fit(cluster, shards, SHARD_CPUS)
            return None
        return plan_render_pool(cfg.render, cluster, shards=shards, shard_cpus=SHARD_CPUS)

    async def start(self, plan: Plan) -> None:
        """Create the SeenFilter group, the content index, the budget, the render pool and
        the HostShards (restartable, named, spread over nodes), and wait until every one is
        placed (actors/placement.py); each shard reopens its durable store."""
        self._ray()
        from actors.host_shard import HostShard, shard_actor_name
        from actors.serviceactors import Budget, ContentIndexActor, SeenFilter, SeenGroupClient

        # plan.state_dir is a spec each actor resolves on its own node (crawler.recovery.statefiles.here):
        # with a remote output every node keeps its files on its own disk.
        cfg, sdir = plan.cfg, plan.state_dir
        d, rt = cfg.dedup, cfg.runtime
        self._copies = CopySchedule.of(rt)
        render_plan = self._render_plan(cfg, len(plan.shard_ids), cluster_cpus())  # before any actor
        cap = seen_capacity_per_shard(cfg, plan.seen_shards)
        restart = {"max_restarts": rt.max_restarts}
        out, opts = cfg.output.path, dict(cfg.output.storage_options) or None
        remote = (out, opts) if sdir and state.is_remote(out) else None
        crawl = plan.crawl_id if sdir else None  # each state file is stamped with it (crawler.recovery.stamps)
        self.seen_actors = [
            remote_class(SeenFilter).options(**restart).remote(
                cap, d.seen_error_rate, d.seen_exact, d.seen_bloom, os.path.join(sdir, f"seen-{i:03d}.sqlite") if sdir else None,
                (out, opts, state.seen_name(i, d.seen_exact)) if remote else None, i, stamps.part(crawl, stamps.seen_part(i)),
            )
            for i in range(plan.seen_shards)
        ]
        self._seen = SeenGroupClient(self.seen_actors)
        self.content_actor = remote_class(ContentIndexActor).options(**restart).remote(
            d.simhash_distance, d.simhash_tables, os.path.join(sdir, CONTENT_LOG) if sdir else None,
            rt.content_snapshot_interval_s, remote, rt.content_shards, restart, crawl,
        )
        self.budget_actor = remote_class(Budget).options(**restart).remote(
            cfg.limits.max_pages, os.path.join(sdir, "budget.json") if sdir else None, remote,
            stamps.part(crawl, stamps.BUDGET_PART), (out, opts),
        )
        self.crawl_name = f"raycrawl-{cfg.fingerprint()}-{uuid.uuid4().hex[:6]}"
        cfg_dict = to_dict(cfg)
        ids = list(plan.shard_ids)
        if render_plan is not None:
            self.render_workers = await self._start_render(render_plan, cfg_dict, restart)
        topology = Topology.of(ids, rt.regions, cfg.placement.default_region)

        def placement(sid: str) -> dict[str, Any]:
            # With regions a shard runs on a node labelled with its region (ray start
            # --labels region=...); the services stay unlabelled and go anywhere (one
            # seen/content/budget call per batch, not per request: distance costs little).
            region = topology.region_of_shard(sid)
            return {"label_selector": {"region": region}} if region else {"scheduling_strategy": "SPREAD"}

        self.shards = {
            sid: remote_class(HostShard).options(**placement(sid), name=shard_actor_name(self.crawl_name, sid), **restart).remote(
                cfg_dict, sid, ids, self.seen_actors, self.content_actor, self.budget_actor, list(plan.seeds),
                self.crawl_name, sdir, plan.epoch, self.render_workers, plan.after_crash, crawl,
            )
            for sid in ids
        }
        await wait_placed(self._placing(topology))
        self._placed = True
        await asyncio.gather(*(s.set_peers.remote(self.shards) for s in self.shards.values()))
        await asyncio.gather(*(s.start.remote() for s in self.shards.values()))

    def _placing(self, topology: Topology) -> list[Pending]:
        """Every actor start() made but the render workers (their CPUs are reserved)."""
        from actors.host_shard import SHARD_CPUS

        services = [("seen-%03d" % i, a) for i, a in enumerate(self.seen_actors)]
        services += [("content", self.content_actor), ("budget", self.budget_actor)]
        out = [Pending(name, a, "service") for name, a in services]
        for sid, a in self.shards.items():
            region = topology.region_of_shard(sid)
            out.append(Pending(sid, a, "shard", SHARD_CPUS, {"region": region} if region else {}))
        return out

    async def _start_render(self, plan: RenderPlan, cfg_dict: dict[str, Any], restart: dict[str, Any]) -> list[Any]:
        """The render workers of ``plan`` in their reserved bundles; none (said in one
        line, and in the stats) when the plan has none or its CPUs cannot be reserved."""
        from ray.util import remove_placement_group
        from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

        from actors.render import RenderWorker, render_actor_name

        self.render_pool = {"actors": plan.actors, "cpus_each": plan.cpus_each, "off": plan.off or None}
        if not plan.actors:
            log.warning("%s", plan.off)
            return []
        self._render_group = reserve(plan, f"{self.crawl_name}:render")
        if not await reserved(self._render_group):
            off = render_unplaced(plan, cluster_cpus())
            remove_placement_group(self._render_group)
            self._render_group = None
            self.render_pool = {"actors": 0, "cpus_each": 0.0, "off": off}
            log.warning("%s", off)
            return []
        log.info("%s", plan.describe())
        return [
            remote_class(RenderWorker).options(
                num_cpus=plan.cpus_each, name=render_actor_name(self.crawl_name, i), **restart,
                scheduling_strategy=PlacementGroupSchedulingStrategy(self._render_group, placement_group_bundle_index=i),
            ).remote(cfg_dict)
            for i in range(plan.actors)
        ]

    async def heartbeat(self) -> None:
        """Beat every shard; wait at most HEARTBEAT_WAIT_S for the answers.

        One slow shard (a loop busy resuming, a worker starting on a loaded machine) must
        not hold up the beat to the others, nor the lease renewal the session does after
        this call: the shards' ``driver_timeout_s`` and the lease's TTL are seconds.
        """
        futures = [asyncio.wrap_future(s.heartbeat.remote().future()) for s in self.shards.values()]
        for fut in futures:  # an answer or error is read when it comes, late or not
            fut.add_done_callback(_retrieve)
        if futures:
            await asyncio.wait(futures, timeout=HEARTBEAT_WAIT_S)

    async def ship_state(self, final: bool = False) -> None:
        wall = time.time()
        from actors.serviceactors import call_service

        actors = [a for a in (*self.seen_actors, self.content_actor, self.budget_actor) if a is not None]
        schedule = self._copies
        # Each actor's ship is idempotent: one restarting is waited for, not a failed stop.
        await asyncio.gather(*(call_service(partial(_ship, a, wall, schedule, final), "copying a service's state")
                               for a in actors))

    async def seen_check(self, urls: list[str]) -> list[bool]:
        return list(await self._seen.check_and_add(urls))

    async def seen_forget(self, urls: list[str]) -> int:
        return int(await self._seen.forget(urls))

    async def seen_keys(self, index: int, after: int | None, limit: int) -> list[int]:
        from actors.serviceactors import call_service

        actor = self.seen_actors[index]  # a page read, safe to ask again of a restarted actor
        return await call_service(lambda: actor.key_page.remote(after, limit), f"seen shard {index}")

    async def seen_forget_keys(self, index: int, keys: list[int]) -> int:
        from actors.serviceactors import call_service

        actor = self.seen_actors[index]  # forgetting twice forgets nothing more
        return await call_service(lambda: actor.forget_hashes.remote(keys), f"seen shard {index}")

    def _shards(self) -> dict[str, ShardApi]:
        from actors.shardproxy import RayShard

        return {sid: RayShard(h, sid) for sid, h in self.shards.items()}

    def _patient(self, shard_id: str) -> ShardApi:
        # A shard restarting after its node was lost: wait for it (it comes back from OUT).
        from actors.serviceactors import SERVICE_RETRY_S
        from actors.shardproxy import RayShard

        return RayShard(self.shards[shard_id], shard_id, give_up_s=SERVICE_RETRY_S)

    async def statuses(self) -> list[ShardStatus] | None:
        from ray.exceptions import RayActorError

        try:
            return list(
                await asyncio.wait_for(asyncio.gather(*(s.status() for s in self._shards().values())), STATUS_TIMEOUT_S)
            )
        except (RayActorError, asyncio.TimeoutError) as exc:
            self._check_alive()
            log.warning("a shard did not answer (restarting?): %s", type(exc).__name__)
            return None

    def _check_alive(self) -> None:
        """Raise ShardFailedError for a shard that is gone for good (out of restarts, or its
        constructor failing every time): Ray drops a dead actor's name, while a restarting
        one keeps it. A session that only waited would wait forever."""
        import ray

        from actors.host_shard import shard_actor_name

        for sid in self.shards:
            try:
                ray.get_actor(shard_actor_name(self.crawl_name, sid))
            except ValueError as exc:
                raise ShardFailedError(f"{sid} is dead for good (Ray restarted it runtime.max_restarts times): {exc}") from exc

    async def stop(self) -> list[ShardStatus]:
        finals = await asyncio.wait_for(
            asyncio.gather(*(s.shutdown() for s in self._shards().values())), STOP_TIMEOUT_S
        )
        if self.content_actor is not None:
            await self.content_actor.save.remote()
        if self.render_workers:  # their browsers, before the actors go
            await asyncio.gather(*(w.close.remote() for w in self.render_workers), return_exceptions=True)
        return list(finals)

    async def service_stats(self) -> dict[str, Any]:
        seen = merge_seen_stats(await asyncio.gather(*(a.stats.remote() for a in self.seen_actors)))
        content = await self.content_actor.stats.remote() if self.content_actor is not None else {}
        return {"seen": seen, "content": content, "render_pool": self.render_pool}

    async def close(self) -> None:
        """Close the seen stores, kill our actors, and the embedded Ray if we started it."""
        import ray

        if not ray.is_initialized():
            return
        if self.seen_actors and self._placed:
            # Before every actor was placed nothing was seeded, so nothing is marked seen:
            # a start stopped by Ctrl-C does not wait for seen actors still being created.
            await asyncio.gather(*(a.close.remote() for a in self.seen_actors), return_exceptions=True)
        for a in [*self.shards.values(), *self.seen_actors, self.content_actor, self.budget_actor, *self.render_workers]:
            if a is not None:
                try:
                    ray.kill(a)
                except Exception as exc:  # noqa: BLE001 - already gone is fine at shutdown
                    log.debug("kill failed: %r", exc)
        self.shards, self.seen_actors, self.content_actor, self.budget_actor = {}, [], None, None
        self.render_workers = []
        if self._render_group is not None:
            from ray.util import remove_placement_group

            remove_placement_group(self._render_group)
            self._render_group = None
        self._placed = False
        if self._owns_ray:
            ray.shutdown()
            self._owns_ray = False
