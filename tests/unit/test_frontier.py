"""The two-tier frontier: one in flight per host, hosts served when due, retries wait."""

import random

from crawler.clock import MockClock
from crawler.frontier.frontier import Frontier, FrontierState
from crawler.frontier.urlitem import UrlItem


class FixedPacer:
    """Next allowed = last release + interval (what Politeness does, minus the details)."""

    def __init__(self, clock, interval):
        self.clock = clock
        self.interval = interval
        self.next = {}
        self.paused = set()

    def next_allowed(self, host):
        if host in self.paused:
            return float("inf")
        return self.next.get(host, 0.0)

    def finished(self, host):
        self.next[host] = self.clock.now() + self.interval


def make(interval=1.0):
    clock = MockClock()
    pacer = FixedPacer(clock, interval)
    return clock, pacer, Frontier(pacer, clock, random.Random(1), backoff_s=2.0, max_backoff_s=60.0)


def test_one_url_per_host_in_flight_and_release_requeues_host():
    clock, pacer, f = make()
    f.push([UrlItem(f"http://a.test/{i}") for i in range(3)] + [UrlItem("http://b.test/0")])
    first = f.pop_ready(10)
    assert sorted(i.host for i in first) == ["a.test", "b.test"]  # never two of one host
    assert f.pop_ready(10) == []  # both hosts in flight
    assert f.state() is FrontierState.BUSY
    pacer.finished("a.test")
    f.release("a.test")
    assert f.pop_ready(10) == []  # a.test not due for another second
    assert f.state() is FrontierState.WAITING
    assert f.next_wakeup() == 1.0
    clock.advance(1.0)
    assert [i.url for i in f.pop_ready(10)] == ["http://a.test/1"]


def test_breadth_first_within_a_host():
    clock, pacer, f = make(0.0)
    f.push([UrlItem("http://a.test/deep", depth=3), UrlItem("http://a.test/shallow", depth=1)])
    assert f.pop_ready(1)[0].url == "http://a.test/shallow"


def test_retry_waits_with_backoff_and_does_not_block_other_urls():
    clock, pacer, f = make(0.0)
    f.push([UrlItem("http://a.test/flaky"), UrlItem("http://a.test/ok")])
    item = f.pop_ready(1)[0]
    assert item.url == "http://a.test/flaky"
    item.attempts = 1
    due = f.retry(item)
    f.release("a.test")
    assert 1.0 <= due <= 2.0  # full-jitter half: backoff_s * 2**0 in [cap/2, cap]
    assert [i.url for i in f.pop_ready(5)] == ["http://a.test/ok"]
    f.release("a.test")
    assert f.pop_ready(5) == [] and f.state() is FrontierState.WAITING
    clock.advance(due)
    assert [i.url for i in f.pop_ready(5)] == ["http://a.test/flaky"]


def test_backoff_grows_and_is_capped():
    clock, pacer, f = make(0.0)
    delays = []
    for attempts in (1, 2, 3, 10):
        it = UrlItem(f"http://h{attempts}.test/")
        it.attempts = attempts
        delays.append(f.retry(it) - clock.now())
    assert delays[0] < delays[2]
    assert delays[3] <= 60.0


def test_paused_host_is_never_ready_until_rescheduled():
    clock, pacer, f = make(0.0)
    pacer.paused.add("a.test")
    f.push([UrlItem("http://a.test/")])
    clock.advance(100)
    assert f.pop_ready(5) == []
    assert f.next_wakeup() is None and len(f) == 1
    pacer.paused.clear()
    f.reschedule("a.test")
    assert len(f.pop_ready(5)) == 1


def test_remove_where_purges_queued_urls_of_a_host():
    clock, pacer, f = make(0.0)
    f.push([UrlItem("http://a.test/private/1"), UrlItem("http://a.test/public"), UrlItem("http://b.test/private/2")])
    gone = f.remove_where("a.test", lambda it: "/private/" in it.url)
    assert [i.url for i in gone] == ["http://a.test/private/1"]
    assert len(f) == 2
    assert sorted(i.url for i in f.pop_ready(5)) == ["http://a.test/public", "http://b.test/private/2"]


def test_release_without_claim_is_a_bug():
    clock, pacer, f = make()
    try:
        f.release("nobody.test")
    except RuntimeError as exc:
        assert "nothing in flight" in str(exc)
    else:
        raise AssertionError("release of an idle host must raise")


def test_many_hosts_served_in_next_allowed_order():
    clock, pacer, f = make(1.0)
    f.push([UrlItem(f"http://h{i}.test/{j}") for i in range(50) for j in range(4)])
    fetched = []
    for _ in range(400):
        batch = f.pop_ready(16)
        for it in batch:
            fetched.append((clock.now(), it.host))
            pacer.finished(it.host)
            f.release(it.host)
        if len(f) == 0:
            break
        wake = f.next_wakeup()
        if wake is not None and wake > clock.now() and not batch:
            clock.advance(wake - clock.now())
    assert len(fetched) == 200
    last = {}
    for t, h in fetched:
        if h in last:
            assert t - last[h] >= 1.0
        last[h] = t


