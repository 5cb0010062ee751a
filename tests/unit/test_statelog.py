"""A shard's state in a remote output (crawler.recovery.statelog): what a lost node takes with it.

The "remote output" here is fsspec's in-memory filesystem (``memory://``), which the
crawler treats like ``s3://``; each "node" is a folder of its own (``RAYCRAWL_LOCAL_DIR``).
A node is lost by opening the shard again from another, empty folder.
"""

from __future__ import annotations

import asyncio
import shutil
import uuid

import pytest

from crawler.config import settings as config
from crawler.clock import MockClock
from crawler.frontier.urlitem import UrlItem
from crawler.frontier.store import FrontierStore
from crawler.output import OutcomeRow
from crawler.frontier.recrawl import Schedule
from crawler.recovery.restore import restore
from crawler.recovery.statefiles import open_shard_store, state_dir
from crawler.recovery.statelog import RemoteDir, StateLog, segment_name, encode


def _cfg(out: str) -> config.CrawlConfig:
    return config.from_dict({"seeds": ["http://a.test/"], "output": {"path": out}, "runtime": {"state_log_interval_s": 0.5}})


def _items(prefix: str, n: int) -> list[UrlItem]:
    return [UrlItem(f"http://{prefix}.test/p/{i}", 1) for i in range(n)]


def _open(cfg, node: str, monkeypatch):
    """The shard's store as a process on ``node`` opens it."""
    monkeypatch.setenv("RAYCRAWL_LOCAL_DIR", node)
    return open_shard_store(cfg, "shard-000", state_dir(cfg.output.path, None, cfg.fingerprint()), MockClock())


def _queued(store: FrontierStore) -> set[str]:
    return {it.url for host, _ in store.pending_hosts() for it in store.load(host, 0, 1000)}


def _row(url: str) -> OutcomeRow:
    import datetime as dt

    return OutcomeRow(url=url, depth=1, outcome="fetched", status=200, attempts=1,
                      fetched_at=dt.datetime(2026, 1, 1, tzinfo=dt.timezone.utc), content_sha256="ab" * 32, etag='"v1"')


@pytest.fixture
def out():
    return f"memory://raycrawl-test-{uuid.uuid4().hex}"


def test_admitted_urls_acked_rows_and_a_policy_survive_the_loss_of_the_node_and_its_disk(out, tmp_path, monkeypatch):
    cfg = _cfg(out)

    async def first_node():
        st = _open(cfg, str(tmp_path / "node-a"), monkeypatch)
        assert st.log is not None and st.restored is not None and not st.restored.anything
        st.store.add(_items("a", 5))
        st.store.record([(_row("http://a.test/p/0"), Schedule(changed=None, interval_s=3600.0, next_crawl_at=1_800_000_000.0))])
        st.store.drop(["http://a.test/p/4"])
        st.store.set_meta("checkpoint", '{"politeness": "paused"}', journal=True)
        await st.log.synced()  # what Shard.accept waits for before the sender forgets the batch
        assert st.log.pending() == 0 and st.log.segments_written == 1
        st.store.add(_items("b", 2))  # not synced: inside the window when the node dies
        st.store.close()

    asyncio.run(first_node())
    shutil.rmtree(tmp_path / "node-a")  # the node and its disk are gone

    again = _open(cfg, str(tmp_path / "node-b"), monkeypatch)
    store = again.store
    assert _queued(store) == {f"http://a.test/p/{i}" for i in (1, 2, 3)}
    assert store.counts() == {"queued": 3, "claimed": 0, "done": 1, "dropped": 1}
    status = store.url_status("http://a.test/p/0")
    assert status["next_crawl_at"] == 1_800_000_000.0 and status["etag"] == '"v1"' and status["fetches"] == 1
    assert store.get_meta("checkpoint") == '{"politeness": "paused"}'
    assert again.log.gen == 2  # a new incarnation writes a new generation


def test_a_snapshot_compacts_the_log_and_a_restart_reads_it_plus_what_came_after(out, tmp_path, monkeypatch):
    cfg = _cfg(out)

    async def run():
        st = _open(cfg, str(tmp_path / "a"), monkeypatch)
        for i in range(3):
            st.store.add(_items(f"s{i}", 2))
            await st.log.synced()
        assert st.log.segments_written == 3
        await st.log.snapshot(lambda dest: st.store.backup(dest, lambda: st.log.seq))
        kinds = sorted(p.kind for p in st.log.remote.list())
        assert kinds == ["snap"], kinds  # the three segments it covers are deleted
        st.store.add(_items("late", 1))
        await st.log.synced()
        st.store.close()
        return st.log.remote

    remote = asyncio.run(run())
    again = _open(cfg, str(tmp_path / "b"), monkeypatch)
    assert len(_queued(again.store)) == 7
    assert again.restored.snapshot is not None and again.restored.segments == 1 and len(again.restored.records) == 1
    assert remote.list()  # the restart read, never deleted


