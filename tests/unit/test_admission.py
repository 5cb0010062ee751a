"""Admission on a real durable store, cached robots rules and the mock clock: what a shard
takes into its queue, and what leaves without a fetch, each counted (crawler.engine.admission).

A user sees it as: a batch delivered twice is queued once; a URL robots.txt disallows
gets its ``robots_blocked`` row (the caller writes it) and never waits in the queue; a
host over its page budget stops growing, the cut counted, and the URL ledger balances.
"""

from __future__ import annotations

import random
from collections import Counter

import pytest

from crawler.counters import DropReason
from crawler.config import settings as config
from crawler.engine.admission import Admission
from crawler.clock import MockClock
from crawler.frontier.frontier import Frontier
from crawler.frontier.urlitem import UrlItem
from crawler.frontier.store import FrontierStore
from crawler.output import read_pages
from crawler.policy.politeness import Politeness
from crawler.robots import RobotsCache
from crawler.engine.assembly import build_shard
from crawler.policy.hostbudget import HostBudget
from tests.unit.doubles import MemorySeen, NoBudgetLimit, ScriptedServer, inline, no_delivery, no_dups

UA = "raycrawl/0.1 (+https://example.invalid/bot)"
ROBOTS = b"User-agent: *\nDisallow: /private/\n"
TTL_S = 3600.0


class Shard:
    """The parts Admission works with, on one clock and one store."""

    def __init__(self, tmp_path, *, max_pages_per_host: int | None = None, respect_robots: bool = True) -> None:
        self.clock = MockClock()
        self.store = FrontierStore(str(tmp_path / "shard.sqlite"))
        self.robots = RobotsCache(UA, ttl_s=TTL_S, clock=self.clock)
        self.budget = HostBudget(max_pages_per_host)
        self.frontier = Frontier(Politeness(1.0, clock=self.clock), self.clock, random.Random(1))
        self.dropped: Counter[DropReason] = Counter()
        self.admission = Admission(self.store, self.robots, self.budget, self.frontier,
                                   respect_robots=respect_robots, dropped=self.dropped)

    def take(self, *urls: str) -> tuple[list[str], list[str]]:
        keep, refused = self.admission.take([UrlItem(u, 1) for u in urls])
        self.frontier.push(keep)
        return [i.url for i in keep], [i.url for i in refused]


@pytest.fixture
def shard(tmp_path):
    s = Shard(tmp_path)
    yield s
    s.store.close()


def test_a_batch_delivered_twice_is_queued_once_and_the_repeat_counted(shard: Shard) -> None:
    urls = ("http://a.test/1", "http://a.test/2")
    assert shard.take(*urls) == (list(urls), [])
    # A retried delivery (the reply was lost), plus one new URL.
    assert shard.take(*urls, "http://a.test/3") == (["http://a.test/3"], [])
    assert shard.dropped == Counter({"duplicate_delivery": 2})
    assert shard.store.counts() == {"queued": 3, "claimed": 0, "done": 0, "dropped": 0}
    assert len(shard.frontier) == 3


def test_urls_robots_disallows_are_refused_claimed_and_never_queued(shard: Shard) -> None:
    shard.robots.from_response("http://a.test", 200, ROBOTS)
    keep, refused = shard.take("http://a.test/ok", "http://a.test/private/x", "http://a.test/private/y")
    assert keep == ["http://a.test/ok"]
    assert refused == ["http://a.test/private/x", "http://a.test/private/y"]  # the caller writes their rows
    # Claimed in the same step: never counted as work waiting in the queue.
    assert shard.store.counts() == {"queued": 1, "claimed": 2, "done": 0, "dropped": 0}
    assert len(shard.frontier) == 1
    status = shard.store.url_status("http://a.test/private/x")
    assert status is not None and status["in_flight"] is True
    assert not shard.dropped  # a refusal is a row (robots_blocked), not a silent drop
    # The same URL delivered again is a duplicate delivery, not a second refusal.
    assert shard.take("http://a.test/private/x") == ([], [])
    assert shard.dropped == Counter({"duplicate_delivery": 1})


