"""Incarnations of a shard are fenced (DESIGN invariant 15, crawler.recovery.incarnation).

A *zombie* is an old incarnation of a shard cut off by a partition that comes back and
goes on writing after its successor started. On fsspec's in-memory store (treated like
``s3://``; the loopback S3 versions are in tests/unit/output/test_s3_state.py) and on a
local output. Each incarnation has its own folder ("node") and its own clock.
"""

from __future__ import annotations

import asyncio
import os
import uuid

import pytest

from crawler.clock import MockClock
from crawler.errors import FencedError
from crawler.output import ResultWriter, read_pages
from crawler.recovery.incarnation import claim, claim_name, read_claim
from crawler.recovery.statelog import RemoteDir, StateLog, segment_name

from tests.unit.doubles import MemorySeen, NoBudgetLimit, NoFetches, no_delivery, no_dups
from tests.unit.statekit import SHARD, cfg_for, items, open_on, queued, row, snapshot


@pytest.fixture
def out():
    return f"memory://raycrawl-test-{uuid.uuid4().hex}"


def names(remote: RemoteDir) -> list[str]:
    return sorted(p.rsplit("/", 1)[-1] for p in remote.names())


def test_two_incarnations_that_list_before_either_claims_get_two_generations(out):
    remote = RemoteDir(out, None, SHARD)
    # Both saw an empty folder (the race that gave two incarnations generation 1 before).
    first, second = claim(remote, MockClock(), listed=[]), claim(remote, MockClock(), listed=[])
    assert (first.gen, second.gen) == (1, 2)
    assert names(remote) == [claim_name(1), claim_name(2)]
    assert read_claim(remote, 1).token == first.token and read_claim(remote, 2).token == second.token
    # The older one is fenced from its next check on; the newer one is not.
    with pytest.raises(FencedError, match="generation 2 was claimed"):
        first.check(fresh=True)
    second.check(fresh=True)
    # A claimer whose listing shows only generation 1 still ends above every claim.
    assert claim(remote, MockClock(), listed=[remote.path(claim_name(1))]).gen == 3


def test_segments_of_two_incarnations_never_share_a_name(out):
    remote = RemoteDir(out, None, SHARD)
    old, new = claim(remote, MockClock(), listed=[]), claim(remote, MockClock(), listed=[])

    async def run():
        for inc in (old, new):
            slog = StateLog(remote, inc.gen, MockClock(), interval_s=0.5)  # unfenced: both write
            slog.append("add", [[f"http://g{inc.gen}.test/", f"g{inc.gen}.test", 0, None, 0]])
            await slog.synced()

    asyncio.run(run())
    assert [n for n in names(remote) if n.startswith("log-")] == [segment_name(1, 1), segment_name(2, 1)]


def test_a_zombie_writing_after_its_successor_started_loses_nothing_acked_and_overwrites_nothing(out, tmp_path, monkeypatch):
    cfg = cfg_for(out)
    refused = []

    async def run():
        zombie = open_on(cfg, str(tmp_path / "a"), monkeypatch)
        zombie.store.add(items("acked", 2))
        await zombie.log.synced()  # acknowledged to its sender
        successor = open_on(cfg, str(tmp_path / "b"), monkeypatch)  # claims, then reads
        assert successor.log.gen == 2 and queued(successor.store) == {f"http://acked.test/p/{i}" for i in (0, 1)}
        # The zombie's verdict is cached (its clock did not move): its PUT goes out, lands
        # after the successor read, and the check after it refuses the acknowledgement.
        zombie.store.add(items("late", 2))
        with pytest.raises(FencedError, match="generation 2 was claimed"):
            await zombie.log.synced()
        refused.extend(f"http://late.test/p/{i}" for i in (0, 1))  # the sender keeps these
        assert zombie.log.pending() == 1
        successor.store.add(items("next", 1))
        await successor.log.synced()
        # Nothing more from the zombie: no snapshot, so no compaction either.
        with pytest.raises(FencedError):
            await snapshot(zombie)
        await snapshot(successor)
        zombie.store.close()
        successor.store.close()

    asyncio.run(run())
    third = open_on(cfg, str(tmp_path / "c"), monkeypatch)
    assert queued(third.store) == {*(f"http://acked.test/p/{i}" for i in (0, 1)), "http://next.test/p/0"}
    assert refused  # the late batch was never acknowledged: its sender delivers it to the successor
    assert third.log.gen == 3


def test_what_a_zombie_wrote_after_its_successor_read_is_never_replayed(out, tmp_path, monkeypatch):
    """Its late segment lands, but the successor's claim says how far it read generation
    1, so a later restore stops there: the zombie cannot shadow what the successor did."""
    cfg = cfg_for(out)

    async def run():
        zombie = open_on(cfg, str(tmp_path / "a"), monkeypatch)
        zombie.store.add(items("a", 1))
        await zombie.log.synced()
        successor = open_on(cfg, str(tmp_path / "b"), monkeypatch)
        assert read_claim(successor.log.remote, 2).heads() == {1: 1}
        zombie.store.drop(["http://a.test/p/0"])  # lands as change 2 of generation 1, unacknowledged
        with pytest.raises(FencedError):
            await zombie.log.synced()
        assert segment_name(1, 2) in names(successor.log.remote)
        successor.store.add(items("b", 1))
        await successor.log.synced()  # the successor dies before any snapshot

    asyncio.run(run())
    third = open_on(cfg, str(tmp_path / "c"), monkeypatch)
    assert queued(third.store) == {"http://a.test/p/0", "http://b.test/p/0"}
    assert third.restored.heads == {1: 1, 2: 1}


