"""The seen set on disk: crash-safe exact store in SQLite, Bloom snapshots, Bloom-only files."""

from __future__ import annotations

import gc
import random

import pytest

from crawler.errors import ConfigError, StorageError
from crawler.seen import SeenSet, url_hash64
from tests.unit.seen_kit import BACKENDS, feed, make_urls, numbers


def _disk(tmp_path, capacity: int = 1000, **kwargs) -> SeenSet:
    return SeenSet(capacity, 0.01, path=tmp_path / "seen.db", **kwargs)


def test_default_mode_stays_in_memory_and_writes_nothing(tmp_path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    s = SeenSet(100)
    s.check_and_add(make_urls(50))
    s.close()  # a no-op without a path
    assert s.path is None and list(tmp_path.iterdir()) == []
    assert s.check_and_add(make_urls(1)) == [False]
    with pytest.raises(ConfigError, match="no path"):
        s.snapshot_bloom()


@pytest.mark.parametrize("bloom", BACKENDS)
def test_disk_mode_answers_exactly_like_memory_mode_with_a_lying_filter(tmp_path, bloom: str) -> None:
    rng = random.Random(7)
    urls = make_urls(6000)
    stream = [u for u in urls for _ in range(rng.randint(1, 3))]
    rng.shuffle(stream)
    mem = SeenSet(100, 0.5, bloom=bloom)  # a loose rate: the filter lies often
    with SeenSet(100, 0.5, bloom=bloom, path=tmp_path / "s.db", cache_size=500) as disk:
        assert feed(disk, stream, batch=250) == feed(mem, stream, batch=250)
        st, ref = numbers(disk), numbers(mem)
        for key in ("checks", "novel", "bloom_positives", "exact_confirmations", "false_positives", "items"):
            assert st[key] == ref[key], key
        assert st["false_positives"] > 200  # the filter lied often; SQLite caught every lie
        assert st["items"] == 6000 == len(disk)
        # Bloom positives are settled by this batch, the hot cache or SQLite.
        assert 0 < st["cache_hits"] and 0 < st["db_lookups"] <= st["bloom_positives"]
        assert disk.stats()["path"] == str(tmp_path / "s.db") and st["disk_bytes"] > 6000 * 8


def test_disk_mode_batch_duplicates_are_novel_once(tmp_path) -> None:
    with _disk(tmp_path) as s:
        assert s.check_and_add(["a", "b", "a", "c", "b", "a"]) == [True, True, False, True, False, False]
        assert s.check_and_add(["c", "d", "d", "a"]) == [False, True, False, False]
        assert s.check_and_add([]) == []
        assert len(s) == 4
    with _disk(tmp_path, capacity=1, cache_size=0) as s:  # every check a Bloom positive
        assert s.check_and_add(["x", "y", "x", "a"]) == [True, True, False, False]
        assert len(s) == 6


EXTREMES = [0, 1, 2**63 - 1, 2**63, 2**63 + 1, 2**64 - 1]


def test_unsigned_hashes_map_to_distinct_signed_sqlite_keys_and_back(tmp_path) -> None:
    import sqlite3

    # capacity 1 saturates the filter: every answer below comes from SQLite, not the Bloom.
    s = _disk(tmp_path, capacity=1, cache_size=0)
    assert s.check_and_add_hashes(EXTREMES) == [True] * 6
    assert s.check_and_add_hashes(EXTREMES + [2**62]) == [False] * 6 + [True]
    assert numbers(s)["db_lookups"] >= 6
    s.close()
    db = sqlite3.connect(tmp_path / "seen.db")
    stored = {h for (h,) in db.execute("SELECT h FROM seen")}
    db.close()
    assert stored == {0, 1, 2**63 - 1, -(2**63), -(2**63) + 1, -1, 2**62}
    (tmp_path / "seen.db.bloom").unlink()  # force the rebuild path: hashes read back unsigned
    with _disk(tmp_path, capacity=1000, cache_size=0) as r:
        assert r.bloom_source == "rebuilt"
        lookups, fps = r.db_lookups, r.false_positives
        assert r.check_and_add_hashes(EXTREMES) == [False] * 6
        assert r.db_lookups - lookups == 6 and r.false_positives == fps


@pytest.mark.parametrize("bloom", BACKENDS)
def test_reopen_after_close_loads_the_bloom_snapshot_and_keeps_counters(tmp_path, bloom: str) -> None:
    old, new = make_urls(3000), make_urls(500, tag="new/")
    s = _disk(tmp_path, capacity=5000, bloom=bloom)
    feed(s, old + old[:1000])
    before = s.stats()
    s.close()
    assert (tmp_path / "seen.db.bloom").exists()
    with pytest.raises(StorageError, match="closed"):
        s.check_and_add(["late"])
    s.close()  # idempotent
    r = SeenSet.open(tmp_path / "seen.db", 5000, 0.01, bloom=bloom)
    assert r.bloom_source == "snapshot" and r.bloom_rebuild_seconds == 0.0
    after = r.stats()
    for key in ("items", "checks", "novel", "bloom_positives", "false_positives", "cache_hits", "db_lookups"):
        assert after[key] == before[key], key
    assert after["fill_ratio"] == pytest.approx(before["fill_ratio"])
    assert not any(r.check_and_add(old))
    assert all(r.check_and_add(new))
    assert len(r) == 3500
    r.close()


def test_drop_without_close_keeps_every_committed_url_and_rebuilds_the_stale_bloom(tmp_path) -> None:
    first, second = make_urls(2000), make_urls(2000, tag="2/")
    s = _disk(tmp_path, capacity=4000)
    feed(s, first)
    s.snapshot_bloom()  # a snapshot at 2000 rows ...
    feed(s, second)  # ... then 2000 more committed rows, and no close (a crash)
    del s
    gc.collect()  # sqlite3.Connection sits in a reference cycle: collect it to free the lock
    r = _disk(tmp_path, capacity=4000)
    assert r.bloom_source == "rebuilt"
    assert "rows 2000 != 4000" in r.bloom_source_reason
    assert r.check_and_add(first + second) == [False] * 4000
    assert r.stats()["novel"] == 4000  # counters ride in the same transactions
    r.close()


def test_missing_or_damaged_snapshot_triggers_a_rebuild(tmp_path) -> None:
    urls = make_urls(1500)
    with _disk(tmp_path) as s:
        feed(s, urls)
    snap = tmp_path / "seen.db.bloom"
    raw = bytearray(snap.read_bytes())
    raw[-10] ^= 0xFF  # one flipped bit in the filter
    snap.write_bytes(bytes(raw))
    with _disk(tmp_path) as r:
        assert r.bloom_source == "rebuilt" and "damaged" in r.bloom_source_reason
        assert not any(r.check_and_add(urls))
    snap.unlink()
    with _disk(tmp_path) as r:
        assert r.bloom_source == "rebuilt" and r.bloom_source_reason == "no snapshot"
        positives = r.bloom_positives
        assert not any(r.check_and_add(urls))
        assert r.bloom_positives - positives == 1500  # the rebuilt filter holds every stored hash


@pytest.mark.parametrize("bloom", BACKENDS)
@pytest.mark.parametrize("capacity, error_rate", [(5000, 0.01), (2000, 0.2), (2000, 1e-5)])
def test_a_rebuilt_filter_has_exactly_the_bits_of_the_incremental_one(
    tmp_path, bloom: str, capacity: int, error_rate: float
) -> None:
    # pybloom's rebuild recomputes its probes with numpy: it must match make_hashes bit for bit.
    hashes = [url_hash64(u) for u in make_urls(1500)] + EXTREMES
    with SeenSet(capacity, error_rate, bloom=bloom, path=tmp_path / "s.db") as s:
        s.check_and_add_hashes(hashes)
        incremental = [st.bloom.to_bytes() for st in s._bloom.stages]
    (tmp_path / "s.db.bloom").unlink()
    with SeenSet(capacity, error_rate, bloom=bloom, path=tmp_path / "s.db") as r:
        assert r.bloom_source == "rebuilt"
        # Stage bits only: a stage's count of new URLs differs by the false positives
        # (new to the store, not to the filter), which the rebuild counts.
        assert [st.bloom.to_bytes() for st in r._bloom.stages] == incremental


@pytest.mark.parametrize("bloom", BACKENDS)
def test_a_rebuilt_chain_has_the_stages_of_the_incremental_one_and_every_hash(tmp_path, bloom: str) -> None:
    # The rebuild streams hashes in key order, not arrival order, so a stage holds other
    # hashes than it did (its bits differ); its sizes must not, and its counts only by
    # the false positives (hashes new to the store that the chain took for seen).
    hashes = [url_hash64(u) for u in make_urls(1500)] + EXTREMES
    with SeenSet(300, 0.01, bloom=bloom, path=tmp_path / "s.db") as s:
        s.check_and_add_hashes(hashes)
        layout = [(st.capacity, st.error_rate) for st in s._bloom.stages]
        counted = sum(st.count for st in s._bloom.stages)
        assert counted + s.false_positives == len(hashes) and len(layout) == 3
    (tmp_path / "s.db.bloom").unlink()
    with SeenSet(300, 0.01, bloom=bloom, path=tmp_path / "s.db") as r:
        assert r.bloom_source == "rebuilt"
        assert [(st.capacity, st.error_rate) for st in r._bloom.stages] == layout
        assert sum(st.count for st in r._bloom.stages) == len(hashes)
        assert all(r._bloom.contains(h) for h in hashes)


def test_reopening_with_another_capacity_keeps_the_grown_chain(tmp_path) -> None:
    urls = make_urls(3000)
    with _disk(tmp_path, capacity=100) as s:  # grown to 5 stages, still within its rate
        feed(s, urls)
        assert s.estimated_false_positive_rate() < 0.01 and s.stats()["bloom_stages"] == 5
    with _disk(tmp_path, capacity=10_000) as r:  # the initial capacity sizes new chains only
        assert r.bloom_source == "snapshot" and r.stats()["bloom_stages"] == 5
        assert not any(r.check_and_add(urls))


_CRASHER = """
import os, signal, sys
sys.path.insert(0, {root!r})
from crawler.seen import SeenSet
s = SeenSet(5000, path={path!r})
for i in range(0, 3000, 100):
    s.check_and_add([f"https://crash.example/{{j}}" for j in range(i, i + 100)])
print("committed", flush=True)
os.kill(os.getpid(), signal.SIGKILL)  # no close, no snapshot, no interpreter cleanup
"""


def test_a_killed_process_loses_no_committed_url(tmp_path) -> None:
    import subprocess
    import sys
    from pathlib import Path

    path = str(tmp_path / "seen.db")
    root = str(Path(__file__).resolve().parents[2])
    proc = subprocess.run(
        [sys.executable, "-c", _CRASHER.format(root=root, path=path)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,  # the child is killed on purpose; its return code is asserted below
    )
    assert proc.stdout.strip() == "committed" and proc.returncode == -9, proc.stderr
    assert (tmp_path / "seen.db-wal").exists()  # the committed rows were still only in the WAL
    with SeenSet.open(path, 5000) as r:
        assert r.bloom_source == "rebuilt" and len(r) == 3000
        assert r.check_and_add([f"https://crash.example/{j}" for j in range(3000)]) == [False] * 3000
        assert r.check_and_add(["https://crash.example/new"]) == [True]


def test_hot_cache_answers_repeats_without_sqlite(tmp_path) -> None:
    urls = make_urls(2000)
    with _disk(tmp_path, capacity=5000, cache_size=10_000) as s:
        feed(s, urls)
        lookups = s.db_lookups
        assert not any(s.check_and_add(urls[:1000]))  # just added: all in the cache
        assert s.db_lookups == lookups and s.cache_hits == 1000
    with _disk(tmp_path, capacity=5000, cache_size=0) as s:  # reopened, cache disabled
        assert not any(s.check_and_add(urls[:1000]))
        assert s.db_lookups - lookups == 1000 and s.cache_hits == 1000  # persisted counter
        assert s.exact_confirmations == s.bloom_positives - s.false_positives


def test_disk_mode_memory_is_bounded_and_much_smaller_than_memory_mode(tmp_path) -> None:
    urls = make_urls(40_000)
    mem = SeenSet(50_000)
    feed(mem, urls, 1000)
    with _disk(tmp_path, capacity=50_000, cache_size=2000) as s:
        feed(s, urls, 1000)
        assert not any(s.check_and_add(urls[::7]))
        assert s._files is not None and s._files.hot is not None  # a set with a path
        assert len(s._files.hot) <= 2000  # the cache holds at most cache_size hashes
        bloom = s._bloom.memory_bytes()
        assert s.memory_bytes() > bloom
        assert s.memory_bytes() * 3 < mem.memory_bytes()
        assert s.stats()["memory_bytes"] == s.memory_bytes()


def test_a_second_opener_of_the_same_store_is_refused(tmp_path) -> None:
    with _disk(tmp_path) as s:
        s.check_and_add(["a"])
        with pytest.raises(StorageError, match="open in another"):
            _disk(tmp_path)
    with _disk(tmp_path) as r:  # released by close
        assert r.check_and_add(["a"]) == [False]


def test_a_foreign_file_is_not_taken_for_a_seen_store(tmp_path) -> None:
    import sqlite3

    other = tmp_path / "other.db"
    db = sqlite3.connect(other)
    db.execute("CREATE TABLE t (x)")
    db.commit()
    db.close()
    with pytest.raises(ConfigError, match="not a seen-set store"):
        SeenSet(10, path=other)
    junk = tmp_path / "junk.db"
    junk.write_bytes(b"this is not sqlite" * 100)
    with pytest.raises(StorageError):
        SeenSet(10, path=junk)
    with pytest.raises(ConfigError, match="directory"):
        SeenSet(10, path=tmp_path)


# --- Bloom-only mode with a path --------------------------------------------------------


@pytest.mark.parametrize("bloom", BACKENDS)
def test_bloom_only_path_persists_just_the_filter(tmp_path, bloom: str) -> None:
    urls = make_urls(2000)
    with SeenSet(5000, exact=False, bloom=bloom, path=tmp_path / "lossy") as s:
        verdicts = feed(s, urls)
        before = s.stats()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["lossy.bloom"]  # no SQLite
    with SeenSet(5000, exact=False, bloom=bloom, path=tmp_path / "lossy") as r:
        assert r.bloom_source == "snapshot"
        after = r.stats()
        for key in ("items", "checks", "novel", "bloom_positives", "estimated_false_positives"):
            assert after[key] == before[key], key
        assert not any(r.check_and_add(urls))
        assert r.novel == verdicts.count(True)


def test_bloom_only_refuses_mismatched_or_damaged_state(tmp_path) -> None:
    with SeenSet(5000, exact=False, path=tmp_path / "lossy") as s:
        feed(s, make_urls(100))
    with pytest.raises(ConfigError, match="error_rate"):
        SeenSet(5000, 0.02, exact=False, path=tmp_path / "lossy")
    SeenSet(6000, exact=False, path=tmp_path / "lossy").close()  # a chain keeps its own stages
    with pytest.raises(ConfigError, match="Bloom-only"):
        SeenSet(5000, exact=True, path=tmp_path / "lossy")
    snap = tmp_path / "lossy.bloom"
    snap.write_bytes(snap.read_bytes()[:-100])  # truncated
    with pytest.raises(StorageError, match="checksum"):
        SeenSet(5000, exact=False, path=tmp_path / "lossy")
    with _disk(tmp_path) as s:
        s.check_and_add(["a"])
    with pytest.raises(ConfigError, match="an exact seen store"):
        SeenSet(1000, exact=False, path=tmp_path / "seen.db")


@pytest.mark.parametrize(
    "kwargs, match",
    [({"cache_size": -1}, "cache_size"), ({"cache_size": 1.5}, "cache_size"), ({"path": 42}, "path")],
)
def test_bad_disk_configuration_raises_config_error(kwargs: dict, match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        SeenSet(10, **kwargs)
