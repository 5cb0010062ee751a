"""A shard's watch on its driver and on the output's lease, on the injected clock.

A shard shares its driver's fate (docs/invariants.md #9). The driver calls every shard
several times a second (heartbeat, status); each call is a :meth:`ShardWatchdog.contact`.
After ``driver_timeout_s`` without one the shard is *silent*: its gate
(:meth:`ShardWatchdog.may_work`) starts no fetch and accepts no work, and the
watchdog asks, once per silence, that what was fetched be made durable and acked at
once. Once a newer run has claimed the output (a newer epoch: crawler.recovery.lease) the
gate stays shut for good and the watchdog hands the shard to
:meth:`WatchdogHooks.on_lease_lost`, which closes it without writing. Both are facts this
shard observes itself: silence on its own monotonic clock, epochs in the output -- never
another machine's wall clock (docs/invariants.md #14).

The actor in ``actors/host_shard.py`` owns one of these and supplies the hooks; the
logic lives here so that a test drives it with :class:`~crawler.clock.MockClock`.
"""

from __future__ import annotations

import logging
from typing import Protocol

from crawler.clock import Clock
from crawler.errors import StorageError
from crawler.recovery.incarnation import Incarnation
from crawler.recovery.lease import Fence

log = logging.getLogger(__name__)

#: How often the watchdog looks at the driver's silence and the lease.
WATCH_INTERVAL_S = 0.25


class WatchdogHooks(Protocol):
    """What the watchdog asks of the shell that owns the shard."""

    async def on_driver_silent(self) -> None:
        """The driver fell silent: flush and ack what was fetched (once per silence)."""

    async def on_lease_lost(self, reason: str | None) -> None:
        """The lease is lost: stop and close without writing (the watch ends after this)."""

    def on_tick(self) -> None:
        """Called once per watch interval (periodic chores such as exporting metrics)."""


class ShardWatchdog:
    """Driver silence and lease loss for one shard.

    Args:
        clock: the time seam; the last contact and the silence are read from it.
        driver_timeout_s: seconds without a :meth:`contact` after which the shard is silent
            (strictly more than this many).
        fence: the shard's check of the lease, or None for a crawl without durable state
            (no lease to lose).
        hooks: what to do on silence, on lease loss, and on every tick.
        name: the shard's id, for the log.
        interval_s: seconds between two looks.
        incarnation: this shard's generation claim (a remote output), or None. After a
            silence the gate reopens only once it was read again too: calls parked
            while this process was stopped or cut off arrive when it runs again and say
            nothing of how long ago they were sent, and meanwhile the cluster may have
            started a successor (a zombie must not fetch beside it: docs/invariants.md #15).
    """

    def __init__(
        self,
        clock: Clock,
        driver_timeout_s: float,
        fence: Fence | None,
        hooks: WatchdogHooks,
        *,
        name: str = "shard",
        interval_s: float = WATCH_INTERVAL_S,
        incarnation: Incarnation | None = None,
    ) -> None:
        self._clock = clock
        self.driver_timeout_s = driver_timeout_s
        self.fence = fence
        self._hooks = hooks
        self._name = name
        self._interval = interval_s
        self._last_contact = clock.now()
        self._stopped = False
        self.incarnation = incarnation
        self._generation_unread = False

    def contact(self) -> None:
        """The driver was heard from (a heartbeat, a status poll, a start). After a
        silence the gate reopens only once the epochs are read again: a driver that was
        stopped while a newer run took over must not wake its shards for one more fetch."""
        if self.silent():
            if self.fence is not None:
                self.fence.recheck()
            self._generation_unread = self.incarnation is not None
        self._last_contact = self._clock.now()

    def silent(self) -> bool:
        """True once more than ``driver_timeout_s`` passed since the last contact."""
        return self._clock.now() - self._last_contact > self.driver_timeout_s

    def may_work(self) -> bool:
        """The shard's gate: fetch and accept only while the driver is heard from and the
        lease is ours."""
        if self.silent():
            return False
        if self._generation_unread and self.incarnation is not None:
            try:
                if not self.incarnation.ok(fresh=True):  # one GET, once per silence
                    return False
            except StorageError:
                return False  # the store cannot tell now: asked again at the next look
            self._generation_unread = False
        if self.incarnation is not None and self.incarnation.fenced:
            return False
        return self.fence is None or self.fence.ok()

    def stop(self) -> None:
        """End :meth:`run` at its next look."""
        self._stopped = True

    async def run(self) -> None:
        """Look every ``interval_s`` until stopped or the lease is lost.

        When the driver falls silent the gate stops new fetches, and the hook makes what
        was fetched durable and acked at once rather than at the next row flush: if the
        driver is dead, the shard is reaped within moments, and every page whose row is
        not durable by then is fetched again by the next run.
        """
        flushed_silence = False
        while not self._stopped:
            await self._clock.sleep(self._interval)
            silent = self.silent()
            if silent and not flushed_silence:
                flushed_silence = True
                log.warning("%s: no word from the driver for %.1fs: fetching paused, rows flushed", self._name, self.driver_timeout_s)
                try:
                    await self._hooks.on_driver_silent()
                except Exception as exc:  # noqa: BLE001 - fenced or failing storage: the next run refetches
                    log.error("%s: flush on driver silence failed: %r", self._name, exc)
            elif not silent:
                flushed_silence = False
            self._hooks.on_tick()
            if self.fence is not None:
                self.fence.ok()  # reread the epochs (at most once per check interval)
            if self.fence is not None and self.fence.lost:
                log.error("%s: %s; closing without writing", self._name, self.fence.reason)
                self._stopped = True
                await self._hooks.on_lease_lost(self.fence.reason)
                return
