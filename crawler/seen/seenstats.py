"""A seen set's counters and the figures it reports (crawler.seen.set.SeenSet.stats).

The counters are kept by the set (its public attributes, named as here), passed to the
check of its mode as a dict and taken back updated (crawler.seen.inmemory,
crawler.seen.ondisk), and saved with its state: in the database (exact mode) or in the
Bloom snapshot's header (Bloom-only mode).
"""

from __future__ import annotations

from collections.abc import Mapping

from crawler.seen.scalable import ScalableBloom

__all__ = ["SEEN_COUNTERS", "SeenStats", "seen_stats"]

#: The set's counters, in the order its figures list them.
SEEN_COUNTERS = (
    "checks",
    "novel",
    "bloom_positives",
    "exact_confirmations",
    "false_positives",
    "cache_hits",
    "db_lookups",
    "forgotten",
)

#: The figures of :func:`seen_stats` (a JSON-ready record).
SeenStats = dict[str, float | int | bool | str]


def seen_stats(
    *,
    backend: str,
    exact: bool,
    capacity: int,
    error_rate: float,
    items: int,
    counters: Mapping[str, float],
    bloom: ScalableBloom,
    est_dropped: float,
    memory_bytes: int,
) -> SeenStats:
    """The figures of a set whose Bloom filter was just recounted (SeenSet.stats).

    ``estimated_false_positives`` (meaningful in Bloom-only mode, where nothing else
    can tell a false positive from a repeat) is the Horvitz-Thompson style estimate
    sum over Bloom negatives of p_i / (1 - p_i), p_i = fill_i^k at the time of the
    check: new URLs arrive, each is dropped with probability p_i, so every one that
    got through represents p_i / (1 - p_i) that were dropped. In exact mode the real
    count is ``false_positives``.

    ``cache_hits`` counts Bloom positives answered by the hot cache and ``db_lookups``
    the hashes asked from SQLite (both 0 without a path).

    ``bloom_bits`` and ``fill_ratio`` cover the filter chain's stages together,
    ``bloom_hashes`` is the newest stage's k, ``bloom_capacity`` the new URLs the chain
    takes before its next stage, and ``estimated_false_positive_rate``
    ``1 - prod(1 - fill_i^k_i)`` over the stages (crawler.seen.scalable).
    """
    fill = bloom.bits_set() / bloom.m
    return {
        "backend": backend,
        "exact": exact,
        "capacity": capacity,
        "error_rate": error_rate,
        "items": items,
        "checks": counters["checks"],
        "novel": counters["novel"],
        "already_seen": counters["checks"] - counters["novel"],
        "bloom_positives": counters["bloom_positives"],
        "exact_confirmations": counters["exact_confirmations"],
        "false_positives": counters["false_positives"],
        "cache_hits": counters["cache_hits"],
        "db_lookups": counters["db_lookups"],
        "forgotten": counters["forgotten"],
        "bloom_bits": bloom.m,
        "bloom_hashes": bloom.k,
        "fill_ratio": fill,
        "estimated_false_positive_rate": bloom.false_positive_rate(),
        "bloom_stages": len(bloom.stages),
        "bloom_capacity": bloom.capacity(),
        "estimated_false_positives": est_dropped if not exact else float(counters["false_positives"]),
        "memory_bytes": memory_bytes,
    }
