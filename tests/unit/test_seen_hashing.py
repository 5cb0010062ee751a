"""URL hashes and seen shards: unsigned xxh3 of the URL, an even split over N shards."""

from __future__ import annotations

from collections import Counter

import pytest
import xxhash

from crawler.errors import ConfigError
from crawler.seen import shard_of, url_hash64
from tests.unit.seen_kit import make_urls


def test_url_hash64_is_unsigned_xxh3_of_utf8() -> None:
    url = "https://bücher.example/ä?q=1"
    assert url_hash64(url) == xxhash.xxh3_64_intdigest(url.encode("utf-8"))
    assert 0 <= url_hash64(url) < 2**64
    assert url_hash64("https://a.example/") != url_hash64("https://a.example")
    # A lone surrogate (undecodable bytes upstream) must not raise.
    assert 0 <= url_hash64("https://a.example/\udcff") < 2**64


def test_shard_of_spreads_hashes_evenly_and_stays_in_range() -> None:
    n = 8
    counts = Counter(shard_of(url_hash64(u), n) for u in make_urls(80_000))
    assert set(counts) == set(range(n))
    assert max(counts.values()) < 1.05 * 10_000 and min(counts.values()) > 0.95 * 10_000
    assert shard_of(2**64 - 1, 3) == 2 and shard_of(0, 3) == 0
    assert all(shard_of(url_hash64(u), 1) == 0 for u in make_urls(100))
    with pytest.raises(ConfigError, match="shards"):
        shard_of(1, 0)