def test_a_zombie_that_snapshotted_before_the_claim_deletes_nothing_after_it(out, tmp_path, monkeypatch):
    """The zombie's snapshot PUT is under way when its successor claims and reads: the
    fresh check before compaction stops it, so what the successor read stays."""
    cfg = cfg_for(out)
    successor = {}
    put_file = RemoteDir.put_file

    def partitioned(self: RemoteDir, name: str, local: str) -> None:
        put_file(self, name, local)
        if name.startswith("snap-") and not successor:  # the successor starts while the zombie is cut off
            successor["st"] = open_on(cfg, str(tmp_path / "b"), monkeypatch)

    async def run():
        zombie = open_on(cfg, str(tmp_path / "a"), monkeypatch)
        monkeypatch.setattr(RemoteDir, "put_file", partitioned)
        zombie.store.add(items("a", 2))
        await zombie.log.synced()
        zombie.store.add(items("b", 1))
        await zombie.log.synced()
        with pytest.raises(FencedError):
            await snapshot(zombie)
        kept = names(zombie.log.remote)
        assert segment_name(1, 1) in kept and segment_name(1, 2) in kept  # nothing deleted
        st = successor["st"]
        assert queued(st.store) == {"http://a.test/p/0", "http://a.test/p/1", "http://b.test/p/0"}

    asyncio.run(run())
    third = open_on(cfg, str(tmp_path / "c"), monkeypatch)
    assert len(queued(third.store)) == 3


def test_a_zombie_writer_overwrites_no_part_and_its_late_flush_is_refused(tmp_path):
    out = str(tmp_path / "out")
    remote = RemoteDir(out, None, SHARD)
    zi = claim(remote, MockClock())
    zombie = ResultWriter(out, SHARD, generation=zi.gen, fence=lambda: zi.check(fresh=True))
    zombie.add([row("http://z.test/acked")])
    zombie.flush()  # acked: rows of this part are done
    si = claim(remote, MockClock(), listed=[])  # its listing showed nothing (the race that overwrote part 1)
    successor = ResultWriter(out, SHARD, generation=si.gen, fence=lambda: si.check(fresh=True))
    successor.add([row("http://s.test/0")])
    successor.flush()
    assert sorted(os.listdir(os.path.join(out, "pages"))) == [
        "part-shard-000-g00000001-000000.parquet", "part-shard-000-g00000002-000000.parquet"]
    zombie.add([row("http://z.test/late")])
    with pytest.raises(FencedError):
        zombie.flush()
    assert zombie.pending_rows() == 1  # kept, never acked
    assert sorted(read_pages(out)["url"].to_pylist()) == ["http://s.test/0", "http://z.test/acked"]


def test_a_local_output_claims_a_generation_with_o_excl_and_names_its_parts_after_it(tmp_path, monkeypatch):
    out = str(tmp_path / "out")
    cfg = cfg_for(out)
    first = open_on(cfg, str(tmp_path / "n"), monkeypatch)
    first.store.close()
    again = open_on(cfg, str(tmp_path / "n"), monkeypatch)
    assert first.log is None and again.log is None  # no state log: the store is on the output's disk
    assert (first.restored.gen, again.restored.gen) == (1, 2) and not again.restored.anything
    assert sorted(os.listdir(os.path.join(out, "state", SHARD))) == [claim_name(1), claim_name(2)]
    inc = again.restored.incarnation
    with pytest.raises(FencedError):
        first.restored.incarnation.check(fresh=True)
    w = ResultWriter(out, SHARD, generation=inc.gen, fence=lambda: inc.check(fresh=True))
    w.add([row("http://a.test/0")])
    w.flush()
    assert os.listdir(os.path.join(out, "pages")) == ["part-shard-000-g00000002-000000.parquet"]


def test_a_zombie_shard_acks_no_delivery_and_stops_taking_work(out, tmp_path, monkeypatch):
    """The whole shard (crawler.engine.assembly): its delivery is refused once a newer
    incarnation exists, so its sender keeps the batch; from then on it accepts nothing."""
    from crawler.engine.assembly import build_shard
    from crawler.frontier.urlitem import UrlItem

    cfg = cfg_for(out)

    async def run():
        st = open_on(cfg, str(tmp_path / "a"), monkeypatch)
        shard = build_shard(cfg, SHARD, seeds=[], seen=MemorySeen(), content=no_dups, budget=NoBudgetLimit(),
                            deliver=no_delivery, owner_of=lambda h: SHARD, store=st.store, clock=MockClock(),
                            fetcher=NoFetches(), state_log=st.log, restored=st.restored)
        assert await shard.accept([UrlItem("http://a.test/0", 1)]) == 1
        open_on(cfg, str(tmp_path / "b"), monkeypatch)  # the successor, while this one is cut off
        with pytest.raises(FencedError):
            await shard.accept([UrlItem("http://a.test/1", 1)])
        with pytest.raises(FencedError, match="not accepting work"):
            shard.admit([UrlItem("http://a.test/2", 1)])

    asyncio.run(run())
    third = open_on(cfg, str(tmp_path / "c"), monkeypatch)
    assert queued(third.store) == {"http://a.test/0"}
