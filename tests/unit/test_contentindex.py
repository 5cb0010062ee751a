"""The sharded duplicate-content index: the same verdicts on one shard or many, compact
references instead of URLs, and a log that survives a restart."""

from __future__ import annotations

import asyncio
import random

import pytest

from crawler.clock import MockClock
from crawler.content.index import ContentIndexGroup, ContentShard, ref_hex, ref_of
from crawler.content.fingerprints import SimHashIndex, content_sha256, hamming, simhash64, text_fingerprint
from crawler.errors import ConfigError, StorageError
from crawler.services.contentindex import ContentIndexService, shard_log
from crawler.urls import url_hash


def _sha(s: str) -> str:
    return content_sha256(s.encode())


def _flip(fp: int, bits: list[int]) -> int:
    for b in bits:
        fp ^= 1 << b
    return fp


def _check(items, *, shards: int = 1, tables: int = 4, k: int = 3, path: str | None = None):
    svc = ContentIndexService(k, tables, MockClock(), path=path, shards=shards)
    return svc, asyncio.run(svc.check_and_add(items))


def _u(i: int) -> str:
    return f"https://h{i}.example/p"


def test_a_verdict_names_the_original_by_its_url_hash_never_by_a_url_string():
    _, out = _check([(_u(1), _sha("A"), None), (_u(2), _sha("B"), None), (_u(3), _sha("A"), None)])
    assert out == [(None, None), (None, None), ("exact", url_hash(_u(1)))]
    assert ref_hex(ref_of(_u(1))) == url_hash(_u(1))


def test_exact_and_near_duplicates_across_batches_point_to_the_first_original():
    fp = 0xABCD_EF01_2345_6789
    svc = ContentIndexService(3, 4, MockClock())
    first = asyncio.run(svc.check_and_add([(_u(1), _sha("1"), fp)]))
    later = asyncio.run(svc.check_and_add([
        (_u(2), _sha("2"), _flip(fp, [1, 2])),       # near the original: not indexed itself
        (_u(3), _sha("2"), _flip(fp, [1, 2])),       # the same body: near the same original
        (_u(4), _sha("3"), _flip(fp, [1, 2, 3, 4])),  # 2 bits from _u(2), 4 from the original
        (_u(5), _sha("1"), None),                    # an exact copy of the original
    ]))
    assert first == [(None, None)]
    orig = url_hash(_u(1))
    assert later == [("near", orig), ("near", orig), (None, None), ("exact", orig)]
    st = asyncio.run(svc.stats())
    assert (st["originals"], st["exact_dups"], st["near_dups"]) == (2, 1, 2)


@pytest.mark.parametrize("shards", [1, 3])
def test_a_page_is_never_a_duplicate_of_itself(shards):
    """A recrawl of an unchanged or slightly changed page, or a check retried after the
    index restarted, must not flag the page as a copy of itself (that would count against
    its host's novelty); another URL with that body still is a duplicate."""
    fp = 0x0F0F_1234_5678_9ABC
    svc = ContentIndexService(3, 4, MockClock(), shards=shards)

    def check(items):
        return asyncio.run(svc.check_and_add(items))

    assert check([(_u(1), _sha("1"), fp)]) == [(None, None)]
    assert check([(_u(1), _sha("1"), fp)]) == [(None, None)]                    # unchanged
    assert check([(_u(1), _sha("1b"), _flip(fp, [5, 9]))]) == [(None, None)]    # slightly changed
    assert check([(_u(1), _sha("1b"), _flip(fp, [5, 9]))]) == [(None, None)]    # and again
    orig = url_hash(_u(1))
    assert check([(_u(2), _sha("1"), fp), (_u(3), _sha("1b"), None)]) == [("exact", orig), ("exact", orig)]
    st = asyncio.run(svc.stats())
    assert (st["exact_dups"], st["near_dups"]) == (2, 0)


def test_pages_without_a_fingerprint_get_the_exact_check_only():
    short = text_fingerprint("404 Not Found")
    assert short is None
    _, out = _check([(_u(1), _sha("404"), short), (_u(2), _sha("403"), None), (_u(3), _sha("x"), 0), (_u(4), _sha("y"), 0)])
    assert out == [(None, None)] * 4


