"""The durable frontier store and the frontier's spill to it."""

import random

import pytest

from crawler.clock import MockClock
from crawler.frontier.frontier import Frontier
from crawler.frontier.urlitem import UrlItem
from crawler.frontier.store import FrontierStore, Verdicts
from crawler.recovery.statefiles import here, state_dir


class Pacer:
    def next_allowed(self, host):
        return 0.0


def items(host, n, start=0):
    return [UrlItem(f"http://{host}/p/{i}", 1) for i in range(start, start + n)]


def test_add_is_idempotent_on_url_and_orders_by_acceptance(tmp_path):
    st = FrontierStore(str(tmp_path / "s.sqlite"))
    first = st.add(items("a.test", 3) + items("a.test", 2))  # repeats inside one batch
    assert [i.url for i in first] == [f"http://a.test/p/{i}" for i in range(3)]
    assert [i.sid for i in first] == sorted(i.sid for i in first)
    assert st.add(items("a.test", 4)) and [i.url for i in st.add(items("a.test", 4))] == []
    assert [i.url for i in st.load("a.test", 0, 10)] == [f"http://a.test/p/{i}" for i in range(4)]


def test_claimed_urls_come_back_flagged_for_replay_and_done_ones_never(tmp_path):
    path = str(tmp_path / "s.sqlite")
    st = FrontierStore(path)
    st.add(items("a.test", 3))
    st.claim(["http://a.test/p/0", "http://a.test/p/1"])
    st.done(["http://a.test/p/0"])
    st.close()  # (a crash leaves the same committed state)
    st = FrontierStore(path)
    assert st.recover() == 1
    back = st.load("a.test", 0, 10)
    assert [(i.url, i.replay) for i in back] == [("http://a.test/p/1", True), ("http://a.test/p/2", False)]
    assert st.pending_hosts() == [("a.test", 2)]
    assert st.counts() == {"queued": 2, "claimed": 0, "done": 1, "dropped": 0}
    assert len(st.add(items("a.test", 3))) == 0  # done or queued: never accepted twice


def test_frontier_keeps_a_window_in_memory_and_loads_the_rest_in_order(tmp_path):
    st = FrontierStore(str(tmp_path / "s.sqlite"))
    clock = MockClock()
    f = Frontier(Pacer(), clock, random.Random(0), window=2, spill=st)
    f.push(st.add(items("a.test", 10)))
    assert len(f) == 10 and f.in_memory() == 2
    got = []
    while len(f):
        batch = f.pop_ready(5)
        assert len(batch) == 1  # one per host
        got.append(batch[0].url)
        st.claim([batch[0].url])
        f.release("a.test")
        assert f.in_memory() <= 2
    assert got == [f"http://a.test/p/{i}" for i in range(10)]


def test_restore_registers_spilled_hosts_and_serves_them(tmp_path):
    path = str(tmp_path / "s.sqlite")
    st = FrontierStore(path)
    st.add(items("a.test", 3) + items("b.test", 2))
    st.close()
    st = FrontierStore(path)
    st.recover()
    f = Frontier(Pacer(), MockClock(), random.Random(0), window=4, spill=st)
    for host, n in st.pending_hosts():
        f.restore_spilled(host, n)
    assert len(f) == 5 and f.in_memory() == 0
    first = f.pop_ready(10)
    assert sorted(i.url for i in first) == ["http://a.test/p/0", "http://b.test/p/0"]


def test_state_dir_is_under_a_local_output_and_on_each_nodes_disk_for_remote_ones(tmp_path, monkeypatch):
    assert here(state_dir(str(tmp_path / "out"), None, "abc")) == str(tmp_path / "out" / "state")
    # A remote output's folder is resolved where it is used: each node's RAYCRAWL_LOCAL_DIR.
    spec = state_dir("s3://bucket/x", None, "abc")
    monkeypatch.setenv("RAYCRAWL_LOCAL_DIR", str(tmp_path / "node-a"))
    assert here(spec) == str(tmp_path / "node-a" / "abc")
    monkeypatch.setenv("RAYCRAWL_LOCAL_DIR", str(tmp_path / "node-b"))
    assert here(spec) == str(tmp_path / "node-b" / "abc")
    monkeypatch.delenv("RAYCRAWL_LOCAL_DIR")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    assert here(spec) == str(tmp_path / "cache" / "raycrawl" / "abc")
    assert here(state_dir("s3://bucket/x", str(tmp_path / "st"), "abc")) == str(tmp_path / "st")


