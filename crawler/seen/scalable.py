"""A Bloom filter that grows with the crawl: a chain of filters (a scalable Bloom filter).

A fixed filter sized for ``capacity`` URLs stops filtering past it (its false-positive
rate was 0.9% at 10M rows, 23.5% at 25M: issue 33), so every check falls through to
the exact store. :class:`ScalableBloom` follows Almeida et al., "Scalable Bloom
Filters" (IPL 101(6), 2007), the design of pybloom-live's ``ScalableBloomFilter``: when
the newest filter (a *stage*) has taken its capacity of new URLs, a new stage
``GROWTH`` times larger is started with an error rate ``RATIO`` times tighter. Stage
``i`` has capacity ``c0 * GROWTH**i`` and error rate ``p * (1 - RATIO) * RATIO**i``, so the
compound false-positive rate, ``1 - prod(1 - p_i) <= sum p_i < p``, stays under the
configured ``p`` at any size. (pybloom-live starts at ``p * RATIO``, which bounds the
compound rate by ``9 p`` only; the paper's ``p (1 - RATIO)`` is used here.)

Parameters: ``GROWTH = 2`` (pybloom-live's SMALL_SET_GROWTH: memory follows the crawl
within 2x) and ``RATIO = 0.9`` (pybloom-live's, in the paper's best range 0.8-0.9 for a
growth of 2). Bits per URL: a stage at error ``p_i`` costs ``log2(1/p_i) / ln 2`` bits
per URL of its capacity (14.4 at 0.001, +0.22 per later stage); see
:func:`chain_plan` for the memory at a given size.

Every stage is one filter of the configured backend (:func:`crawler.seen.bloom.make_bloom`),
so rbloom stays the fast default. Checks ask the newest (largest) stage first. A
stage's bits are only ever set while it is the newest; older ones are read-only.

The chain's saved form (:meth:`ScalableBloom.to_bytes`, the snapshot payload of
:mod:`crawler.seen.snapshot`) is self-describing: magic, a JSON layout naming each
stage's capacity, error rate, count and byte length, then the stages' bytes in order.
"""

from __future__ import annotations

import json
import math
import struct
from collections.abc import Callable
from dataclasses import dataclass

from crawler.errors import StorageError
from crawler.seen.bloom import Bloom, make_bloom

__all__ = ["CHAIN_MAGIC", "GROWTH", "RATIO", "ScalableBloom", "Stage", "chain_plan", "stage_error_rate"]

GROWTH = 2
"""Each new stage's capacity over the previous one's (pybloom-live SMALL_SET_GROWTH)."""
RATIO = 0.9
"""Each new stage's error rate over the previous one's (pybloom-live's tightening ratio)."""
CHAIN_MAGIC = b"SEENCHN\x01"

#: (capacity, error_rate, saved bytes or None) -> one stage's filter.
MakeStage = Callable[[int, float, bytes | None], Bloom]


def stage_error_rate(error_rate: float, index: int) -> float:
    """Stage ``index``'s error rate: ``p (1 - RATIO) RATIO^index`` (the terms sum to p)."""
    return error_rate * (1.0 - RATIO) * RATIO**index


def chain_plan(initial_capacity: int, error_rate: float, items: int) -> list[tuple[int, float, int]]:
    """The stages a chain holds after ``items`` distinct URLs: (capacity, error_rate,
    bits) each, the bits from the textbook optimum ``n ln(1/p) / ln^2 2`` (rbloom's
    sizing; pybloom's rounds up per slice). For the memory figures of the docs and the
    scale benchmark."""
    out: list[tuple[int, float, int]] = []
    total = 0
    i = 0
    while True:
        cap = initial_capacity * GROWTH**i
        p = stage_error_rate(error_rate, i)
        out.append((cap, p, math.ceil(cap * math.log(1.0 / p) / math.log(2) ** 2)))
        total += cap
        if total >= items:
            return out
        i += 1


@dataclass
class Stage:
    """One filter of the chain, with the parameters it was made with and the new URLs
    it took (its fill is judged against ``capacity`` by that count)."""

    bloom: Bloom
    capacity: int
    error_rate: float
    count: int