def test_near_duplicates_within_one_batch_are_found():
    fp = 0x0123_4567_89AB_CDEF
    _, out = _check([(_u(1), _sha("1"), fp), (_u(2), _sha("2"), _flip(fp, [63])), (_u(3), _sha("3"), ~fp & (2**64 - 1))])
    assert out == [(None, None), ("near", url_hash(_u(1))), (None, None)]


@pytest.mark.parametrize("shards, tables", [(1, 4), (3, 4), (7, 5), (16, 6), (4, 10), (5, 20)])
def test_sharding_changes_where_entries_live_not_the_verdicts(shards, tables):
    rng = random.Random(shards * 100 + tables)
    bases = [rng.getrandbits(64) for _ in range(60)]
    items = []
    for i in range(1500):
        b = bases[rng.randrange(len(bases))]
        fp = _flip(b, rng.sample(range(64), rng.randrange(0, 6))) if rng.random() < 0.7 else rng.getrandbits(64)
        items.append((_u(i), _sha(str(rng.randrange(1200))), fp if i % 7 else None))
    batches = [items[i:i + 97] for i in range(0, len(items), 97)]
    one = ContentIndexService(3, tables, MockClock(), shards=1)
    many = ContentIndexService(3, tables, MockClock(), shards=shards)
    for b in batches:
        assert asyncio.run(many.check_and_add(b)) == asyncio.run(one.check_and_add(b))
    st = asyncio.run(many.stats())
    assert st["shards"] == shards and st["originals"] == asyncio.run(one.stats())["originals"]
    per_shard = [sh.shard.stats()["near_entries"] for sh in many.handles]
    assert sum(per_shard) == st["near_index_entries"] and (shards == 1 or max(per_shard) < sum(per_shard))


@pytest.mark.parametrize("tables", [4, 10, 20])
def test_near_verdicts_agree_with_a_scan_of_every_original(tables):
    # The permuted tables find every original within k (pigeonhole), and only those,
    # whether a table keys on one block (4) or on B - k of B blocks (10: B = 5; 20: B = 6).
    rng = random.Random(9)
    base = [rng.getrandbits(64) for _ in range(40)]
    svc = ContentIndexService(3, tables, MockClock(), shards=5)
    originals: list[tuple[int, str]] = []
    for i in range(800):
        fp = _flip(base[i % 40], rng.sample(range(64), rng.randrange(0, 7)))
        [(kind, of)] = asyncio.run(svc.check_and_add([(_u(i), _sha(str(i)), fp)]))
        within = [(hamming(fp, o), h) for o, h in originals if hamming(fp, o) <= 3]
        if within:
            assert kind == "near" and of in {h for d, h in within if d == min(within)[0]}
        else:
            assert kind is None
            originals.append((fp, url_hash(_u(i))))


def test_candidates_checked_per_lookup_follow_the_width_of_the_table_keys():
    rng = random.Random(3)
    fps = [rng.getrandbits(64) for _ in range(20000)]
    means = []
    for tables in (10, 4, 6, 8):
        svc = ContentIndexService(3, tables, MockClock())
        asyncio.run(svc.check_and_add([(_u(i), _sha(str(i)), f) for i, f in enumerate(fps)]))
        before = asyncio.run(svc.stats())
        asyncio.run(svc.check_and_add([(_u(-i), _sha(f"q{i}"), rng.getrandbits(64)) for i in range(500)]))
        after = asyncio.run(svc.stats())
        assert after["table_probes"] - before["table_probes"] == 500 * tables
        means.append(after["candidates_checked_mean"])
    # One 16-bit block per table: ~20000 * 4 / 65536 ~ 1.2 candidates per lookup; 8-bit
    # blocks: ~625. Ten tables keyed on 2 of 5 blocks (25-26 bits): almost none.
    assert means[0] < means[1] < means[2] < means[3]


