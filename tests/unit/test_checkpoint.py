"""Checkpointer on a real durable store and the mock clock: a shard's caches are written
on interval (and shipped to a remote output on its own interval), and a restarted shard
gets them back; a damaged checkpoint costs a cache, never the crawl (crawler.engine.checkpoint)."""

from __future__ import annotations

import logging
from collections import Counter

import pytest

from crawler.engine.checkpoint import Checkpointer, resume_queue
from crawler.clock import MockClock
from crawler.frontier.frontier import Frontier
from crawler.frontier.urlitem import UrlItem
from crawler.frontier.store import FrontierStore
from crawler.policy.politeness import Politeness

INTERVAL_S = 30.0


class Parts:
    """Two pieces of shard memory: counters (a Counter) and a dict of host settings."""

    def __init__(self) -> None:
        self.counters: Counter[str] = Counter()
        self.hosts: dict[str, float] = {}

    def table(self) -> dict:
        return {
            "counters": (lambda: dict(self.counters), self.counters.update),
            "hosts": (lambda: dict(self.hosts), self.hosts.update),
        }


@pytest.fixture
def store_path(tmp_path) -> str:
    return str(tmp_path / "shard.sqlite")


async def test_a_checkpoint_is_written_each_interval_of_the_clock(store_path: str) -> None:
    clock = MockClock()
    store = FrontierStore(store_path)
    parts = Parts()
    cp = Checkpointer(store, parts.table(), clock, interval_s=INTERVAL_S)
    parts.counters["fetched"] = 5
    await cp.tick()
    clock.advance(INTERVAL_S - 0.001)
    await cp.tick()
    assert cp.saves == 0 and store.get_meta("checkpoint") is None  # not due yet
    clock.advance(0.001)
    await cp.tick()
    assert cp.saves == 1
    parts.counters["fetched"] = 9
    clock.advance(INTERVAL_S / 2)
    await cp.tick()
    assert cp.saves == 1  # the next one is an interval after the last save
    clock.advance(INTERVAL_S / 2)
    await cp.tick()
    assert cp.saves == 2
    await cp.tick(final=True)  # at the end: whatever is due or not
    assert cp.saves == 3
    store.close()


async def test_a_restarted_shard_gets_its_state_back(store_path: str) -> None:
    clock = MockClock()
    store = FrontierStore(store_path)
    before = Parts()
    before.counters.update({"fetched": 7, "robots_requests": 2})
    before.hosts["a.test"] = 4.0
    cp = Checkpointer(store, before.table(), clock, interval_s=INTERVAL_S)
    clock.advance(INTERVAL_S)
    await cp.tick()
    before.counters["fetched"] += 100  # after the last checkpoint: lost with the process
    store.close()

    again = FrontierStore(store_path)
    after = Parts()
    assert Checkpointer(again, after.table(), MockClock(), interval_s=INTERVAL_S).restore() is True
    assert after.counters == Counter({"fetched": 7, "robots_requests": 2})
    assert after.hosts == {"a.test": 4.0}
    again.close()


def test_an_operator_change_is_saved_at_once(store_path: str) -> None:
    store = FrontierStore(store_path)
    parts = Parts()
    cp = Checkpointer(store, parts.table(), MockClock(), interval_s=INTERVAL_S)
    parts.hosts["a.test"] = 10.0  # PUT /hosts/a.test/policy
    cp.save(journal=True)
    after = Parts()
    Checkpointer(store, after.table(), MockClock(), interval_s=INTERVAL_S).restore()
    assert after.hosts == {"a.test": 10.0}
    store.close()


def test_no_checkpoint_yet_restores_nothing(store_path: str) -> None:
    store = FrontierStore(store_path)
    parts = Parts()
    assert Checkpointer(store, parts.table(), MockClock(), interval_s=INTERVAL_S).restore() is False
    assert not parts.counters and not parts.hosts
    store.close()


def test_a_part_that_fails_to_load_costs_only_that_part(store_path: str, caplog) -> None:
    store = FrontierStore(store_path)
    parts = Parts()
    parts.counters["fetched"] = 3
    parts.hosts["a.test"] = 2.0
    Checkpointer(store, parts.table(), MockClock(), interval_s=INTERVAL_S).save()

    def broken(value) -> None:
        raise ValueError("snapshot version 99")

    after = Parts()
    table = {**after.table(), "hosts": (lambda: {}, broken), "new_part": (lambda: 0, broken)}
    with caplog.at_level(logging.WARNING, logger="crawler.engine.checkpoint"):
        assert Checkpointer(store, table, MockClock(), interval_s=INTERVAL_S).restore() is True
    assert after.counters == Counter({"fetched": 3})
    assert "ignoring checkpoint part 'hosts'" in caplog.text
    assert "new_part" not in caplog.text  # a part the checkpoint does not have is left as it is
    store.close()


