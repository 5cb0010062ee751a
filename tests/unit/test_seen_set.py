"""The seen set in memory: first sighting wins, nothing lost in exact mode, honest lossy mode."""

from __future__ import annotations

import random
import sys
from collections import Counter

import pytest

from crawler.errors import ConfigError
from crawler.seen import SeenSet, url_hash64
from crawler.seen.store import ExactStore
from tests.unit.seen_kit import BACKENDS, feed, make_urls, numbers


# --- exact mode -------------------------------------------------------------------------


@pytest.mark.parametrize("bloom", BACKENDS)
def test_first_sighting_is_novel_and_batch_repeats_are_not(bloom: str) -> None:
    s = SeenSet(1000, bloom=bloom)
    assert s.check_and_add(["a", "b", "a", "c", "b", "a"]) == [True, True, False, True, False, False]
    assert s.check_and_add(["c", "d", "d", "a"]) == [False, True, False, False]
    assert s.check_and_add([]) == []
    assert len(s) == 4
    st = numbers(s)
    assert st["checks"] == 10 and st["novel"] == 4 and st["already_seen"] == 6


@pytest.mark.parametrize("bloom", BACKENDS)
def test_hash_entry_point_matches_url_entry_point(bloom: str) -> None:
    urls = make_urls(500) + make_urls(50)
    by_url = SeenSet(1000, bloom=bloom).check_and_add(urls)
    by_hash = SeenSet(1000, bloom=bloom).check_and_add_hashes([url_hash64(u) for u in urls])
    assert by_url == by_hash
    assert sum(by_url) == 500


@pytest.mark.parametrize("bloom", BACKENDS)
def test_exact_mode_loses_nothing_a_hundred_times_over_initial_capacity_with_a_lying_filter(bloom: str) -> None:
    # A loose error rate (0.5) makes the filter lie often, so the exact store must catch it.
    s = SeenSet(100, 0.5, exact=True, bloom=bloom)
    urls = make_urls(10_000)
    rng = random.Random(5)
    # Each URL appears 1-3 times in a shuffled stream: novel exactly once, at its first position.
    stream = [u for u in urls for _ in range(rng.randint(1, 3))]
    rng.shuffle(stream)
    verdicts = feed(s, stream, batch=250)
    novel_urls = Counter(u for u, novel in zip(stream, verdicts) if novel)
    assert set(novel_urls) == set(urls)
    assert set(novel_urls.values()) == {1}
    first_pos: dict[str, int] = {}
    for i, u in enumerate(stream):
        first_pos.setdefault(u, i)
    assert all(verdicts[i] == (first_pos[u] == i) for i, u in enumerate(stream))
    st = numbers(s)
    assert st["false_positives"] > 0  # the filter did lie, and the exact store caught it
    assert st["false_positives"] + st["exact_confirmations"] == st["bloom_positives"]
    assert st["exact_confirmations"] == len(stream) - len(urls)
    assert len(s) == 10_000
    assert st["bloom_stages"] >= 6  # the chain grew: 100, 200, ... 6400
    assert 0.05 < st["estimated_false_positive_rate"] < 0.5  # and kept its rate


@pytest.mark.parametrize("bloom", BACKENDS)
def test_exact_store_is_asked_only_about_bloom_positives(bloom: str) -> None:
    s = SeenSet(50_000, 0.01, bloom=bloom)
    asked: list[int] = []
    store = s._store
    assert isinstance(store, ExactStore)  # no path: the store is in memory
    real = store.contains_many

    def spy(hashes: list[int]) -> list[bool]:
        asked.extend(hashes)
        return real(hashes)

    store.contains_many = spy  # type: ignore[method-assign]
    urls = make_urls(5000)
    feed(s, urls)  # all new, filter far from full: almost no lookups
    assert len(asked) == s.bloom_positives < 50
    positives, confirmations = s.bloom_positives, s.exact_confirmations
    assert s.check_and_add(urls[:1000]) == [False] * 1000  # repeats: Bloom says maybe, store confirms
    assert s.bloom_positives - positives == 1000
    assert s.exact_confirmations - confirmations == 1000
    assert len(asked) == s.bloom_positives


# --- Bloom-only (lossy) mode ------------------------------------------------------------


@pytest.mark.parametrize("bloom", BACKENDS)
def test_lossy_mode_drops_some_and_its_estimate_is_within_2x(bloom: str) -> None:
    s = SeenSet(1000, 0.5, exact=False, bloom=bloom)  # a loose rate: drops worth counting
    urls = make_urls(4000)  # all distinct: every "seen" verdict is a dropped URL
    verdicts = feed(s, urls, batch=50)
    dropped = verdicts.count(False)
    st = numbers(s)
    assert dropped > 100
    assert dropped / 2 <= st["estimated_false_positives"] <= dropped * 2
    assert st["bloom_positives"] == dropped
    assert st["false_positives"] == 0 and st["exact_confirmations"] == 0  # it cannot know
    assert 0.05 < st["estimated_false_positive_rate"] < 0.5
    assert len(s) == 4000 - dropped
    # Repeats are never reported new (a Bloom filter has no false negatives).
    assert not any(s.check_and_add(urls[:500]))


@pytest.mark.parametrize("bloom", BACKENDS)
def test_lossy_mode_drops_less_than_the_error_rate(bloom: str) -> None:
    s = SeenSet(2_000, 0.1, exact=False, bloom=bloom)
    verdicts = feed(s, make_urls(20_000), batch=500)
    dropped = verdicts.count(False)
    assert 0 < dropped < 0.1 * 20_000  # the chain's rate approaches 0.1 only from below
    st = numbers(s)
    assert 0.01 < st["estimated_false_positive_rate"] < 0.1
    assert dropped / 2 - 5 <= st["estimated_false_positives"] <= dropped * 2 + 5


def test_lossy_mode_is_much_smaller_than_exact_mode() -> None:
    exact, lossy = SeenSet(100_000), SeenSet(100_000, exact=False)
    urls = make_urls(50_000)
    feed(exact, urls, 1000)
    feed(lossy, urls, 1000)
    assert lossy.memory_bytes() * 3 < exact.memory_bytes()
    assert exact.memory_bytes() > 50_000 * 40  # the exact store is counted
    assert lossy.stats()["memory_bytes"] == lossy.memory_bytes()


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


def test_default_backend_is_rbloom() -> None:
    assert SeenSet(10).bloom_backend == "rbloom"
    assert SeenSet(10, bloom="pybloom").check_and_add(["a", "a"]) == [True, False]  # still available


def test_rbloom_without_rbloom_installed_is_a_config_error_naming_the_fix(tmp_path, monkeypatch) -> None:
    monkeypatch.setitem(sys.modules, "rbloom", None)  # makes ``import rbloom`` fail
    with pytest.raises(ConfigError, match=r"rbloom.*pip install -e \. \(rbloom is a dependency"):
        SeenSet(1000, bloom="rbloom")
    with pytest.raises(ConfigError, match="rbloom"):
        SeenSet(1000, bloom="rbloom", path=tmp_path / "seen.db")
    assert list(tmp_path.iterdir()) == []  # refused before anything was created on disk
    assert SeenSet(1000, bloom="pybloom").check_and_add(["a", "a"]) == [True, False]  # pybloom needs no rbloom
