"""Proving a crawl is finished (docs/invariants.md #4).

An empty queue means nothing while fetches or batches between shards are in flight,
and shards are polled one after another, never all at the same instant. The detector
therefore declares the crawl done only when, in two *consecutive* polls:

1. every shard reports ``idle`` (no fetch in flight, no link in transit, nothing that
   could become ready) and no shard holds work of paused hosts (paused is not done: the
   crawl waits for an unpause or a stop, which keeps that work for the next resume), and
2. the per-shard activity vectors (incarnation, batches sent and received, requests,
   queued) are identical in both polls.

Why this is enough: a sender counts as busy until the receiver has *accepted* its
batch (the delivery call returns only then), and an idle shard has no timer that could
wake it: only a received batch can. If every shard was idle at its first poll and
received nothing until its second poll (its ``batches_received`` did not move), then at
the instant between the two rounds every shard was idle with nothing in transit, and
nothing can ever happen again. A shard polled early that receives a batch later shows a
changed vector in the second round, and the detector waits another round.

Sent and received totals are deliberately *not* required to balance: a delivery retried
after a lost reply is received twice, and a restarted shard starts its counters afresh
(its new ``incarnation`` changes the vector, which is what keeps a restart from being
mistaken for quiet).
"""

from __future__ import annotations

from typing import Sequence

from crawler.engine.status import ShardStatus


Vector = tuple[tuple[str, str, int, int, int, int], ...]


def _vector(statuses: Sequence[ShardStatus]) -> Vector:
    return tuple(
        (
            s.shard,
            s.incarnation,
            s.batches_sent,
            s.batches_received,
            s.counters.requests,
            s.queued,
        )
        for s in sorted(statuses, key=lambda s: s.shard)
    )


class TerminationDetector:
    """Feed it one poll of every shard's ``status()`` at a time; it says when all is done."""

    def __init__(self) -> None:
        self._last: Vector | None = None
        self.driver_batches_sent = 0
        self.polls = 0

    def reset(self) -> None:
        """Forget the last round (a shard did not answer: no consistent view now)."""
        self._last = None

    def note_driver_batches(self, n: int) -> None:
        """Batches (seeds) the driver itself delivered to shards."""
        self.driver_batches_sent += n
        self._last = None

    def observe(self, statuses: Sequence[ShardStatus]) -> bool:
        """Record one full round of statuses; True once termination is proven."""
        self.polls += 1
        vec = _vector(statuses)
        if not all(s.idle and not s.paused_urls for s in statuses):
            self._last = None
            return False
        done = self._last == vec
        self._last = vec
        return done
