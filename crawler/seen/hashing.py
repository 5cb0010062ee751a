"""URL hashes and the shard that owns each one.

The seen set never stores URLs, only their 64-bit hashes (:func:`url_hash64`): with n
URLs the chance that two distinct URLs share a hash is about n^2 / 2^65 (1e-3 at 190
million URLs per shard), the price of an 8-byte exact entry. :func:`shard_of` maps a
hash onto one of N seen shards; the driver's seeding and every engine's seen client
(:class:`crawler.seen.group.SeenGroup`) must agree on it, so it lives here once.
"""

from __future__ import annotations

import xxhash

from crawler.errors import ConfigError

__all__ = ["MASK64", "shard_of", "url_hash64"]

MASK64 = (1 << 64) - 1
"""All 64 bits set: ``h & MASK64`` folds any int onto the unsigned 64-bit hash space."""

_x3 = xxhash.xxh3_64_intdigest


def url_hash64(url: str) -> int:
    """Unsigned 64-bit xxh3 hash of a (normalized) URL's UTF-8 bytes.

    ``surrogatepass``: a URL string carrying a lone surrogate (undecodable input) still
    hashes instead of raising (docs/invariants.md #7).
    """
    return _x3(url.encode("utf-8", "surrogatepass"))


def shard_of(h: int, n: int) -> int:
    """Shard in ``0..n-1`` owning URL hash ``h``: ``(h * n) >> 64`` (Lemire's multiply-shift).

    It uses the hash's high bits and maps them uniformly onto n shards without a
    division, and stays independent of the low bits a Bloom backend may derive its
    probes from (rbloom is fed the hash itself), so every shard's filter sees
    well-spread bits.
    """
    if n < 1:
        raise ConfigError(f"seen shards: must be >= 1, got {n}")
    return ((h & MASK64) * n) >> 64
