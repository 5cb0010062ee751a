"""The frontier's and the store's collaborators on their own: a host's queue cut by rank,
all hosts' totals kept by the removals, the spill window's recount, the host schedule's
parked and held hosts, the store's acks and its spill rows."""

from __future__ import annotations

from pathlib import Path

from crawler.frontier.backqueue import HostQueue, HostQueues, default_priority
from crawler.frontier.hostschedule import HostSchedule
from crawler.frontier.spillwindow import SpillWindow
from crawler.frontier.store import FrontierStore
from crawler.frontier.urlitem import UrlItem


def test_a_host_queue_drops_its_lowest_ranked_urls_first() -> None:
    q = HostQueue()
    for depth in (0, 3, 1, 2):
        q.add(UrlItem(f"http://a.test/{depth}", depth), default_priority, 0.0)
    urls, n = q.drop_lowest(2, default_priority, 0.0)
    assert sorted(urls) == ["http://a.test/2", "http://a.test/3"] and n == 2
    assert sorted(it.url for it in q.items()) == ["http://a.test/0", "http://a.test/1"]


def test_removals_keep_the_totals() -> None:
    queues = HostQueues()
    for i in range(3):
        item = UrlItem(f"http://a.test/{i}", kind="refresh" if i == 0 else "discover")
        queues.of("a.test").add(item, default_priority, 0.0)
        queues.size += 1
        queues.refreshes += item.kind == "refresh"
    removed = queues.remove("a.test", lambda it: it.url.endswith("/0"))
    assert [it.url for it in removed] == ["http://a.test/0"]
    assert (queues.size, queues.refreshes, queues.queued_for("a.test")) == (2, 0, 2)
    assert queues.evict("a.test") == 2 and queues.size == 0 and queues.by_host == {}


class Store:
    """A spill store that holds fewer URLs than the frontier counted."""

    def __init__(self, urls: list[str]) -> None:
        self.urls = urls

    def load(self, host: str, after_id: int, limit: int) -> list[UrlItem]:
        out = []
        for i, url in enumerate(self.urls[after_id : after_id + limit], start=after_id + 1):
            it = UrlItem(url)
            it.sid = i
            out.append(it)
        return out

    def count_queued(self, host: str, after_id: int) -> int:
        return max(0, len(self.urls) - after_id)

    def drop_newest(self, host: str, after_id: int, limit: int) -> list[str]:
        return []


def test_the_spill_window_trusts_the_store_over_its_count() -> None:
    window = SpillWindow(2, Store(["http://a.test/1"]))
    q = HostQueue(spilled=3)
    assert window.load("a.test", q, 0.0, default_priority) == 0  # loaded one: no news yet
    assert q.take(0.0, 0.2) is not None and q.spilled == 2
    correction = window.load("a.test", q, 0.0, default_priority)  # the store has none left
    assert (q.spilled, correction, window.recounts) == (0, -2, 1)


class Pacer:
    def __init__(self) -> None:
        self.paused: set[str] = set()

    def next_allowed(self, host: str) -> float:
        return float("inf") if host in self.paused else 0.0


def test_a_paused_host_is_parked_and_a_held_one_is_not_scheduled() -> None:
    queues = HostQueues()
    pacer = Pacer()
    schedule = HostSchedule(queues.by_host, pacer)
    for host in ("a.test", "b.test"):
        queues.of(host).add(UrlItem(f"http://{host}/"), default_priority, 0.0)
    pacer.paused.add("a.test")
    schedule.schedule("a.test")
    schedule.hold("b.test", True)
    schedule.heaps.collect_due(0.0, default_priority)
    assert schedule.parked == {"a.test"} and schedule.heaps.pop_due() is None
    schedule.hold("b.test", False)
    schedule.heaps.collect_due(0.0, default_priority)
    assert schedule.heaps.pop_due() == "b.test"


def test_the_store_acks_and_spills_through_its_parts(tmp_path: Path) -> None:
    store = FrontierStore(str(tmp_path / "f.sqlite"), durable=False)
    store.add([UrlItem(f"http://a.test/{i}") for i in range(4)])
    store.claim(["http://a.test/0"])
    assert store.acks.finish_from_output(["http://a.test/0", "http://a.test/1"]) == 2
    assert store.spill.pending_hosts() == [("a.test", 2)]
    assert store.spill.drop_newest("a.test", 0, 1) == ["http://a.test/3"]
    assert store.acks.recover() == 0
    assert store.lookup.counts() == {"queued": 1, "claimed": 0, "done": 2, "dropped": 1}
    store.close()
