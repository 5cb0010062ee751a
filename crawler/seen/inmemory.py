"""The checks of a seen set that asks no database: exact in memory, and Bloom-only.

:class:`~crawler.seen.set.SeenSet` runs one of three checks, by mode: with an exact store
on disk, :meth:`crawler.seen.ondisk.SeenOnDisk.check`; with the exact store in memory,
:func:`check_in_memory`; without an exact store (lossy), :func:`check_bloom_only`. Each
takes the set's counters and returns them updated by the batch (the set keeps them), so
the three count alike. ``hashes`` are already masked to 64 bits.
"""

from __future__ import annotations

from crawler.seen.bloom import Bloom
from crawler.seen.store import ExactStore

__all__ = ["check_bloom_only", "check_in_memory", "forget_in_memory"]


def check_in_memory(
    hashes: list[int], bloom: Bloom, store: ExactStore, counters: dict[str, float]
) -> tuple[list[bool], dict[str, float]]:
    """Exact mode in memory: the Bloom filter, then the exact store for its positives; a
    Bloom false positive never drops a URL."""
    out: list[bool] = [True] * len(hashes)
    novel_here: set[int] = set()
    pending: list[int] = []  # positions the Bloom filter could not clear
    for i, h in enumerate(hashes):
        if bloom.check_and_add(h):
            pending.append(i)
        else:
            novel_here.add(h)  # a Bloom negative is definitely new
    counters = dict(counters)
    counters["bloom_positives"] += len(pending)
    if pending:
        asked = [hashes[i] for i in pending]
        known = store.contains_many(asked)
        for i, h, was_seen in zip(pending, asked, known):
            if was_seen or h in novel_here:
                # Really seen (before, or earlier in this batch): the maybe was right.
                counters["exact_confirmations"] += 1
                out[i] = False
            else:
                # The Bloom filter lied; the exact store saves the URL.
                counters["false_positives"] += 1
                novel_here.add(h)
    store.add_many(novel_here)
    counters["checks"] += len(hashes)
    counters["novel"] += len(novel_here)
    return out, counters


def check_bloom_only(
    hashes: list[int], bloom: Bloom, counters: dict[str, float]
) -> tuple[list[bool], dict[str, float], float]:
    """Bloom-only (lossy) mode: the filter alone decides. Also returns this batch's share
    of the estimate of new URLs dropped by false positives (crawler.seen.set.SeenSet.stats)."""
    out: list[bool] = []
    positives = 0
    est = 0.0
    for h in hashes:
        if bloom.check_and_add(h):
            positives += 1
            out.append(False)
        else:
            # A new URL got through. A new URL arriving now would have been a false
            # positive with probability p (fill^k per stage), so each one that got through
            # stands for p / (1 - p) that did not (estimator in stats()).
            p = bloom.false_positive_rate()
            if p < 1.0:
                est += p / (1.0 - p)
            out.append(True)
    counters = dict(counters)
    counters["bloom_positives"] += positives
    counters["checks"] += len(hashes)
    counters["novel"] += len(hashes) - positives
    return out, counters, est


def forget_in_memory(
    hashes: list[int], store: ExactStore | None, counters: dict[str, float]
) -> tuple[int, dict[str, float]]:
    """Undo the marks of ``hashes`` (distinct, masked): removed from the exact store, or in
    Bloom-only mode only taken out of ``novel`` (a Bloom filter cannot delete)."""
    counters = dict(counters)
    removed = min(len(hashes), int(counters["novel"])) if store is None else store.discard_many(hashes)
    counters["novel"] -= removed
    counters["forgotten"] += removed
    return removed, counters
