"""The seen set's filter chain (crawler.seen.scalable): its rate holds at any size, and
its snapshots (new and version-1) open."""

from __future__ import annotations

import random

import pytest

from crawler.seen import SeenSet, url_hash64
from crawler.seen.bloom import make_bloom
from crawler.seen.scalable import GROWTH, ScalableBloom, chain_plan, stage_error_rate
from crawler.seen.snapshot import write_bloom_file
from tests.unit.seen_kit import BACKENDS, feed, make_urls, numbers


def _hashes(n: int, seed: int) -> list[int]:
    rng = random.Random(seed)
    return [rng.getrandbits(64) for _ in range(n)]


@pytest.mark.parametrize("bloom", BACKENDS)
def test_a_chain_at_twenty_times_its_initial_capacity_keeps_its_rate(bloom: str) -> None:
    chain = ScalableBloom(bloom, 1_000, 0.01)
    stored = _hashes(20_000, 1)
    lied = sum(chain.check_and_add(h) for h in stored)  # all distinct: a "seen" is a lie
    probes = _hashes(10_000, 2)  # known new: a different seed
    measured = sum(chain.contains(h) for h in probes) / len(probes)
    assert len(chain.stages) == 5  # 1k + 2k + 4k + 8k + 16k >= 20k
    assert measured < 0.02 and lied < 0.02 * len(stored)  # within 2x of the configured 1%
    assert chain.false_positive_rate() < 0.01  # the estimate: 1 - prod(1 - fill_i^k_i)
    assert measured / 3 < chain.false_positive_rate() < measured * 3 + 0.001
    assert all(chain.contains(h) for h in stored)  # no false negatives across stages


@pytest.mark.parametrize("bloom", BACKENDS)
def test_a_lossy_set_twenty_times_past_its_capacity_drops_under_twice_the_rate(bloom: str) -> None:
    # The old fixed filter at 20x its capacity dropped nearly every new URL.
    s = SeenSet(1_000, 0.01, exact=False, bloom=bloom)
    verdicts = feed(s, make_urls(20_000), batch=500)
    late = verdicts[-5_000:]  # the newest URLs meet the fullest chain
    assert late.count(False) < 0.02 * len(late)
    st = numbers(s)
    assert st["estimated_false_positive_rate"] < 0.01 and st["bloom_stages"] == 5


def test_stage_rates_sum_below_the_configured_rate_and_the_plan_matches_real_filters() -> None:
    assert sum(stage_error_rate(0.01, i) for i in range(200)) < 0.01
    plan = chain_plan(1_000, 0.01, 20_000)
    assert [cap for cap, _, _ in plan] == [1_000 * GROWTH**i for i in range(5)]
    chain = ScalableBloom("rbloom", 1_000, 0.01)
    chain.add_many(_hashes(20_000, 3))
    assert [s.capacity for s in chain.stages] == [cap for cap, _, _ in plan]
    for (_, _, bits), stage in zip(plan, chain.stages):
        assert abs(stage.bloom.m - bits) <= 64  # rbloom rounds to whole 64-bit words


@pytest.mark.parametrize("bloom", BACKENDS)
def test_a_grown_chain_survives_a_snapshot_round_trip(tmp_path, bloom: str) -> None:
    urls = make_urls(3_000)
    with SeenSet(200, 0.01, exact=False, bloom=bloom, path=tmp_path / "lossy") as s:
        feed(s, urls)
        saved = s._bloom.to_bytes()
        stages = numbers(s)["bloom_stages"]
    assert stages == 4  # 200 + 400 + 800 + 1600 >= 3000
    with SeenSet(200, 0.01, exact=False, bloom=bloom, path=tmp_path / "lossy") as r:
        assert r.bloom_source == "snapshot" and r._bloom.to_bytes() == saved
        assert not any(r.check_and_add(urls))
        assert r.check_and_add(make_urls(10, "new")).count(True) >= 9
    with SeenSet(200, 0.01, bloom=bloom, path=tmp_path / "exact.db") as e:
        feed(e, urls)
    with SeenSet(200, 0.01, bloom=bloom, path=tmp_path / "exact.db") as e:
        assert e.bloom_source == "snapshot" and numbers(e)["bloom_stages"] == 4
        assert not any(e.check_and_add(urls))


def _v1_snapshot(path: str, bloom: str, capacity: int, hashes: list[int], **extra: object) -> None:
    """A ``.bloom`` file as the single-filter code wrote it (version 1)."""
    f = make_bloom(bloom, capacity, 0.01)
    for h in hashes:
        f.check_and_add(h)
    header = {"version": 1, "bloom": bloom, "capacity": capacity, "error_rate": 0.01, **extra}
    write_bloom_file(path, header, f.to_bytes(), durable=False)


@pytest.mark.parametrize("bloom", BACKENDS)
def test_a_version_1_bloom_only_snapshot_opens_as_the_first_stage(tmp_path, bloom: str) -> None:
    urls = make_urls(800)
    counters = {"checks": 800, "novel": 800}
    _v1_snapshot(str(tmp_path / "lossy.bloom"), bloom, 1_000, [url_hash64(u) for u in urls], exact=False, counters=counters)
    with SeenSet(50, 0.01, exact=False, bloom=bloom, path=tmp_path / "lossy") as s:
        assert s.bloom_source == "snapshot" and s.novel == 800
        first = s._bloom.stages[0]
        assert first.capacity == 1_000 and 700 < first.count < 900  # counted from its fill
        assert not any(s.check_and_add(urls))
        feed(s, make_urls(2_000, "more"))  # grows past the old filter: stages 2000, 4000
        assert [st.capacity for st in s._bloom.stages] == [1_000, 2_000]
        assert s.estimated_false_positive_rate() < 2 * 0.01


def test_a_version_1_exact_snapshot_opens_unless_it_is_past_its_capacity(tmp_path) -> None:
    urls = make_urls(600)
    path = tmp_path / "seen.db"
    with SeenSet(1_000, 0.01, path=path) as s:
        feed(s, urls)
        db_id, rows = s._disk.db_id, len(s)  # type: ignore[union-attr]  # a path: a disk store
    hashes = [url_hash64(u) for u in urls]
    _v1_snapshot(str(path) + ".bloom", "rbloom", 1_000, hashes, exact=True, db_id=db_id, rows=rows)
    with SeenSet(1_000, 0.01, path=path) as r:
        assert r.bloom_source == "snapshot" and not any(r.check_and_add(urls))
    # The same rows in a filter sized for 100: past its capacity, so rebuilt as a chain.
    _v1_snapshot(str(path) + ".bloom", "rbloom", 100, hashes, exact=True, db_id=db_id, rows=rows)
    with SeenSet(1_000, 0.01, path=path) as r:
        assert r.bloom_source == "rebuilt" and "past its capacity" in r.bloom_source_reason
        assert r.estimated_false_positive_rate() < 0.01
