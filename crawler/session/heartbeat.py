"""The driver's heartbeat: what tells a crawl's shards that their driver lives.

While a session runs, :class:`DriverHeartbeat` beats every shard each
``runtime.driver_timeout_s / 5`` (shards of a silent driver stop fetching,
crawler.recovery.watchdog), renews the output's lease every ``runtime.lease_ttl_s / 4``
(crawler.recovery.lease) and, with a remote output, asks the services every
``runtime.state_ship_interval_s`` to copy their state to OUT (each copies what changed
enough: crawler.recovery.copyschedule). Heartbeats go out only while the lease is fresh on this
process's clock (docs/invariants.md #14). When another run has taken the lease, it says so
once (``on_fenced``) and ends.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any, Awaitable, Callable

from crawler.clock import Clock
from crawler.config.settings import CrawlConfig
from crawler.errors import StorageError
from crawler.recovery.lease import Lease
from crawler.recovery.statefiles import is_remote
from crawler.session.runtime import Runtime

log = logging.getLogger(__name__)


def _log_missed_beat(task: asyncio.Future[None]) -> None:
    """A heartbeat round that failed (a shard restarting misses one beat): noted, not raised."""
    if not task.cancelled() and task.exception() is not None:
        log.debug("heartbeat: %r", task.exception())


class DriverHeartbeat:
    """Beats, lease renewals and state copies of one session (module docstring).

    Args:
        cfg: the crawl's config (``runtime`` intervals, the output).
        runtime: the shards and services to beat and copy.
        clock: the session's clock.
        lease: the output's lease (None: a crawl without durable state; nothing to renew).
        run_blocking: runs the lease's blocking I/O.
        on_fenced: called once, with why, when another run holds the lease.
    """

    def __init__(self, cfg: CrawlConfig, runtime: Runtime, clock: Clock, lease: Lease | None,
                 run_blocking: Callable[..., Awaitable[Any]], on_fenced: Callable[[str], None]) -> None:
        self.cfg, self.runtime, self.clock, self.lease = cfg, runtime, clock, lease
        self._run_blocking = run_blocking
        self._on_fenced = on_fenced

    async def run(self) -> None:
        """Beat, renew, ship, until cancelled or fenced (class docstring).

        Heartbeats go out only while the lease is fresh on this process's clock
        (crawler.recovery.lease.Lease.fresh): a driver that cannot renew (the object store
        down) goes quiet before anyone could see its lease lapse, so its shards stop
        fetching first (docs/invariants.md #14). A failed renewal is retried, not a verdict.
        """
        rt = self.cfg.runtime
        beat = rt.driver_timeout_s / 5
        renew_every = rt.lease_ttl_s / 4
        next_renewal = self.clock.now() + renew_every
        shipped = self.clock.now()
        remote = is_remote(self.cfg.output.path)
        beat_task: asyncio.Future[None] | None = None
        quiet = False
        while True:
            await self.clock.sleep(beat)
            lease = self.lease
            if lease is None or lease.fresh():
                # Sent without waiting for the answers: actors still being created (or
                # restarted) answer late, and the renewal below must not wait for them.
                if beat_task is None or beat_task.done():
                    beat_task = asyncio.ensure_future(self.runtime.heartbeat())
                    beat_task.add_done_callback(_log_missed_beat)
                if quiet:
                    log.warning("the lease is renewed again: the shards may work")
                quiet = False
            elif not quiet:
                quiet = True
                log.error("the output's lease was not renewed for %.0fs: the shards are told nothing until it is",
                          self.clock.now() - (lease.renewed_at or 0.0))
            if remote and not quiet and self.clock.now() - shipped >= rt.state_ship_interval_s:
                shipped = self.clock.now()
                try:
                    await self.runtime.ship_state()
                except Exception as exc:  # noqa: BLE001 - the local copies are intact; next time
                    log.warning("copying state to the output failed: %r", exc)
            if lease is not None and self.clock.now() >= next_renewal:
                try:
                    renewed = await self._run_blocking(lease.renew)
                except StorageError as exc:
                    log.warning("renewing the output's lease failed (retrying): %s", exc)
                    next_renewal = self.clock.now() + min(renew_every, 1.0)
                    continue
                next_renewal = self.clock.now() + renew_every
                if not renewed:
                    self._on_fenced("another run took the output's lease")
                    return