def test_without_cached_rules_a_url_is_queued_for_the_robots_fetch_to_decide(shard: Shard) -> None:
    shard.robots.from_response("http://a.test", 200, ROBOTS)
    shard.clock.advance(TTL_S)  # the rules expired: unknown again until refetched
    assert shard.take("http://a.test/private/late", "http://b.test/private/z") == (
        ["http://a.test/private/late", "http://b.test/private/z"], [])


def test_robots_are_not_consulted_when_the_operator_turned_them_off(tmp_path) -> None:
    s = Shard(tmp_path, respect_robots=False)
    s.robots.from_response("http://a.test", 200, ROBOTS)
    assert s.take("http://a.test/private/x") == (["http://a.test/private/x"], [])
    s.store.close()


def test_a_host_over_its_page_budget_is_cut_and_each_cut_url_counted(tmp_path) -> None:
    s = Shard(tmp_path, max_pages_per_host=2)
    keep, _ = s.take("http://a.test/1", "http://a.test/2", "http://a.test/3", "http://b.test/1")
    assert keep == ["http://a.test/1", "http://a.test/2", "http://b.test/1"]
    assert s.take("http://a.test/4") == ([], [])
    assert s.dropped == Counter({"host_budget": 2})
    # Finished in the store with no row: the ledger's "dropped", not queued work.
    assert s.store.counts() == {"queued": 3, "claimed": 0, "done": 0, "dropped": 2}
    status = s.store.url_status("http://a.test/3")
    assert status is not None and status["status"] == "dropped"
    s.store.close()


def test_a_robots_refusal_does_not_spend_the_hosts_budget(tmp_path) -> None:
    s = Shard(tmp_path, max_pages_per_host=1)
    s.robots.from_response("http://a.test", 200, ROBOTS)
    keep, refused = s.take("http://a.test/private/x", "http://a.test/ok")
    assert (keep, refused) == (["http://a.test/ok"], ["http://a.test/private/x"])
    assert not s.dropped
    s.store.close()


def test_a_budget_cut_trims_the_hosts_queue_and_counts_each_url(shard: Shard) -> None:
    shard.take(*(f"http://a.test/{i}" for i in range(5)), "http://b.test/1")
    assert shard.admission.trim("a.test", 3) == 3
    assert shard.frontier.queued_for("a.test") == 2 and shard.frontier.queued_for("b.test") == 1
    assert shard.dropped == Counter({"budget_cut": 3})
    assert shard.store.counts() == {"queued": 3, "claimed": 0, "done": 0, "dropped": 3}


async def test_a_shard_writes_and_counts_one_row_per_refusal(tmp_path) -> None:
    """Through the shard: each refused URL is one row, counted by its outcome in
    ``status().counters`` (what stats.json's outcomes sum); a robots.txt that got no
    response refuses too, but the row says the network failed, not the site."""
    cfg = config.from_dict({"seeds": ["http://a.test/"], "scope": "any", "output": {"path": str(tmp_path / "out")}})
    clock = MockClock()
    shard = build_shard(
        cfg, "shard-000", seeds=["http://a.test/"], seen=MemorySeen(), content=no_dups, budget=NoBudgetLimit(),
        deliver=no_delivery, owner_of=lambda h: "shard-000", store=FrontierStore(str(tmp_path / "shard.sqlite")),
        clock=clock, fetcher=ScriptedServer(clock, {}), run_blocking=inline,
    )
    robots = shard.parts.admission.robots
    robots.from_response("http://a.test", 200, ROBOTS)
    robots.from_response("http://down.test", None, None, error="connect: refused")
    queued = shard.admit([UrlItem(u, 1) for u in (
        "http://a.test/ok", "http://a.test/private/1", "http://a.test/private/2", "http://down.test/x")])
    st = shard.report()
    assert queued == 1 and st.queued == 1
    assert st.counters.robots_blocked == 2 and st.counters.failed == 1 and st.counters.accepted == 1
    assert st.dropped == {}
    await shard.close()
    rows = {r["url"]: (r["outcome"], r["error"]) for r in read_pages(cfg.output.path).to_pylist()}
    assert rows == {
        "http://a.test/private/1": ("robots_blocked", "disallowed by robots.txt"),
        "http://a.test/private/2": ("robots_blocked", "disallowed by robots.txt"),
        "http://down.test/x": ("failed", "robots.txt unreachable: connect: refused"),
    }
