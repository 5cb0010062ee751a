"""One crawl session for both runtimes: seed, resume or refuse, stats, host policy,
per-URL status and stop.

A :class:`CrawlSession` runs over a :class:`Runtime`, the small interface to the crawl's
services (the seen group, the shards and, through them, the content index and the page
budget). ``crawler.local.LocalRuntime`` runs every shard in this process;
``actors.runtime.RayRuntime`` runs them as actors. The CLI, ``python -m jobs.crawl``, the
notebook and the HTTP control API are thin layers over this class, so the two runtimes
cannot drift apart: there is one implementation of each of these operations.

Order of a run (:meth:`CrawlSession.run`):

1. take the output's lease (crawler.lease: one run per output, a fencing epoch), then
   decide new / resume / finished / refuse from ``OUT/state/crawl.json``
   (crawler.resume); a resumed crawl keeps its shard counts (hosts belong to shards);
2. start the runtime: each shard reopens its durable store and resumes from it;
3. seed (seeds already seen are dropped, so re-seeding a resumed crawl is harmless);
4. poll every shard until termination is proven (crawler.termination) or a stop is asked;
5. stop the shards (rows flushed and acked), write ``stats.json`` with the URL ledger
   (crawler.ledger), compact, mark the crawl finished if it is, and release the lease.

While it runs, a heartbeat tells the shards the driver is alive and renews the lease;
if another run took the lease, this one stops (it is fenced).
"""

from __future__ import annotations

import asyncio
import json
import logging
from dataclasses import dataclass
from typing import Any, Callable, Protocol, Sequence

from crawler import ledger
from crawler.clock import SYSTEM_CLOCK, Clock
from crawler.config import CrawlConfig, to_dict
from crawler.errors import ConfigError
from crawler.frontier import UrlItem
from crawler.hashring import HashRing
from crawler.lease import Lease, LeaseStore
from crawler.state import is_remote
from crawler.output import OUTCOMES, compact_pages, open_fs
from crawler.resume import CrawlRecord, crawl_state_dir, mark_finished, prepare
from crawler.termination import TerminationDetector
from crawler.urls import host_key, validate_seed

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Plan:
    """What a runtime starts: the shards and seen shards of this crawl, and where state lives."""

    cfg: CrawlConfig
    shard_ids: tuple[str, ...]
    seen_shards: int
    state_dir: str | None
    seeds: tuple[str, ...]
    epoch: int | None = None  # the output lease's fencing epoch (None: no durable state)


class Runtime(Protocol):
    """The services a session needs; see crawler.local and actors.runtime."""

    def default_shards(self, cfg: CrawlConfig) -> tuple[int, int]:
        """(shards, seen shards) for a new crawl of ``cfg`` on this runtime."""

    async def start(self, plan: Plan) -> None:
        """Create the services and the shards; each shard resumes from its store."""

    async def heartbeat(self) -> None:
        """Tell every shard the driver is alive (shards of a silent driver stop fetching)."""

    async def ship_state(self) -> None:
        """With a remote output: copy the seen sets, content index and budget to OUT/state
        (the shards copy their own stores); a crawl can then resume on another machine."""

    async def seen_check(self, urls: list[str]) -> list[bool]:
        """Mark URLs seen; True for the ones that were new."""

    async def deliver(self, shard_id: str, items: list[UrlItem]) -> None:
        """Hand a batch to the shard that owns its hosts (queued durably on return)."""

    async def widen_scope(self, urls: list[str]) -> None:
        """Tell every shard about new seeds (scope ``host``/``domain`` grows with them)."""

    async def statuses(self) -> list[dict[str, Any]] | None:
        """Every shard's status, or None when there is no consistent view (a restart)."""

    async def set_host_policy(self, shard_id: str, host: str, interval_s: float | None, paused: bool | None) -> None: ...

    async def url_status(self, shard_id: str, url: str) -> dict[str, Any] | None: ...

    async def stop(self) -> list[dict[str, Any]]:
        """Stop every shard (rows flushed and acked); their final statuses, with ``store_counts``."""

    async def service_stats(self) -> dict[str, Any]:
        """``{"seen": {...}, "content": {...}}`` totals (after :meth:`stop`)."""

    async def close(self) -> None:
        """Release everything this runtime started."""


