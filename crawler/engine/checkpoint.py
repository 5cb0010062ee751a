"""Checkpoints of a shard's caches and the resume of its queue.

The durable store (crawler.frontier.store) holds every URL a shard accepted; this module keeps
the rest of a shard's memory next to it, so a restarted or resumed shard continues as
if it had not stopped:

* robots rules (no refetch of every robots.txt after a restart),
* per-host budgets and novelty (trap cuts stay cut),
* politeness state that protects hosts: operator overrides (pause, max_rps), adaptive
  backoff, Retry-After and novelty penalties,
* counters and dropped-link counts (stats continue across runs).

A checkpoint is one JSON value in the store's ``meta`` table, written on the injected
clock every ``interval_s`` and at once when an operator changes a host's policy (then
journaled too: with a remote output it reaches OUT before the call returns). With a
remote output a snapshot of the whole store is also considered every ``ship_interval_s``
and at the end, and written when enough changed since the last one (crawler.recovery.statelog,
crawler.recovery.copyschedule), so a shard resumes on another machine. When none is
written the checkpoint goes into the store's log instead: always at the end, and in
between once the log written since the checkpoint last reached OUT is at least its size
(its cost stays within the rate of change; the caches it holds are then at most that old).

So a checkpoint may be a minute older than the URLs in OUT. What bounds those URLs
cannot wait for it (docs/invariants.md #11): a host's page budget and trap cuts, and the
robots.txt verdicts in force, are *decisions* written to the store with the admissions
they govern (crawler.engine.admission, crawler.frontier.store). Each checkpoint holds
every decision made before it (pending ones are written first) and empties the store's
log of them; a restore loads the checkpoint, then the decisions made since, over it
(:class:`DecisionSource`). Any decision still pending (a cut that dropped nothing) is
written on each tick, i.e. with the acks of the outbox round that ran it.
"""

from __future__ import annotations

import json
import logging
from typing import Any, Awaitable, Callable, Mapping, Protocol

from crawler.clock import Clock
from crawler.frontier.frontier import Frontier
from crawler.frontier.store import Decisions, FrontierStore

log = logging.getLogger(__name__)

#: A named piece of state: ``(snapshot() -> json value, restore(json value) -> None)``.
Part = tuple[Callable[[], Any], Callable[[Any], Any]]


class DecisionSource(Protocol):
    """Decisions kept in the store beside the checkpoint (crawler.engine.admission.Admission)."""

    def pending(self) -> Decisions:
        """Decisions made since they were last written (and forget them)."""
        ...

    def restore_decisions(self) -> None:
        """Load the store's decisions over what the checkpoint restored."""
        ...


def resume_queue(store: FrontierStore, frontier: Frontier) -> int:
    """Put a shard's durable queue back under its frontier; returns the URLs queued.

    1. URLs claimed (in flight) when the shard stopped return to the queue flagged
       ``replay`` (their links bypass the seen filter when they are fetched again);
    2. every host's queued URLs are registered as spilled (loaded lazily, in order).
    """
    store.recover()
    queued = 0
    for host, n in store.pending_hosts():
        frontier.restore_spilled(host, n)
        queued += n
    return queued


class SnapshotState(Protocol):
    """The store's log in OUT, as the checkpointer asks it (crawler.recovery.statelog.StateLog)."""

    bytes_written: int

    def snapshot_due(self) -> bool:
        """Whether the next snapshot would be written."""
        ...


