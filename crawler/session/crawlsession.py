"""One crawl session for both runtimes: seed, resume or refuse, stats, host policy,
per-URL status and stop.

A :class:`CrawlSession` runs over a :class:`Runtime`, the small interface to the crawl's
services (the seen group, the shards and, through them, the content index and the page
budget). ``crawler.session.inprocess.LocalRuntime`` runs every shard in this process;
``actors.rayruntime.RayRuntime`` runs them as actors. The CLI, ``python -m jobs.crawl``, the
notebook and the HTTP control API are thin layers over this class, so the two runtimes
cannot drift apart: there is one implementation of each of these operations.

Order of a run (:meth:`CrawlSession.run`):

1. take the output's lease (crawler.recovery.lease: one run per output, a fencing epoch), then
   decide new / resume / finished / refuse from ``OUT/state/crawl.json``
   (crawler.recovery.crawlrecord); a resumed crawl keeps its shard counts (hosts belong to shards);
2. start the runtime: each shard reopens its durable store and resumes from it;
3. seed (seeds already seen are dropped, so re-seeding a resumed crawl is harmless);
4. poll every shard until termination is proven (crawler.session.termination) or a stop is asked;
   with ``recrawl.enabled`` there is no "done": nothing due now is not done, and the
   crawl runs until ``recrawl.duration_s`` passes or it is stopped;
5. stop the shards (rows flushed and acked), write ``stats.json`` with the URL ledger
   (crawler.session.ledger), compact, mark the crawl finished if it is, and release the lease.

While it runs, a heartbeat (crawler.session.heartbeat) tells the shards the driver is
alive and renews the lease; if another run took the lease, this one stops (it is fenced).
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any, Awaitable, Callable

from crawler.session import ledger, ledgeraudit
from crawler.clock import SYSTEM_CLOCK, Clock
from crawler.config.settings import CrawlConfig
from crawler.configcheck import all_seeds, check_components
from crawler.session.crawlstats import CrawlTotals, crawl_stats, merge_status, merge_totals, read_stats, write_stats
from crawler.errors import ConfigError, ServiceUnavailableError, ShardFailedError, StorageError
from crawler.placement.topology import Topology, shard_ids
from crawler.recovery.lease import Holder, Lease, LeaseStore
from crawler.output import compact_pages
from crawler.recovery.crawlrecord import CrawlRecord, crawl_state_dir, mark_finished, prepare
from crawler.session.runtime import Plan, Runtime
from crawler.engine.status import ShardStatus
from crawler.events.sinks import sink_factory
from crawler.session.preflight import Preflight, check_local_state
from crawler.recovery.stamps import crawl_id
from crawler.recovery.statefiles import here, is_remote
from crawler.session.heartbeat import DriverHeartbeat
from crawler.session.steering import Steering
from crawler.session.termination import TerminationDetector

log = logging.getLogger(__name__)


class CrawlSession:
    """One crawl, start to stop (see the module docstring for the order of a run).

    Args:
        cfg: the crawl config (seeds are validated at once: bad seeds fail here).
        runtime: where shards run.
        shards: shard count for a new crawl (default: the runtime's choice).
        force: start over in an output folder holding a crawl of another config.
        durable: keep state in ``OUT/state`` (off: nothing to resume, for benchmarks).
        clock: the poll timer's clock.
        on_progress: called with crawl-wide totals after every poll.
        on_start: called once the mode is known and the shards run (CLI messages).
        run_blocking: runs the lease's blocking I/O (default: a worker thread; the fault
            simulator passes its driver process's, crawler.testing.sim).
        holder: who takes the output's lease (default: this process on this machine).
    """

    def __init__(
        self,
        cfg: CrawlConfig,
        runtime: Runtime,
        *,
        shards: int | None = None,
        force: bool = False,
        durable: bool = True,
        clock: Clock = SYSTEM_CLOCK,
        poll_interval_s: float = 0.05,
        on_progress: Callable[[CrawlTotals], None] | None = None,
        on_start: Callable[["CrawlSession"], None] | None = None,
        run_blocking: Callable[..., Awaitable[Any]] = asyncio.to_thread,
        holder: Holder | None = None,
    ) -> None:
        self.cfg = cfg
        self.runtime = runtime
        check_components(cfg)  # each component's slice, before anything starts
        self.seeds = all_seeds(cfg)
        if not self.seeds:
            raise ConfigError("seeds: no seed URLs (set seeds: [...] or seeds_file:)")
        sink_factory(cfg.events)  # a plug-in sink that cannot be loaded fails here, not in a shard
        self._shards = shards
        self._force = force
        self._durable = durable
        self.clock = clock
        self.poll_interval_s = poll_interval_s
        self.on_progress = on_progress
        self.on_start = on_start
        self._run_blocking = run_blocking
        self._holder = holder
        self.mode = "new"
        self.record: CrawlRecord | None = None
        self.topology: Topology | None = None
        self.detector = TerminationDetector()
        self.resumed = 0
        self.started_at: float | None = None
        self.final: dict[str, Any] | None = None
        self.last_total = CrawlTotals()
        self._stop_requested = False
        self._started = False
        self.ready = False
        self.lease: Lease | None = None
        self.ended = "stopped"  # why wait() returned: finished, duration or stopped
        self.fenced: str | None = None
        self.preflight: Preflight | None = None  # what the check of a local output's state did
        self._heartbeat_task: asyncio.Future[None] | None = None
        self.steering = Steering(cfg, runtime, self._owner, self.detector)

    # -- lifecycle ------------------------------------------------------------------

    async def start(self) -> str:
        """Steps 1-3 of a run. Returns the mode: "new", "resume" or "finished"."""
        n, n_seen = self.runtime.default_shards(self.cfg)
        if self._shards is not None:
            n = self._shards
        sdir = None
        epoch = None
        if self._durable:
            self.lease = Lease(LeaseStore(self.cfg.output.path, self._options()), self.cfg.runtime.lease_ttl_s,
                               clock=self.clock, run_blocking=self._run_blocking, holder=self._holder)
            epoch = await self.lease.acquire()
            # Renewed (and the shards told the driver lives) from now on: starting the
            # runtime can take longer than runtime.lease_ttl_s on a busy or cold cluster.
            self._heartbeat_task = asyncio.ensure_future(self._heartbeat().run())
            try:
                self.record, self.mode = prepare(self.cfg, n, n_seen, force=self._force)
            except BaseException:
                self._heartbeat_task.cancel()
                self.lease.release()
                raise
            if self.mode == "finished":
                self._heartbeat_task.cancel()
                self.lease.release()
                self.final = {**read_stats(self.cfg), "finished": True, "already_finished": True}
                if self.on_start is not None:
                    self.on_start(self)
                return self.mode
            n, n_seen = self.record.shards, self.record.seen_shards
            sdir = crawl_state_dir(self.cfg)
        ids = shard_ids(n, self.cfg.runtime.regions)
        self.topology = Topology.of(ids, self.cfg.runtime.regions, self.cfg.placement.default_region)
        crawl = crawl_id(self.record.fingerprint, self.record.started_at) if self.record is not None else None
        if sdir is not None:  # foreign or damaged state: one line now, before anything opens it
            self.preflight = await self._run_blocking(check_local_state, self.cfg, here(sdir), ids, n_seen, crawl,
                                                      self.seeds)
        self._started = True
        after_crash = self.lease is not None and self.lease.took_over
        await self.runtime.start(Plan(self.cfg, ids, n_seen, sdir, tuple(self.seeds), epoch,
                                      after_crash=after_crash, crawl_id=crawl))
        self.ready = True  # the shards run: steering calls reach them from now on
        if self._heartbeat_task is None:
            self._heartbeat_task = asyncio.ensure_future(self._heartbeat().run())
        self.started_at = self.clock.now()
        if self.mode == "resume":
            self.resumed = sum(s.resumed for s in await self.runtime.statuses() or [])
            log.info("resuming the unfinished crawl in %s: %d URLs were queued", self.cfg.output.path, self.resumed)
        if self.on_start is not None:
            self.on_start(self)
        await self.steering.seed(self.seeds)
        return self.mode

    async def run(self) -> dict[str, Any]:
        """A whole run (module docstring); returns the final stats."""
        try:
            if await self.start() == "finished":
                assert self.final is not None
                return self.final
            return await self.wait()
        finally:
            if self.final is None:  # failed: release what this run holds
                if self._heartbeat_task is not None:
                    self._heartbeat_task.cancel()
                if self._started:
                    await self.runtime.close()
                if self.lease is not None and self.lease.record is not None:
                    self.lease.release()

    async def wait(self, timeout_s: float | None = None) -> dict[str, Any]:
        """Poll until termination is proven, a stop is requested, or ``timeout_s`` passes."""
        deadline = None if timeout_s is None else self.clock.now() + timeout_s
        duration = self.cfg.recrawl.duration_s if self.cfg.recrawl.enabled else None
        ends_at = None if duration is None else (self.started_at or self.clock.now()) + duration
        finished = False
        self.ended = "stopped"
        while not self._stop_requested:
            done = await self.poll()
            if done and not self.cfg.recrawl.enabled:
                finished = True
                self.ended = "finished"
                break
            if ends_at is not None and self.clock.now() >= ends_at:
                self.ended = "duration"
                break
            if deadline is not None and self.clock.now() > deadline:
                break
            await self.clock.sleep(self.poll_interval_s)
        return await self.stop(finished=finished)

    @property
    def stopping(self) -> bool:
        """True once a stop was requested (the control API then refuses changes)."""
        return self._stop_requested

    def request_stop(self) -> None:
        """Ask :meth:`wait` to stop at its next poll (safe from a signal handler)."""
        self._stop_requested = True

    async def poll(self) -> bool:
        """One termination check; True once the crawl is proven finished."""
        if self.final is not None:
            return True
        statuses = await self.runtime.statuses()
        if statuses is None:  # a shard restarting: no consistent view this round
            self.detector.reset()
            return False
        for st in statuses:
            if st.error:
                raise ShardFailedError(f"{st.shard} failed: {st.error}")
        self.last_total = merge_totals(statuses)
        if self.on_progress is not None:
            self.on_progress(self.last_total)
        return self.detector.observe(statuses)

    async def stop(self, *, finished: bool = False) -> dict[str, Any]:
        """Step 5 of a run: audit a finished crawl's seen marks (queueing its lost URLs
        again), stop the shards, write stats.json with the ledger; the stats.

        The verdict follows the ledger (DESIGN invariant 13): a crawl whose ledger does not
        balance is not finished (``unfinished_reason``), and stays resumable."""
        if self.final is not None:
            return self.final
        elapsed = self.clock.now() - (self.started_at or self.clock.now())
        marks = None
        if self.record is not None and self.topology is not None and self.fenced is None:
            # While the shards still run and hold the output: a lost URL goes back to its owner.
            marks = await ledgeraudit.marks_at_stop(
                self.runtime, self.cfg, self.seeds, self.topology.ids, self.record.seen_shards, self._owner, finished=finished,
                run_blocking=self._run_blocking,
            )
        lost = bool(marks and (marks.get("lost") or marks.get("failed")))
        finished = finished and not lost  # lost URLs are queued again: the next run fetches them
        finals = await self.runtime.stop()
        if self._heartbeat_task is not None:  # the lease stays renewed until the shards stopped
            self._heartbeat_task.cancel()
            await asyncio.gather(self._heartbeat_task, return_exceptions=True)
        if self.fenced is None and is_remote(self.cfg.output.path):
            try:
                await self.runtime.ship_state(final=True)
            except (StorageError, OSError, ServiceUnavailableError) as exc:
                # The copies in OUT are caches of the services' state (docs/invariants.md
                # #11): an older copy costs duplicate deliveries the stores refuse, never a
                # URL. The stop goes on; the ledger still judges the run.
                log.warning("copying the services' state to the output failed at the stop: %r", exc)
        services = await self.runtime.service_stats()
        stats = self._crawl_stats(finals, services, elapsed, finished)
        if lost:
            stats["unfinished_reason"] = "lost_urls"
        if finished and stats["events"].get("pending"):
            # Events the sink never took stay in the shards' logs: a crawl that still owes
            # them is not finished, so the next run on this output sends them.
            log.error("%d page.fetched events are still pending: the crawl stays unfinished", stats["events"]["pending"])
            finished = stats["finished"] = False
            stats["unfinished_reason"] = "events_pending"
        opts = self._options()
        if self.fenced is not None:
            # Another run owns the output now: write nothing more into it.
            await self.runtime.close()
            stats["fenced"] = self.fenced
            self.final = stats
            return stats
        led = ledger.for_run(self.cfg.output.path, opts, finals, stats["seen"], finished=finished, marks=marks)
        if led is not None and self.topology is not None:  # read from the stopped shards' stores
            await ledgeraudit.name_if_unaccounted(led, self.runtime, self.topology.ids, self.cfg.output.path, opts)
        await self.runtime.close()
        ledger.report(led)
        if finished and led is not None and not led["balanced"]:
            finished = stats["finished"] = False
            stats["unfinished_reason"] = "ledger"
        if finished:
            # Rows repeated across a crash or a retried delivery: leave each (url, content) once.
            stats["compacted_rows"] = compact_pages(self.cfg.output.path, opts)
        stats["ledger"] = led
        write_stats(self.cfg, stats)
        if finished and self.record is not None:
            mark_finished(self.cfg, self.record)
        if self.lease is not None:
            self.lease.release()
        self.final = stats
        return stats

    def _options(self) -> dict[str, Any] | None:
        return dict(self.cfg.output.storage_options) or None

    def _heartbeat(self) -> DriverHeartbeat:
        return DriverHeartbeat(self.cfg, self.runtime, self.clock, self.lease, self._run_blocking, self._fenced_off)

    def _fenced_off(self, why: str) -> None:
        """Another run took the output's lease: stop this one, writing nothing more."""
        self.fenced = why
        log.error("%s: stopping this run", why)
        self.request_stop()

    # -- stats ------------------------------------------------------------------------
    # (An operator's calls -- seeds, host policy, a host's or a URL's state -- are the
    # session's ``steering``: crawler.session.steering.Steering.)

    async def live_stats(self) -> dict[str, Any]:
        """The numbers of ``stats.json`` (what ``crawl stats`` shows), now; the final ones
        once the crawl stopped."""
        if self.final is not None:
            return self.final
        statuses = await self.runtime.statuses() or []
        services = await self.runtime.service_stats()
        elapsed = self.clock.now() - (self.started_at or self.clock.now())
        stats = self._crawl_stats(statuses, services, elapsed, False)
        total = merge_totals(statuses)
        # Not ended: ``ended`` says why a crawl stopped, and this one has not.
        stats.update(running=True, ended=None, in_flight=total.in_flight, hosts=total.hosts)
        stats.pop("config", None)
        return stats

    async def stats(self) -> dict[str, Any]:
        """Crawl-wide totals right now (or the final stats once stopped)."""
        if self.final is not None:
            return self.final
        return merge_status(await self.runtime.statuses() or [])

    # -- internals ------------------------------------------------------------------

    def _owner(self, host: str) -> str:
        assert self.topology is not None, "the session is not started"
        return self.topology.home_of(host)

    def _crawl_stats(self, finals: list[ShardStatus], services: dict[str, Any], elapsed: float, finished: bool) -> dict[str, Any]:
        return crawl_stats(
            self.cfg, finals, services, elapsed, finished=finished, ended=self.ended,
            seen_shards=self.record.seen_shards if self.record is not None else None,
            resumed=self.resumed, mode=self.mode,
        )
