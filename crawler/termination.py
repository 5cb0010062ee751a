"""Proving a crawl is finished (DESIGN.md invariant 4).

An empty queue means nothing while fetches or batches between shards are in flight,
and shards are polled one after another, never all at the same instant. The detector
therefore declares the crawl done only when, in two *consecutive* polls:

1. every shard reports ``idle`` (no fetch in flight, no link in transit, nothing that
   could become ready), and
2. every batch ever sent has been received (sum of ``batches_sent`` plus the driver's
   seed batches equals the sum of ``batches_received``), and
3. the per-shard activity vectors (batches sent and received, requests, rows) are
   identical in both polls.

Why two polls: a shard polled early may look idle and then receive a batch from a shard
polled later that was busy. That delivery changes the receiver's ``batches_received``,
so the second poll's vector differs and the detector waits another round. If nothing
changed between two complete rounds in which everybody was idle, no message was in
flight in between (a sender is busy until its delivery has been accepted), so nothing can
ever happen again: the crawl is done.
"""

from __future__ import annotations

from typing import Any, Mapping, Sequence


def _vector(statuses: Sequence[Mapping[str, Any]]) -> tuple:
    return tuple(
        (
            s["shard"],
            s["batches_sent"],
            s["batches_received"],
            s["counters"].get("requests", 0),
            s["queued"],
        )
        for s in sorted(statuses, key=lambda s: s["shard"])
    )


class TerminationDetector:
    """Feed it one poll of every shard's ``status()`` at a time; it says when all is done."""

    def __init__(self) -> None:
        self._last: tuple | None = None
        self.driver_batches_sent = 0
        self.polls = 0

    def note_driver_batches(self, n: int) -> None:
        """Batches (seeds) the driver itself delivered to shards."""
        self.driver_batches_sent += n
        self._last = None

    def observe(self, statuses: Sequence[Mapping[str, Any]]) -> bool:
        """Record one full round of statuses; True once termination is proven."""
        self.polls += 1
        all_idle = all(s["idle"] for s in statuses)
        sent = sum(s["batches_sent"] for s in statuses) + self.driver_batches_sent
        received = sum(s["batches_received"] for s in statuses)
        vec = _vector(statuses)
        if not (all_idle and sent == received):
            self._last = None
            return False
        done = self._last == vec
        self._last = vec
        return done
