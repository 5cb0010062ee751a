"""A restore verifies what it reads (crawler.recovery.restore), and snapshots are taken when
something changed: never a silent partial restore, never an idle shard copied every minute.

On fsspec's in-memory store (treated like ``s3://``). A store that lists late is a
RemoteDir whose listing leaves objects out; a lost object is one deleted.
"""

from __future__ import annotations

import asyncio
import sqlite3
import uuid

import pytest

from crawler.clock import MockClock
from crawler.errors import StateGapError
from crawler.events.emitter import EventLog
from crawler.recovery.incarnation import read_claim
from crawler.recovery.restore import restore
from crawler.recovery.statelog import RemoteDir, encode, segment_name, snapshot_name

from tests.unit.statekit import SHARD, cfg_for, items, open_on, queued, snapshot


@pytest.fixture
def out():
    return f"memory://raycrawl-test-{uuid.uuid4().hex}"


def shard_with_segments(cfg, node, monkeypatch, n: int = 3, *, snap_after: int | None = None) -> list[str]:
    """A first incarnation that logged ``n`` segments of two URLs each (a snapshot after
    the ``snap_after``-th); returns the URLs."""
    urls: list[str] = []

    async def run():
        st = open_on(cfg, node, monkeypatch)
        for i in range(n):
            st.store.add(items(f"s{i}", 2))
            urls.extend(f"http://s{i}.test/p/{k}" for k in range(2))
            await st.log.synced()
            if snap_after == i + 1:
                await snapshot(st)
        st.store.close()

    asyncio.run(run())
    return urls


class LateListing(RemoteDir):
    """A store whose listing leaves out the paths in ``hidden`` (it lists late)."""

    hidden: set[str] = set()

    def names(self) -> list[str]:
        return [p for p in super().names() if p.rsplit("/", 1)[-1] not in self.hidden]


@pytest.fixture
def late(monkeypatch):
    monkeypatch.setattr("crawler.recovery.statefiles.RemoteDir", LateListing)
    LateListing.hidden = set()
    return LateListing


def test_a_listing_missing_a_middle_segment_is_read_by_name(out, tmp_path, monkeypatch, late):
    cfg = cfg_for(out)
    urls = shard_with_segments(cfg, str(tmp_path / "a"), monkeypatch)
    late.hidden = {segment_name(1, 2)}
    again = open_on(cfg, str(tmp_path / "b"), monkeypatch)
    assert queued(again.store) == set(urls)  # before: 4 of 6, silently
    assert again.restored.listings == 1 and again.restored.segments == 3


def test_a_listing_missing_the_newest_segment_is_read_by_name_too(out, tmp_path, monkeypatch, late):
    """Chaining alone cannot see that the newest segment is missing from a listing; the
    restore does not rely on the listing for it: it reads the next name until one is not
    there, and a segment written after that read was never acknowledged."""
    cfg = cfg_for(out)
    urls = shard_with_segments(cfg, str(tmp_path / "a"), monkeypatch)
    late.hidden = {segment_name(1, 3)}
    again = open_on(cfg, str(tmp_path / "b"), monkeypatch)
    assert queued(again.store) == set(urls)


def test_a_listing_missing_the_newest_snapshot_finds_it_through_the_claim(out, tmp_path, monkeypatch, late):
    cfg = cfg_for(out)
    urls = shard_with_segments(cfg, str(tmp_path / "a"), monkeypatch, snap_after=2)
    snap = read_claim(RemoteDir(out, None, SHARD), 1).snapshot
    assert snap is not None and snap.startswith("snap-00000001-000000000002-000000000003-")
    late.hidden = {snap}
    again = open_on(cfg, str(tmp_path / "b"), monkeypatch)
    assert queued(again.store) == set(urls)
    assert again.restored.snapshot.path.endswith(snap) and again.restored.segments == 1


def test_a_lost_middle_segment_is_refused_after_listing_again_with_one_line(out, tmp_path, monkeypatch):
    cfg = cfg_for(out)
    shard_with_segments(cfg, str(tmp_path / "a"), monkeypatch)
    remote = RemoteDir(out, None, SHARD)
    remote.remove([remote.path(segment_name(1, 2))])  # a PUT the store lost
    slept: list[float] = []
    with pytest.raises(StateGapError) as err:
        open_on(cfg, str(tmp_path / "b"), monkeypatch, sleep=slept.append)
    assert slept == [0.5, 1.0, 2.0]  # four listings, backing off
    msg = str(err.value)
    assert "\n" not in msg and "log-00000001-000000000002.json.z" in msg and "after 4 listings" in msg


def test_a_gap_that_fills_on_the_next_listing_is_restored(out, tmp_path, monkeypatch):
    """A segment not readable yet (a store that lists before it serves) comes in time."""
    cfg = cfg_for(out)
    urls = shard_with_segments(cfg, str(tmp_path / "a"), monkeypatch)
    remote = RemoteDir(out, None, SHARD)
    path = remote.path(segment_name(1, 2))
    data = remote.get(path)
    remote.remove([path])
    slept: list[float] = []

    def sleep(seconds: float) -> None:
        slept.append(seconds)
        remote.put(segment_name(1, 2), data)  # there by the next listing

    again = open_on(cfg, str(tmp_path / "b"), monkeypatch, sleep=sleep)
    assert queued(again.store) == set(urls) and slept == [0.5] and again.restored.listings == 2