def test_the_log_restores_the_index_after_a_restart(tmp_path):
    path = str(tmp_path / "state" / "content")
    fp = 0xFEED_FACE_CAFE_BEEF
    clock = MockClock()
    svc = ContentIndexService(3, 4, clock, path=path, every_s=30.0, shards=2)
    asyncio.run(svc.check_and_add([(_u(1), _sha("one"), fp), (_u(2), _sha("two"), None)]))
    asyncio.run(svc.save())
    again = ContentIndexService(3, 4, clock, path=path, shards=2)
    out = asyncio.run(again.check_and_add([(_u(4), _sha("two"), None), (_u(5), _sha("x"), _flip(fp, [5]))]))
    assert out == [("exact", url_hash(_u(2))), ("near", url_hash(_u(1)))]


def test_saves_write_only_what_changed_and_a_torn_tail_is_ignored(tmp_path):
    path = str(tmp_path / "content")
    svc = ContentIndexService(3, 4, MockClock(), path=path)
    asyncio.run(svc.check_and_add([(_u(i), _sha(str(i)), None) for i in range(100)]))
    asyncio.run(svc.save())
    log = shard_log(path, 0)
    size = len(open(log, "rb").read())
    asyncio.run(svc.save())  # nothing new: nothing written
    assert len(open(log, "rb").read()) == size
    asyncio.run(svc.check_and_add([(_u(1000), _sha("new"), None)]))
    asyncio.run(svc.save())
    grown = len(open(log, "rb").read())
    assert 0 < grown - size < 100  # one entry, not the whole index again
    with open(log, "ab") as f:
        f.write(b"CIX1\x00\x00\x05\x00\x00\x00partial")  # a save cut short by a crash
    restored = ContentShard(3, 4, log)
    assert restored.stats()["exact_entries"] == 101


def test_a_corrupt_log_is_a_storage_error(tmp_path):
    log = tmp_path / "content-000.log"
    log.write_bytes(b"garbage that is not a log at all")
    with pytest.raises(StorageError):
        ContentShard(3, 4, str(log))


@pytest.mark.parametrize("k, tables, shards", [(3, 3, 1), (3, 65, 1), (-1, 4, 1), (3, 4, 0), (3, 4, 300)])
def test_bad_parameters_are_config_errors(k, tables, shards):
    with pytest.raises(ConfigError):
        ContentIndexGroup(k, tables, shards)


def test_memory_per_indexed_page_is_what_the_docstring_states():
    svc = ContentIndexService(3, 4, MockClock(), shards=3)
    rng = random.Random(5)
    asyncio.run(svc.check_and_add([(_u(i), _sha(str(i)), rng.getrandbits(64)) for i in range(3000)]))
    st = asyncio.run(svc.stats())
    assert st["originals"] == 3000
    assert st["bytes"] == 3000 * (25 + 4 * 16)  # 89 B per original with 4 tables


def test_short_shell_pages_are_not_near_duplicates_of_each_other():
    text = "Loading, please wait"
    raw = [(_u(1), _sha("shop"), simhash64(text)), (_u(2), _sha("news"), simhash64(text))]
    assert _check(raw)[1][1] == ("near", url_hash(_u(1)))
    guarded = [(u, s, text_fingerprint(text)) for u, s, _ in raw]
    assert _check(guarded)[1] == [(None, None), (None, None)]


def test_reference_index_and_sharded_index_agree_on_random_neighbours():
    rng = random.Random(11)
    ref = SimHashIndex(3, 4)
    svc = ContentIndexService(3, 4, MockClock(), shards=4)
    stored = [rng.getrandbits(64) for _ in range(2000)]
    for i, fp in enumerate(stored):
        ref.add(fp, url_hash(_u(i)))
    asyncio.run(svc.check_and_add([(_u(i), _sha(f"s{i}"), fp) for i, fp in enumerate(stored)]))
    for j in range(300):
        probe = _flip(stored[rng.randrange(2000)], rng.sample(range(64), rng.randrange(0, 5)))
        want = ref.nearest(probe)
        [(kind, of)] = asyncio.run(svc.check_and_add([(_u(10_000 + j), _sha(f"p{j}"), probe)]))
        if want is None:
            assert kind is None
        else:
            nearest = [key for key, d in ref.query(probe)[0] if d == want[1]]
            assert kind == "near" and of in nearest