def test_a_demoted_host_yields_to_due_hosts_but_is_not_slowed_when_alone():
    clock, pacer, f = make(interval=1.0)
    f.push([UrlItem(f"http://trap.test/{i}") for i in range(5)] + [UrlItem(f"http://good.test/{i}") for i in range(2)])
    f.demote("trap.test", True)
    # Both due, one slot: the demoted host waits for the other.
    assert [i.host for i in f.pop_ready(1)] == ["good.test"]
    assert [i.host for i in f.pop_ready(1)] == ["trap.test"]
    for host in ("good.test", "trap.test"):
        pacer.finished(host)
        f.release(host)
    clock.advance(1.0)
    assert [i.host for i in f.pop_ready(1)] == ["good.test"]
    pacer.finished("good.test")
    f.release("good.test")  # good.test has nothing left
    # Alone, the demoted host is served as soon as politeness allows, at its own interval.
    served = []
    while len(f):
        wake = f.next_wakeup()
        clock.advance(max(0.0, wake - clock.now()))
        (item,) = f.pop_ready(1)
        served.append(clock.now())
        pacer.finished(item.host)
        f.release(item.host)
    assert served == [1.0, 2.0, 3.0, 4.0]
    f.demote("trap.test", False)  # undemoting an idle host is harmless


def test_trim_drops_the_lowest_priority_urls_and_keeps_counts_right():
    clock, pacer, f = make()
    f.push([UrlItem(f"http://t.test/d{d}", depth=d) for d in (1, 5, 2, 4, 3)])
    assert f.queued_for("t.test") == 5
    dropped = f.trim("t.test", 2)
    assert sorted(dropped) == ["http://t.test/d4", "http://t.test/d5"]  # deepest first (BFS priority)
    assert len(f) == 3 and f.queued_for("t.test") == 3
    assert sorted(f.trim("t.test", 10)) == ["http://t.test/d1", "http://t.test/d2", "http://t.test/d3"]
    assert len(f) == 0 and f.state() is FrontierState.EMPTY
    assert f.trim("nobody.test", 3) == []


def _refresh(url, due_at):
    return UrlItem(url, depth=1, kind="refresh", due_at=due_at, fetch_seq=2)


def _drain_one_host(clock, pacer, f, n):
    kinds = []
    for _ in range(n):
        clock.advance(max(0.0, (f.next_wakeup() or clock.now()) - clock.now()))
        (item,) = f.pop_ready(1)
        kinds.append(item.kind)
        pacer.finished(item.host)
        f.release(item.host)
    return kinds


def test_refreshes_get_their_share_of_a_host_and_the_whole_of_it_when_alone():
    clock, pacer, f = make(interval=1.0)
    f.push([UrlItem(f"http://h.test/new{i}", depth=1) for i in range(12)] + [_refresh(f"http://h.test/old{i}", 0.0) for i in range(12)])
    kinds = _drain_one_host(clock, pacer, f, 10)
    # Both have work: 20% of the allowance to refresh (refresh_share 0.2), none starved.
    assert kinds.count("refresh") == 2 and kinds.count("discover") == 8
    rest = _drain_one_host(clock, pacer, f, 14)
    assert rest[:5] == ["refresh"] + ["discover"] * 4  # the same 1 in 5 while both have work
    assert rest[5:] == ["refresh"] * 9  # then refresh takes the whole allowance
    assert len(f) == 0


def test_discovery_takes_the_whole_allowance_while_refreshes_are_not_due():
    clock, pacer, f = make(interval=1.0)
    f.push([UrlItem(f"http://h.test/new{i}") for i in range(3)] + [_refresh("http://h.test/old", due_at=100.0)])
    assert _drain_one_host(clock, pacer, f, 3) == ["discover"] * 3
    assert clock.now() == 2.0 and f.next_wakeup() == 100.0  # the refresh waits for its time
    assert _drain_one_host(clock, pacer, f, 1) == ["refresh"] and clock.now() == 100.0


def test_due_hosts_are_served_by_rank_across_hosts():
    clock, pacer, f = make(interval=1.0)
    clock.advance(50.0)
    f.push([
        UrlItem("http://deep.test/x", depth=5),
        UrlItem("http://shallow.test/x", depth=1),
        _refresh("http://stale.test/x", due_at=30.0),  # 20 s overdue
        UrlItem("http://seed.test/x", depth=0, boost=1),  # a seed given priority 1
    ])
    f.demote("shallow.test", True)
    order = [f.pop_ready(1)[0].host for _ in range(4)]
    assert order == ["seed.test", "stale.test", "deep.test", "shallow.test"]