def test_a_newest_segment_lost_after_the_successor_read_it_is_refused(out, tmp_path, monkeypatch):
    """Generation 2 recorded that it read generation 1 up to change 3; a later restore
    that finds generation 1 ending at 2 refuses instead of dropping change 3."""
    cfg = cfg_for(out)
    shard_with_segments(cfg, str(tmp_path / "a"), monkeypatch)
    second = open_on(cfg, str(tmp_path / "b"), monkeypatch)
    second.store.close()  # it dies before any snapshot of its own
    remote = RemoteDir(out, None, SHARD)
    remote.remove([remote.path(segment_name(1, 3))])
    with pytest.raises(StateGapError, match="generation 1 ends at change 2 here, but its successor read it up to change 3"):
        open_on(cfg, str(tmp_path / "c"), monkeypatch)


def test_an_unreadable_segment_is_refused(out, tmp_path, monkeypatch):
    cfg = cfg_for(out)
    shard_with_segments(cfg, str(tmp_path / "a"), monkeypatch)
    RemoteDir(out, None, SHARD).put(segment_name(1, 2), b"not zlib")
    with pytest.raises(StateGapError, match="log-00000001-000000000002.json.z cannot be decoded"):
        open_on(cfg, str(tmp_path / "b"), monkeypatch)


def test_an_idle_shard_is_snapshotted_once(out, tmp_path, monkeypatch):
    cfg = cfg_for(out)

    async def run():
        st = open_on(cfg, str(tmp_path / "a"), monkeypatch)
        st.store.add(items("a", 1))
        await st.log.synced()
        results = [await snapshot(st) for _ in range(5)]  # five ship intervals, nothing new
        assert results == [True, False, False, False, False] and st.log.snapshots_skipped == 4
        st.store.add(items("b", 1))
        await st.log.synced()
        assert await snapshot(st)
        snaps = [p for p in st.log.remote.list() if p.kind == "snap"]
        assert len(snaps) == 1 and snaps[0].first == 2  # the older one is compacted away
        st.store.close()

    asyncio.run(run())
    # Restored from a snapshot with nothing after it, the store is that snapshot: not copied again.
    again = open_on(cfg, str(tmp_path / "b"), monkeypatch)
    assert not asyncio.run(snapshot(again)) and len(queued(again.store)) == 2


def test_restore_takes_the_events_copy_of_the_snapshot_it_starts_from(out, tmp_path, monkeypatch):
    cfg = cfg_for(out, sink="file")
    events = EventLog(str(tmp_path / "events.sqlite"))
    clock = MockClock()

    async def run():
        st = open_on(cfg, str(tmp_path / "a"), monkeypatch, clock=clock)
        for i in range(2):
            events.add([{"event": "page.fetched", "url": f"http://a.test/p/{i}", "fetch_seq": 1}])
            st.store.add(items(f"e{i}", 1))
            await st.log.synced()
            clock.advance(60)
            await snapshot(st, events=events.backup)
        st.store.close()

    asyncio.run(run())
    remote = RemoteDir(out, None, SHARD)
    # An output written before snapshots were skipped holds copies of one change, taken
    # one minute apart: the newest goes with the newest snapshot.
    older = snapshot_name(1, 2, 3, clock.wall() - 3600, "events")
    remote.put(older, encode([]))  # not a store: reading it would fail
    back = open_on(cfg, str(tmp_path / "b"), monkeypatch)
    local = back.store.path.replace(".sqlite", ".events.sqlite")
    assert back.restored.events.path.endswith(back.restored.snapshot.path.rsplit("/", 1)[-1].replace("snap-", "events-"))
    assert [data for _, data in EventLog(local).peek(10)] == [
        '{"event":"page.fetched","url":"http://a.test/p/0","fetch_seq":1}',
        '{"event":"page.fetched","url":"http://a.test/p/1","fetch_seq":1}']


def test_a_zombies_late_snapshot_past_what_its_successor_read_is_never_restored(out, tmp_path, monkeypatch):
    cfg = cfg_for(out)
    shard_with_segments(cfg, str(tmp_path / "a"), monkeypatch, n=1)  # generation 1: change 1
    second = open_on(cfg, str(tmp_path / "b"), monkeypatch)  # read generation 1 up to change 1
    second.store.add(items("second", 1))
    asyncio.run(second.log.synced())
    remote = RemoteDir(out, None, SHARD)
    # The zombie's snapshot of its change 2 (an empty store), landed after generation 2 read.
    empty = tmp_path / "empty.sqlite"
    sqlite3.connect(str(empty)).close()
    remote.put_file(snapshot_name(1, 2, 3, 1_900_000_000.0), str(empty))
    third = open_on(cfg, str(tmp_path / "c"), monkeypatch)
    assert third.restored.snapshot is None
    assert queued(third.store) == {"http://s0.test/p/0", "http://s0.test/p/1", "http://second.test/p/0"}


def test_restore_refuses_to_start_a_generation_older_than_one_claimed(out, tmp_path, monkeypatch):
    from crawler.errors import FencedError

    remote = RemoteDir(out, None, SHARD)
    remote.put("gen-00000005.json", b"{}")
    with pytest.raises(FencedError, match="generation 5 was claimed"):
        restore(remote, str(tmp_path / "s.sqlite"), 3)


def test_an_incarnation_that_died_before_reading_is_walked_past(out, tmp_path, monkeypatch):
    from crawler.recovery.incarnation import claim

    cfg = cfg_for(out)
    urls = shard_with_segments(cfg, str(tmp_path / "a"), monkeypatch)
    claim(RemoteDir(out, None, SHARD), MockClock())  # generation 2: claimed, then lost before it read anything
    third = open_on(cfg, str(tmp_path / "c"), monkeypatch)
    assert third.log.gen == 3 and queued(third.store) == set(urls)
    assert third.restored.heads == {1: 3, 2: 0}
