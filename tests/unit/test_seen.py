"""The seen-URL set: first sighting wins, nothing lost in exact mode, honest lossy mode."""

from __future__ import annotations

import random
from collections import Counter

import pytest
import xxhash

from crawler.errors import ConfigError, StorageError
from crawler.seen import SeenSet, shard_of, url_hash64

BACKENDS = ["pybloom", "rbloom"]


def _urls(n: int, tag: str = "") -> list[str]:
    return [f"https://h{i % 97}.example/{tag}p/{i}?x={i * 7}" for i in range(n)]


def _feed(s: SeenSet, urls: list[str], batch: int = 100) -> list[bool]:
    out: list[bool] = []
    for i in range(0, len(urls), batch):
        out += s.check_and_add(urls[i : i + batch])
    return out


# --- hashing and sharding ---------------------------------------------------------------


def test_url_hash64_is_unsigned_xxh3_of_utf8() -> None:
    url = "https://bücher.example/ä?q=1"
    assert url_hash64(url) == xxhash.xxh3_64_intdigest(url.encode("utf-8"))
    assert 0 <= url_hash64(url) < 2**64
    assert url_hash64("https://a.example/") != url_hash64("https://a.example")
    # A lone surrogate (undecodable bytes upstream) must not raise.
    assert 0 <= url_hash64("https://a.example/\udcff") < 2**64


def test_shard_of_spreads_hashes_evenly_and_stays_in_range() -> None:
    n = 8
    counts = Counter(shard_of(url_hash64(u), n) for u in _urls(80_000))
    assert set(counts) == set(range(n))
    assert max(counts.values()) < 1.05 * 10_000 and min(counts.values()) > 0.95 * 10_000
    assert shard_of(2**64 - 1, 3) == 2 and shard_of(0, 3) == 0
    assert all(shard_of(url_hash64(u), 1) == 0 for u in _urls(100))
    with pytest.raises(ConfigError, match="shards"):
        shard_of(1, 0)


# --- exact mode -------------------------------------------------------------------------


@pytest.mark.parametrize("bloom", BACKENDS)
def test_first_sighting_is_novel_and_batch_repeats_are_not(bloom: str) -> None:
    s = SeenSet(1000, bloom=bloom)
    assert s.check_and_add(["a", "b", "a", "c", "b", "a"]) == [True, True, False, True, False, False]
    assert s.check_and_add(["c", "d", "d", "a"]) == [False, True, False, False]
    assert s.check_and_add([]) == []
    assert len(s) == 4
    st = s.stats()
    assert st["checks"] == 10 and st["novel"] == 4 and st["already_seen"] == 6


@pytest.mark.parametrize("bloom", BACKENDS)
def test_hash_entry_point_matches_url_entry_point(bloom: str) -> None:
    urls = _urls(500) + _urls(50)
    by_url = SeenSet(1000, bloom=bloom).check_and_add(urls)
    by_hash = SeenSet(1000, bloom=bloom).check_and_add_hashes([url_hash64(u) for u in urls])
    assert by_url == by_hash
    assert sum(by_url) == 500


@pytest.mark.parametrize("bloom", BACKENDS)
def test_exact_mode_loses_nothing_ten_times_over_capacity_with_a_saturated_filter(bloom: str) -> None:
    s = SeenSet(100, 0.01, exact=True, bloom=bloom)
    urls = _urls(10_000)
    rng = random.Random(5)
    # Each URL appears 1-3 times in a shuffled stream: novel exactly once, at its first position.
    stream = [u for u in urls for _ in range(rng.randint(1, 3))]
    rng.shuffle(stream)
    verdicts = _feed(s, stream, batch=250)
    novel_urls = Counter(u for u, novel in zip(stream, verdicts) if novel)
    assert set(novel_urls) == set(urls)
    assert set(novel_urls.values()) == {1}
    first_pos = {}
    for i, u in enumerate(stream):
        first_pos.setdefault(u, i)
    assert all(verdicts[i] == (first_pos[u] == i) for i, u in enumerate(stream))
    st = s.stats()
    assert st["false_positives"] > 0  # the filter did lie, and the exact store caught it
    assert st["false_positives"] + st["exact_confirmations"] == st["bloom_positives"]
    assert st["exact_confirmations"] == len(stream) - len(urls)
    assert len(s) == 10_000
    assert st["fill_ratio"] > 0.99
    assert st["estimated_false_positive_rate"] > 0.9  # the operator sees a saturated filter