class ScalableBloom:
    """A chain of Bloom filters that keeps its false-positive rate under ``error_rate``
    however many URLs it takes (module docstring). Implements the seen set's
    :class:`~crawler.seen.bloom.Bloom` protocol; ``k`` is the newest stage's and ``m``
    the bits of all stages.

    Args:
        backend: "rbloom" or "pybloom" (every stage uses it).
        initial_capacity: the first stage's capacity (``dedup.seen_capacity`` per shard).
        error_rate: the compound false-positive rate never exceeded (``dedup.seen_error_rate``).
        raw: a saved chain (:meth:`to_bytes`) to load.
        legacy: a single filter saved before chains existed, as (its capacity, its error
            rate, its bytes): it becomes stage 0 (its count estimated from its fill), and
            new stages follow it; the compound rate is then bounded by ``(1 + RATIO) p``.
    """

    def __init__(
        self,
        backend: str,
        initial_capacity: int,
        error_rate: float,
        raw: bytes | None = None,
        legacy: tuple[int, float, bytes] | None = None,
    ) -> None:
        self.backend = backend
        self.initial_capacity = initial_capacity
        self.error_rate = error_rate
        self.stages: list[Stage] = []
        if raw is not None:
            self._load(raw)
        elif legacy is not None:
            cap, p, bits = legacy
            bloom = self._make(cap, p, bits)
            self.stages.append(Stage(bloom, cap, p, _count_from_fill(bloom)))
            self._refresh()
        else:
            self._grow()

    def _make(self, capacity: int, error_rate: float, raw: bytes | None) -> Bloom:
        return make_bloom(self.backend, capacity, error_rate, raw)

    def _grow(self) -> Stage:
        i = len(self.stages)
        cap = self.initial_capacity * GROWTH**i
        if self.stages:
            # After a legacy stage 0 of another size, keep growing from the newest stage.
            cap = max(cap, self.stages[-1].capacity * GROWTH)
        p = stage_error_rate(self.error_rate, i)
        stage = Stage(self._make(cap, p, None), cap, p, 0)
        self.stages.append(stage)
        self._refresh()
        return stage

    def _refresh(self) -> None:
        self.k: int = self.stages[-1].bloom.k
        self.m: int = sum(s.bloom.m for s in self.stages)
        self._old = [s.bloom for s in reversed(self.stages[:-1])]  # newest first

    def check_and_add(self, h: int) -> bool:
        for b in self._old:
            if b.contains(h):
                return True
        stage = self.stages[-1]
        if stage.count >= stage.capacity:
            if stage.bloom.contains(h):
                return True
            stage = self._grow()
        if stage.bloom.check_and_add(h):
            return True
        stage.count += 1
        return False

    def contains(self, h: int) -> bool:
        return any(s.bloom.contains(h) for s in reversed(self.stages))

    def add_many(self, hashes: list[int]) -> None:
        """Set the bits of distinct hashes not yet in the chain (a rebuild from the exact
        store), filling each stage to its capacity before the next is started."""
        start = 0
        while start < len(hashes):
            stage = self.stages[-1]
            room = stage.capacity - stage.count
            if room <= 0:
                stage = self._grow()
                room = stage.capacity
            chunk = hashes[start : start + room]
            stage.bloom.add_many(chunk)
            stage.count += len(chunk)
            start += len(chunk)

    def bits_set(self) -> float:
        return sum(s.bloom.bits_set() for s in self.stages)

    def recount(self) -> None:
        for s in self.stages:
            s.bloom.recount()

    def false_positive_rate(self) -> float:
        """Chance a new URL is reported seen now: ``1 - prod(1 - fill_i^k_i)`` over the stages."""
        miss = 1.0
        for s in self.stages:
            miss *= 1.0 - s.bloom.false_positive_rate()
        return 1.0 - miss

    def capacity(self) -> int:
        """New URLs the chain takes before its next stage: the sum of stage capacities."""
        return sum(s.capacity for s in self.stages)

    def memory_bytes(self) -> int:
        return sum(s.bloom.memory_bytes() for s in self.stages)

    def to_bytes(self) -> bytes:
        parts = [s.bloom.to_bytes() for s in self.stages]
        layout = {
            "backend": self.backend,
            "initial_capacity": self.initial_capacity,
            "error_rate": self.error_rate,
            "stages": [
                {"capacity": s.capacity, "error_rate": s.error_rate, "count": s.count, "bytes": len(b)}
                for s, b in zip(self.stages, parts)
            ],
        }
        head = json.dumps(layout).encode()
        return b"".join([CHAIN_MAGIC, struct.pack("<I", len(head)), head, *parts])

    def _load(self, raw: bytes) -> None:
        n = len(CHAIN_MAGIC)
        if raw[:n] != CHAIN_MAGIC or len(raw) < n + 4:
            raise StorageError("seen-set snapshot: not a Bloom chain")
        (hlen,) = struct.unpack_from("<I", raw, n)
        pos = n + 4 + hlen
        try:
            layout = json.loads(raw[n + 4 : pos])
            stages = [(int(d["capacity"]), float(d["error_rate"]), int(d["count"]), int(d["bytes"])) for d in layout["stages"]]
        except (ValueError, KeyError, TypeError) as exc:
            raise StorageError(f"seen-set snapshot: bad Bloom chain layout: {exc}") from exc
        if layout.get("backend") != self.backend or not stages:
            raise StorageError(f"seen-set snapshot: Bloom chain of backend {layout.get('backend')!r}, not {self.backend!r}")
        for cap, p, count, size in stages:
            if pos + size > len(raw):
                raise StorageError("seen-set snapshot: Bloom chain is truncated")
            self.stages.append(Stage(self._make(cap, p, raw[pos : pos + size]), cap, p, count))
            pos += size
        self._refresh()


def _count_from_fill(bloom: Bloom) -> int:
    """Distinct items behind a filter's fill (Swamidass-Baldi: n = -m/k ln(1 - fill))."""
    fill = min(bloom.bits_set() / bloom.m, 1.0 - 1e-12)
    return round(-bloom.m / bloom.k * math.log(1.0 - fill))