def test_trim_drops_spilled_urls_in_the_store_first(tmp_path):
    st = FrontierStore(str(tmp_path / "s.sqlite"))
    f = Frontier(Pacer(), MockClock(), random.Random(0), window=2, spill=st)
    f.push(st.add(items("a.test", 10)))
    assert f.in_memory() == 2 and len(f) == 10
    dropped = f.trim("a.test", 7)
    # The 8 spilled URLs are the newest: 7 of them go, newest first; memory is untouched.
    assert dropped == [f"http://a.test/p/{i}" for i in range(9, 2, -1)]
    assert len(f) == 3 and f.in_memory() == 2
    assert st.counts() == {"queued": 3, "claimed": 0, "done": 0, "dropped": 7}
    got = []
    while len(f):
        (item,) = f.pop_ready(1)
        got.append(item.url)
        f.release("a.test")
    assert got == [f"http://a.test/p/{i}" for i in range(3)] and f.recounts == 0


# -- decisions that limit fetching (crawler.engine.admission) -------------------------------


def _journaled(tmp_path, name="s.sqlite"):
    records: list = []
    st = FrontierStore(str(tmp_path / name), journal=lambda kind, payload: records.append([kind, payload]) or len(records))
    return st, records


def test_an_admission_its_drops_and_its_decisions_are_one_commit_and_one_journal_batch(tmp_path):
    st, records = _journaled(tmp_path)

    def decide(fresh):
        urls = [i.url for i in fresh]
        return Verdicts(claim=urls[:1], drop=urls[3:], decisions={"budget": {"a.test": [3, 1, 0, 0]}})

    fresh = st.admit(items("a.test", 4), decide)
    assert len(fresh) == 4
    assert [kind for kind, _ in records] == ["add", "drop", "decide"]
    assert st.counts() == {"queued": 2, "claimed": 1, "done": 0, "dropped": 1}
    assert st.decisions.read() == [("budget", "a.test", [3, 1, 0, 0])]
    # A store rebuilt from the journal (crawler.recovery.statelog) holds the same, claims aside.
    again, _ = _journaled(tmp_path, "again.sqlite")
    again.replay(records)
    assert again.decisions.read() == [("budget", "a.test", [3, 1, 0, 0])]
    assert again.counts() == {"queued": 3, "claimed": 0, "done": 0, "dropped": 1}


def test_a_decision_that_fails_keeps_nothing_of_its_batch(tmp_path):
    st, records = _journaled(tmp_path)

    def broken(fresh):
        raise RuntimeError("a bug while deciding")

    with pytest.raises(RuntimeError):
        st.admit(items("a.test", 3), broken)
    assert records == [] and st.counts() == {"queued": 0, "claimed": 0, "done": 0, "dropped": 0}
    assert st.decisions.read() == []
    assert [i.sid for i in st.add(items("a.test", 2))] == [1, 2]  # as if it never happened


def test_decisions_are_kept_in_order_until_a_checkpoint_covers_them_here_and_on_replay(tmp_path):
    st, records = _journaled(tmp_path)
    st.decisions.write({"robots": {"http://a.test": {"kind": "parsed"}}, "budget": {"a.test": [1, 0, 4, 0]}})
    st.drop([], {"budget": {"a.test": [2, 0, 3, 0]}})
    st.claim([], {"budget": {"b.test": [1, 0, None, 0]}})
    assert [(kind, key) for kind, key, _ in st.decisions.read()] == [
        ("robots", "http://a.test"), ("budget", "a.test"), ("budget", "a.test"), ("budget", "b.test")]
    st.set_meta("checkpoint", "{}", journal=True, covers_decisions=True)  # holds all of them
    st.decisions.write({"budget": {"a.test": [3, 0, 2, 0]}})
    assert st.decisions.read() == [("budget", "a.test", [3, 0, 2, 0])]
    again, _ = _journaled(tmp_path, "again.sqlite")
    again.replay(records)
    assert again.decisions.read() == [("budget", "a.test", [3, 0, 2, 0])] and again.get_meta("checkpoint") == "{}"
    st.set_meta("checkpoint", "{}")  # another meta value: the decisions stay
    assert len(st.decisions.read()) == 1