class Checkpointer:
    """Saves and restores named parts of a shard's state in its durable store.

    Args:
        store: the shard's durable store (the checkpoint lives in its ``meta`` table).
        parts: name -> (snapshot, restore) of each piece of state.
        clock: when checkpoints are due.
        interval_s: seconds between periodic checkpoints.
        ship: writes a snapshot of the store to a remote output, or None.
        ship_interval_s: seconds between snapshots.
        decisions: the decisions kept in the store rather than in the checkpoint, or None.
        state: the store's log in OUT (None: every ship writes a snapshot holding the checkpoint).
    """

    def __init__(
        self,
        store: FrontierStore,
        parts: Mapping[str, Part],
        clock: Clock,
        *,
        interval_s: float,
        ship: Callable[[], Awaitable[None]] | None = None,
        ship_interval_s: float = 60.0,
        decisions: DecisionSource | None = None,
        state: SnapshotState | None = None,
    ) -> None:
        self.store = store
        self.decisions = decisions
        self.parts = dict(parts)
        self._clock = clock
        self._interval_s = interval_s
        self._ship = ship
        self._ship_interval_s = ship_interval_s
        self._last_save = clock.now()
        self._last_ship = clock.now()
        self.saves = 0
        self._state = state
        self._in_out_at = 0  # state.bytes_written when the checkpoint last reached OUT
        self.journaled = 0  # checkpoints that reached OUT in the log, not in a snapshot

    def restore(self) -> bool:
        """Load the last checkpoint, if any, then the store's decisions over it. A part
        that fails to load costs that part (logged), never the URLs, which live in the
        store's table. True if a checkpoint was found."""
        found = self._restore_parts()
        if self.decisions is not None:
            try:
                self.decisions.restore_decisions()
            except Exception as exc:  # noqa: BLE001 - a bad decision costs a cache, not the crawl
                log.warning("%s: ignoring the stored decisions: %r", self.store.path, exc)
        return found

    def _restore_parts(self) -> bool:
        raw = self.store.get_meta("checkpoint")
        if not raw:
            return False
        try:
            saved = json.loads(raw)
        except ValueError as exc:
            log.warning("%s: ignoring an unreadable checkpoint: %r", self.store.path, exc)
            return True
        for name, (_, restore) in self.parts.items():
            if name not in saved:
                continue
            try:
                restore(saved[name])
            except Exception as exc:  # noqa: BLE001 - a bad part costs a cache, not the crawl
                log.warning("%s: ignoring checkpoint part %r: %r", self.store.path, name, exc)
        return True

    def save(self, *, journal: bool = False) -> None:
        """Write every part now (one committed value); ``journal``: also to the store's
        journal (an operator's setting: crawler.frontier.store). Pending decisions are
        written (journaled) first: the checkpoint replaces the store's log of them."""
        self._write(self._value(), journal)

    def _value(self) -> str:
        self._write_pending()
        return json.dumps({name: snap() for name, (snap, _) in self.parts.items()})

    def _write(self, value: str, journal: bool) -> None:
        self.store.set_meta("checkpoint", value, journal=journal, covers_decisions=self.decisions is not None)
        self._last_save = self._clock.now()
        self.saves += 1

    def _save_in_log(self, final: bool) -> None:
        """No snapshot this time: save, journaled if it is the end or the log written since
        the checkpoint last reached OUT is at least its size (class docstring)."""
        assert self._state is not None
        value = self._value()
        journal = final or self._state.bytes_written - self._in_out_at >= len(value)
        self._write(value, journal)
        if journal:
            self._in_out_at = self._state.bytes_written
            self.journaled += 1

    def _write_pending(self) -> None:
        if self.decisions is not None:
            pending = self.decisions.pending()
            if pending:
                self.store.decisions.write(pending)

    async def tick(self, final: bool = False) -> None:
        """Write pending decisions; save if one is due (or ``final``), and snapshot the
        store to a remote output."""
        self._write_pending()
        now = self._clock.now()
        shipping = self._ship is not None and (final or now - self._last_ship >= self._ship_interval_s)
        if shipping and self._state is not None and not self._state.snapshot_due():
            self._save_in_log(final)
        elif final or shipping or now - self._last_save >= self._interval_s:
            self.save()
        if shipping:
            assert self._ship is not None
            self._last_ship = now
            if self._state is not None and self._state.snapshot_due():
                self._in_out_at = self._state.bytes_written  # the snapshot holds the checkpoint just saved
            try:
                await self._ship()
            except Exception as exc:  # noqa: BLE001 - the local store is intact; try again next time
                log.warning("%s: copying state to the output failed: %r", self.store.path, exc)