def test_an_older_local_copy_never_wins_over_newer_state_in_out(out, tmp_path, monkeypatch):
    cfg = _cfg(out)
    node = tmp_path / "node"
    stale = tmp_path / "stale-copy"

    async def run():
        st = _open(cfg, str(node), monkeypatch)
        st.store.add(_items("a", 2))
        await st.log.synced()
        st.store.close()
        shutil.copytree(node, stale)  # what the node's disk holds when it drops off
        st = _open(cfg, str(tmp_path / "elsewhere"), monkeypatch)  # the shard moves on without it
        st.store.add(_items("b", 3))
        st.store.record([(_row("http://a.test/p/0"), None)])
        await st.log.synced()
        st.store.close()

    asyncio.run(run())
    shutil.rmtree(node)
    shutil.copytree(stale, node)  # the node comes back with its old folder
    back = _open(cfg, str(node), monkeypatch)
    assert _queued(back.store) == {"http://a.test/p/1", *(f"http://b.test/p/{i}" for i in range(3))}
    assert back.store.url_status("http://a.test/p/0")["status"] == "fetched"
    assert back.log.gen == 3


class FlakyRemote(RemoteDir):
    """A remote folder whose next ``fail`` writes fail after landing (a lost reply)."""

    fail = 0

    def put(self, name: str, data: bytes) -> None:
        super().put(name, data)
        if self.fail:
            self.fail -= 1
            raise OSError("connection reset after the write")


def test_a_failed_write_keeps_the_changes_and_a_repeated_segment_is_applied_once(out, tmp_path):
    remote = FlakyRemote(out, None, "shard-000")
    store = FrontierStore(str(tmp_path / "a.sqlite"))
    clock = MockClock()
    slog = StateLog(remote, 1, clock, interval_s=0.5)
    store.journal = slog.append

    async def run():
        store.add(_items("a", 2))
        store.record([(_row("http://a.test/p/0"), None)])
        remote.fail = 1
        with pytest.raises(OSError):
            await slog.flush()
        assert slog.pending() == 2  # not acknowledged: the delivery's sender still holds it
        store.add(_items("b", 1))
        await slog.synced()
        assert slog.pending() == 0

    asyncio.run(run())
    # The failed write landed and the retry wrote the same segment again, byte for byte
    # (never a superset a delayed first attempt could land over); change 3 went into the next.
    assert sorted(p.path.rsplit("/", 1)[-1] for p in remote.list()) == [segment_name(1, 1), segment_name(1, 3)]
    assert slog.write_failures == 1 and slog.segments_written == 2
    found = restore(remote, str(tmp_path / "b.sqlite"), 2)
    again = FrontierStore(str(tmp_path / "b.sqlite"))
    again.replay(found.records)
    assert again.url_status("http://a.test/p/0")["fetches"] == 1
    assert again.counts() == {"queued": 2, "claimed": 0, "done": 1, "dropped": 0}


def test_a_late_segment_of_an_older_generation_is_neither_replayed_nor_kept(out, tmp_path):
    remote = RemoteDir(out, None, "shard-000")
    remote.put(segment_name(1, 1), encode([["add", [["http://old.test/", "old.test", 0, None, 0]]]]))
    store = FrontierStore(str(tmp_path / "s.sqlite"))
    slog = StateLog(remote, 2, MockClock(), interval_s=0.5)
    store.journal = slog.append
    store.add(_items("new", 1))
    asyncio.run(slog.snapshot(lambda dest: store.backup(dest, lambda: slog.seq)))
    found = restore(remote, str(tmp_path / "r.sqlite"), 3)
    assert found.records == [] and found.gen == 3
    assert not [p for p in remote.list() if p.kind == "log"]


def test_events_waiting_for_the_sink_come_back_with_the_snapshot(out, tmp_path, monkeypatch):
    from crawler.events.emitter import EventLog

    cfg = config.from_dict({"seeds": ["http://a.test/"], "output": {"path": out}, "events": {"sink": "file"}})

    async def run():
        st = _open(cfg, str(tmp_path / "a"), monkeypatch)
        events = EventLog(str(tmp_path / "a" / "events.sqlite"))
        events.add([{"event": "page.fetched", "url": "http://a.test/p/0", "fetch_seq": 1}])
        st.store.add(_items("a", 1))
        await st.log.snapshot(lambda dest: st.store.backup(dest, lambda: st.log.seq), events=events.backup)
        st.store.close()

    asyncio.run(run())
    back = _open(cfg, str(tmp_path / "b"), monkeypatch)  # another node: its events log comes from OUT
    local = back.store.path.replace(".sqlite", ".events.sqlite")
    assert back.restored.events is not None
    assert [data for _, data in EventLog(local).peek(10)] == ['{"event":"page.fetched","url":"http://a.test/p/0","fetch_seq":1}']


def test_a_page_fetched_before_its_admission_was_logged_is_not_fetched_again(tmp_path):
    from crawler.recovery.statefiles import reconcile_store

    store = FrontierStore(str(tmp_path / "s.sqlite"))
    store.add(_items("a", 1))
    # The node died after this page's row reached OUT, before the segment with its admission.
    done = reconcile_store(store, [{"url": "http://late.test/x", "depth": 2}, {"url": "http://a.test/p/0", "depth": 1}])
    assert done == 2
    assert store.counts() == {"queued": 0, "claimed": 0, "done": 2, "dropped": 0}
    assert store.add([UrlItem("http://late.test/x", 2)]) == []  # the sender's retry is a duplicate