def test_an_unreadable_checkpoint_is_ignored_and_said(store_path: str, caplog) -> None:
    store = FrontierStore(store_path)
    store.set_meta("checkpoint", "{not json")
    parts = Parts()
    with caplog.at_level(logging.WARNING, logger="crawler.engine.checkpoint"):
        assert Checkpointer(store, parts.table(), MockClock(), interval_s=INTERVAL_S).restore() is True
    assert not parts.counters and "unreadable checkpoint" in caplog.text
    store.close()


async def test_state_is_shipped_on_its_own_interval_and_at_the_end_and_a_failure_is_retried(store_path: str) -> None:
    clock = MockClock()
    store = FrontierStore(store_path)
    shipped: list[float] = []
    fail = [True]

    async def ship() -> None:
        if fail[0]:
            fail[0] = False
            raise OSError("bucket unreachable")
        shipped.append(clock.now())

    cp = Checkpointer(store, Parts().table(), clock, interval_s=INTERVAL_S, ship=ship, ship_interval_s=60.0)
    for _ in range(10):
        clock.advance(INTERVAL_S)
        await cp.tick()  # never raises: the local store is intact
    await cp.tick(final=True)
    # 60 s failed (kept trying on the next interval), then 120, 180, 240, 300, and the end.
    assert shipped == [120.0, 180.0, 240.0, 300.0, 300.0]
    assert cp.saves == 11  # each shipment carries a fresh checkpoint
    store.close()


def test_resume_puts_the_queue_back_with_the_in_flight_url_queued_again(store_path: str) -> None:
    store = FrontierStore(store_path)
    store.add([UrlItem(f"http://a.test/{i}") for i in range(3)] + [UrlItem("http://b.test/1")])
    store.claim(["http://a.test/0"])  # being fetched when the shard stopped
    clock = MockClock()
    frontier = Frontier(Politeness(1.0, clock=clock), clock, window=10, spill=store)
    assert resume_queue(store, frontier) == 4
    assert len(frontier) == 4 and frontier.queued_for("a.test") == 3 and frontier.queued_for("b.test") == 1
    assert store.counts() == {"queued": 4, "claimed": 0, "done": 0, "dropped": 0}
    store.close()


class Decided:
    """A part whose changes since the checkpoint live in the store's decisions
    (crawler.engine.admission): ``value`` per host, ``changed`` what is not written yet."""

    def __init__(self, store: FrontierStore) -> None:
        self.store = store
        self.value: dict = {}
        self.changed: dict = {}

    def set(self, host: str, value: int) -> None:
        self.value[host] = value
        self.changed[host] = value

    def pending(self) -> dict:
        out, self.changed = self.changed, {}
        return {"budget": out} if out else {}

    def restore_decisions(self) -> None:
        self.value.update({key: value for _, key, value in self.store.decisions.read()})


def _restarted(store_path: str) -> Decided:
    again = FrontierStore(store_path)
    after = Decided(again)
    Checkpointer(again, {"budget": (dict, after.value.update)}, MockClock(), interval_s=INTERVAL_S,
                 decisions=after).restore()
    again.close()
    return after


async def test_a_decision_made_after_the_checkpoint_is_loaded_over_it(store_path: str) -> None:
    clock = MockClock()
    store = FrontierStore(store_path)
    decided = Decided(store)
    cp = Checkpointer(store, {"budget": (lambda: dict(decided.value), decided.value.update)}, clock,
                      interval_s=INTERVAL_S, decisions=decided)
    decided.set("a.test", 1)
    clock.advance(INTERVAL_S)
    await cp.tick()  # a checkpoint: it holds a.test = 1 and empties the decisions
    assert cp.saves == 1 and store.decisions.read() == []
    decided.set("a.test", 2)  # a cut that dropped nothing
    decided.set("b.test", 7)
    await cp.tick()  # no checkpoint due: the decisions are written all the same
    assert cp.saves == 1 and [key for _, key, _ in store.decisions.read()] == ["a.test", "b.test"]
    store.close()
    assert _restarted(store_path).value == {"a.test": 2, "b.test": 7}


def test_a_checkpoint_holds_the_decisions_pending_when_it_is_taken(store_path: str) -> None:
    store = FrontierStore(store_path)
    decided = Decided(store)
    cp = Checkpointer(store, {"budget": (lambda: dict(decided.value), decided.value.update)}, MockClock(),
                      interval_s=INTERVAL_S, decisions=decided)
    decided.set("a.test", 3)
    cp.save(journal=True)  # an operator's change
    assert store.decisions.read() == [] and decided.changed == {}
    store.close()
    assert _restarted(store_path).value == {"a.test": 3}


def test_decisions_are_loaded_when_no_checkpoint_was_ever_written(store_path: str) -> None:
    store = FrontierStore(store_path)
    store.decisions.write({"budget": {"a.test": 5}})
    decided = Decided(store)
    assert Checkpointer(store, {}, MockClock(), interval_s=INTERVAL_S, decisions=decided).restore() is False
    assert decided.value == {"a.test": 5}
    store.close()