def merge_status(statuses: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Sum per-shard statuses into crawl-wide totals (for progress and stats.json)."""
    keys = ("queued", "in_flight", "in_transit", "hosts", "paused_hosts", "paused_urls")
    total: dict[str, Any] = {**dict.fromkeys(keys, 0), "counters": {}, "dropped": {}}
    for s in statuses:
        for k in keys:
            total[k] += s.get(k, 0)
        for section in ("counters", "dropped"):
            for k, v in s[section].items():
                total[section][k] = total[section].get(k, 0) + v
    total["shards"] = len(statuses)
    return total


def write_stats(cfg: CrawlConfig, stats: dict[str, Any]) -> str:
    """Write ``OUT/stats.json`` (through fsspec, so s3:// works); returns its path."""
    fs, root = open_fs(cfg.output.path, dict(cfg.output.storage_options) or None)
    path = f"{root.rstrip('/')}/stats.json"
    fs.makedirs(root, exist_ok=True)
    with fs.open(path, "w") as f:
        json.dump(stats, f, indent=2, sort_keys=True, default=str)
    return path


def read_stats(cfg: CrawlConfig) -> dict[str, Any]:
    """``OUT/stats.json`` (local or remote), or an empty dict."""
    fs, root = open_fs(cfg.output.path, dict(cfg.output.storage_options) or None)
    try:
        with fs.open(f"{root.rstrip('/')}/stats.json", "r") as f:
            return json.load(f)
    except (OSError, ValueError):
        return {}


def _log_missed_beat(task: asyncio.Future[None]) -> None:
    """A heartbeat round that failed (a shard restarting misses one beat): noted, not raised."""
    if not task.cancelled() and task.exception() is not None:
        log.debug("heartbeat: %r", task.exception())


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
        on_progress: Callable[[dict[str, Any]], None] | None = None,
        on_start: Callable[["CrawlSession"], None] | None = None,
    ) -> None:
        self.cfg = cfg
        self.runtime = runtime
        self.seeds = cfg.all_seeds()
        if not self.seeds:
            raise ConfigError("seeds: no seed URLs (set seeds: [...] or seeds_file:)")
        self._shards = shards
        self._force = force
        self._durable = durable
        self.clock = clock
        self.poll_interval_s = poll_interval_s
        self.on_progress = on_progress
        self.on_start = on_start
        self.mode = "new"
        self.record: CrawlRecord | None = None
        self.ring: HashRing | None = None
        self.detector = TerminationDetector()
        self.resumed = 0
        self.started_at: float | None = None
        self.final: dict[str, Any] | None = None
        self.last_total: dict[str, Any] = {}
        self._stop_requested = False
        self._started = False
        self.lease: Lease | None = None
        self.fenced: str | None = None
        self._heartbeat_task: asyncio.Future[None] | None = None

    # -- lifecycle ------------------------------------------------------------------

    async def start(self) -> str:
        """Steps 1-3 of a run. Returns the mode: "new", "resume" or "finished"."""
        n, n_seen = self.runtime.default_shards(self.cfg)
        if self._shards is not None:
            n = self._shards
        sdir = None
        epoch = None
        if self._durable:
            self.lease = Lease(LeaseStore(self.cfg.output.path, self._options()), self.cfg.runtime.lease_ttl_s)
            epoch = await asyncio.to_thread(self.lease.acquire)
            try:
                self.record, self.mode = prepare(self.cfg, n, n_seen, force=self._force)
            except BaseException:
                self.lease.release()
                raise
            if self.mode == "finished":
                self.lease.release()
                self.final = {**read_stats(self.cfg), "finished": True, "already_finished": True}
                if self.on_start is not None:
                    self.on_start(self)
                return self.mode
            n, n_seen = self.record.shards, self.record.seen_shards
            sdir = crawl_state_dir(self.cfg)
        ids = tuple(f"shard-{i:03d}" for i in range(n))
        self.ring = HashRing(list(ids))
        self._started = True
        # The lease is renewed while the runtime starts: creating actors can take longer
        # than lease_ttl_s on a busy machine, and a shard that first reads an expired lease
        # fences itself off for good.
        self._heartbeat_task = asyncio.ensure_future(self._heartbeat())
        try:
            await self.runtime.start(Plan(self.cfg, ids, n_seen, sdir, tuple(self.seeds), epoch))
        except BaseException:
            self._heartbeat_task.cancel()
            raise
        self.started_at = self.clock.now()
        if self.mode == "resume":
            self.resumed = sum(s.get("resumed", 0) for s in await self.runtime.statuses() or [])
            log.info("resuming the unfinished crawl in %s: %d URLs were queued", self.cfg.output.path, self.resumed)
        if self.on_start is not None:
            self.on_start(self)
        await self._seed(self.seeds)
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
        finished = False
        while not self._stop_requested:
            if await self.poll():
                finished = True
                break
            if deadline is not None and self.clock.now() > deadline:
                break
            await self.clock.sleep(self.poll_interval_s)
        return await self.stop(finished=finished)

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
            if st.get("error"):
                raise RuntimeError(f"{st['shard']} failed: {st['error']}")
        self.last_total = merge_status(statuses)
        if self.on_progress is not None:
            self.on_progress(self.last_total)
        return self.detector.observe(statuses)

    async def stop(self, *, finished: bool = False) -> dict[str, Any]:
        """Step 5 of a run: stop the shards, write stats.json and the ledger; the stats."""
        if self.final is not None:
            return self.final
        elapsed = self.clock.now() - (self.started_at or self.clock.now())
        finals = await self.runtime.stop()
        if self._heartbeat_task is not None:  # the lease stays renewed until the shards stopped
            self._heartbeat_task.cancel()
            await asyncio.gather(self._heartbeat_task, return_exceptions=True)
        if self.fenced is None and is_remote(self.cfg.output.path):
            await self.runtime.ship_state()
        services = await self.runtime.service_stats()
        await self.runtime.close()
        stats = self._stats(finals, services, elapsed, finished)
        opts = self._options()
        if self.fenced is not None:
            # Another run owns the output now: write nothing more into it.
            stats["fenced"] = self.fenced
            self.final = stats
            return stats
        if finished:
            # Rows repeated across a crash or a retried delivery: leave each (url, content) once.
            stats["compacted_rows"] = compact_pages(self.cfg.output.path, opts)
        stats["ledger"] = ledger.for_run(self.cfg.output.path, opts, finals, stats["seen"], finished=finished)
        write_stats(self.cfg, stats)
        if finished and self.record is not None:
            mark_finished(self.cfg, self.record)
        if self.lease is not None:
            self.lease.release()
        self.final = stats
        return stats

    async def _heartbeat(self) -> None:
        """Tell the shards the driver lives; renew the lease; stop if another run took it."""
        rt = self.cfg.runtime
        beat = rt.driver_timeout_s / 5
        renew_every = rt.lease_ttl_s / 4
        renewed = shipped = self.clock.now()
        remote = is_remote(self.cfg.output.path)
        beat_task: asyncio.Future[None] | None = None
        while True:
            await self.clock.sleep(beat)
            # Sent without waiting for the answers: actors still being created (or
            # restarted) answer late, and the lease renewal below must not wait for them.
            if beat_task is None or beat_task.done():
                beat_task = asyncio.ensure_future(self.runtime.heartbeat())
                beat_task.add_done_callback(_log_missed_beat)
            if remote and self.clock.now() - shipped >= rt.state_ship_interval_s:
                shipped = self.clock.now()
                try:
                    await self.runtime.ship_state()
                except Exception as exc:  # noqa: BLE001 - the local copies are intact; next time
                    log.warning("copying state to the output failed: %r", exc)
            if self.lease is not None and self.clock.now() - renewed >= renew_every:
                renewed = self.clock.now()
                if not await asyncio.to_thread(self.lease.renew):
                    self.fenced = "another run took the output's lease"
                    log.error("%s: stopping this run", self.fenced)
                    self.request_stop()
                    return

    def _options(self) -> dict | None:
        return dict(self.cfg.output.storage_options) or None

    # -- steering -------------------------------------------------------------------

    async def add_seeds(self, urls: Sequence[str]) -> dict[str, int]:
        """Add seeds to a running crawl (validated; the scope widens to include them).

        Returns ``{"accepted": new URLs queued, "already_seen": ...}``. A malformed URL
        raises SeedError before anything is changed.
        """
        clean = [validate_seed(u) for u in urls]
        await self.runtime.widen_scope(clean)
        new = await self._seed(clean)
        return {"accepted": new, "already_seen": len(clean) - new}

    async def set_host_policy(self, host: str, *, max_rps: float | None = None, paused: bool | None = None) -> None:
        """Override one host's politeness (``max_rps`` -> interval 1/max_rps) or pause it.
        It applies on the owning shard at once and survives restarts (it is checkpointed)."""
        interval = None if max_rps is None else (float("inf") if max_rps <= 0 else 1.0 / max_rps)
        await self.runtime.set_host_policy(self._owner(host), host, interval, paused)

    async def url_status(self, url: str) -> dict[str, Any] | None:
        """What the owning shard's durable store knows of ``url`` (None if never admitted)."""
        return await self.runtime.url_status(self._owner(host_key(url)), url)

    async def stats(self) -> dict[str, Any]:
        """Crawl-wide totals right now (or the final stats once stopped)."""
        if self.final is not None:
            return self.final
        return merge_status(await self.runtime.statuses() or [])

    # -- internals ------------------------------------------------------------------

    def _owner(self, host: str) -> str:
        assert self.ring is not None, "the session is not started"
        return self.ring.node_for(host)

    async def _seed(self, urls: Sequence[str]) -> int:
        """Seen-check URLs and deliver the new ones (depth 0) to their owners, in batches."""
        verdicts = await self.runtime.seen_check(list(urls))
        by_owner: dict[str, list[UrlItem]] = {}
        for url, new in zip(urls, verdicts):
            if new:
                item = UrlItem(url, 0)
                by_owner.setdefault(self._owner(item.host), []).append(item)
        for owner, batch in by_owner.items():
            await self.runtime.deliver(owner, batch)
        self.detector.note_driver_batches(len(by_owner))
        return sum(len(b) for b in by_owner.values())

    def _stats(self, finals: list[dict[str, Any]], services: dict[str, Any], elapsed: float, finished: bool) -> dict[str, Any]:
        total = merge_status(finals)
        c = total["counters"]
        return {
            "finished": finished,
            "elapsed_s": round(elapsed, 3),
            "pages_per_s": round(c.get("fetched", 0) / elapsed, 2) if elapsed > 0 else None,
            "outcomes": {k: c.get(k, 0) for k in OUTCOMES},
            "requests": c.get("requests", 0),
            "robots_requests": c.get("robots_requests", 0),
            "retries": c.get("retries", 0),
            "bytes": c.get("bytes", 0),
            "duplicates": {"exact": c.get("dup_exact", 0), "near": c.get("dup_near", 0)},
            "dropped": total["dropped"],
            "queued_unfetched": total["queued"],
            "paused": {"hosts": total["paused_hosts"], "urls": total["paused_urls"]},
            "shards": total["shards"],
            "seen_shards": self.record.seen_shards if self.record is not None else None,
            "seen": services.get("seen", {}),
            "content": services.get("content", {}),
            "resumed_urls": self.resumed,
            "mode": self.mode,
            "config_fingerprint": self.cfg.fingerprint(),
            "config": to_dict(self.cfg),
        }