@pytest.mark.parametrize("bloom", BACKENDS)
def test_exact_store_is_asked_only_about_bloom_positives(bloom: str) -> None:
    s = SeenSet(50_000, 0.01, bloom=bloom)
    asked: list[int] = []
    store = s._store
    assert store is not None
    real = store.contains_many

    def spy(hashes: list[int]) -> list[bool]:
        asked.extend(hashes)
        return real(hashes)

    store.contains_many = spy  # type: ignore[method-assign]
    urls = _urls(5000)
    _feed(s, urls)  # all new, filter far from full: almost no lookups
    assert len(asked) == s.bloom_positives < 50
    positives, confirmations = s.bloom_positives, s.exact_confirmations
    assert s.check_and_add(urls[:1000]) == [False] * 1000  # repeats: Bloom says maybe, store confirms
    assert s.bloom_positives - positives == 1000
    assert s.exact_confirmations - confirmations == 1000
    assert len(asked) == s.bloom_positives


# --- Bloom-only (lossy) mode ------------------------------------------------------------


@pytest.mark.parametrize("bloom", BACKENDS)
def test_lossy_mode_drops_some_and_its_estimate_is_within_2x(bloom: str) -> None:
    s = SeenSet(1000, 0.01, exact=False, bloom=bloom)
    urls = _urls(4000)  # all distinct: every "seen" verdict is a dropped URL
    verdicts = _feed(s, urls, batch=50)
    dropped = verdicts.count(False)
    st = s.stats()
    assert dropped > 100
    assert dropped / 2 <= st["estimated_false_positives"] <= dropped * 2
    assert st["bloom_positives"] == dropped
    assert st["false_positives"] == 0 and st["exact_confirmations"] == 0  # it cannot know
    assert 0.3 < st["estimated_false_positive_rate"] < 1.0
    assert len(s) == 4000 - dropped
    # Repeats are never reported new (a Bloom filter has no false negatives).
    assert not any(s.check_and_add(urls[:500]))


@pytest.mark.parametrize("bloom", BACKENDS)
def test_lossy_mode_within_capacity_drops_about_the_error_rate(bloom: str) -> None:
    s = SeenSet(20_000, 0.01, exact=False, bloom=bloom)
    verdicts = _feed(s, _urls(20_000), batch=500)
    dropped = verdicts.count(False)
    assert dropped < 0.01 * 20_000  # the rate is reached only at the very end
    st = s.stats()
    assert 0.005 < st["estimated_false_positive_rate"] < 0.02
    assert dropped / 2 - 5 <= st["estimated_false_positives"] <= dropped * 2 + 5


def test_lossy_mode_is_much_smaller_than_exact_mode() -> None:
    exact, lossy = SeenSet(100_000), SeenSet(100_000, exact=False)
    urls = _urls(50_000)
    _feed(exact, urls, 1000)
    _feed(lossy, urls, 1000)
    assert lossy.memory_bytes() * 3 < exact.memory_bytes()
    assert exact.memory_bytes() > 50_000 * 40  # the exact store is counted
    assert lossy.stats()["memory_bytes"] == lossy.memory_bytes()


# --- persistence ------------------------------------------------------------------------


@pytest.mark.parametrize("bloom", BACKENDS)
@pytest.mark.parametrize("exact", [True, False])
def test_snapshot_round_trip_keeps_verdicts_and_counters(bloom: str, exact: bool) -> None:
    s = SeenSet(2000, 0.01, exact=exact, bloom=bloom)
    old = _urls(3000)
    _feed(s, old)
    blob = s.snapshot()
    r = SeenSet.restore(blob)
    assert (r.exact, r.bloom_backend, r.capacity) == (exact, bloom, 2000)
    before, after = s.stats(), r.stats()
    assert before == after
    new = _urls(300, tag="new/")
    assert s.check_and_add(old[:200] + new) == r.check_and_add(old[:200] + new)
    assert not any(r.check_and_add(old[:200]))
    assert len(r) == len(s)


def test_snapshot_is_compact() -> None:
    s = SeenSet(10_000)
    _feed(s, _urls(10_000))
    # 8 bytes per exact hash plus the Bloom bits (~1.2 bytes per capacity at 1%).
    assert len(s.snapshot()) < 10_000 * 8 + 10_000 * 1.3 + 2000


def test_restore_rejects_garbage_with_storage_error() -> None:
    with pytest.raises(StorageError):
        SeenSet.restore(b"not a snapshot")


# --- configuration ----------------------------------------------------------------------


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"capacity": 0}, "capacity"),
        ({"capacity": 10, "error_rate": 1.5}, "error_rate"),
        ({"capacity": 10, "error_rate": 0}, "error_rate"),
        ({"capacity": 10, "bloom": "redis"}, "bloom"),
    ],
)
def test_bad_configuration_raises_config_error(kwargs: dict, match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        SeenSet(**kwargs)


def test_default_backend_is_pybloom() -> None:
    assert SeenSet(10).bloom_backend == "pybloom"
