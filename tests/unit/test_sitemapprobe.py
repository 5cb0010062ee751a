"""/sitemap.xml probes only where they can pay (crawler.freshness.sitemapprobe): the policy
alone, then one shard on the mock clock, judged from the fake server's log."""

from __future__ import annotations

import asyncio
import random
from collections import Counter

from crawler.clock import MockClock
from crawler.config import settings as config
from crawler.counters import ShardCounters
from crawler.engine.assembly import build_shard
from crawler.freshness.sitemapprobe import SitemapProbe
from crawler.freshness.sitemaps import SitemapReader
from crawler.frontier.store import FrontierStore
from crawler.frontier.urlitem import UrlItem

from tests.unit.doubles import LoopBack, MemorySeen, NoBudgetLimit, ScriptedServer, html, inline, no_dups


def probe(after: int = 3, min_yield: float = 0.5, sample: int = 2, **kw: int) -> SitemapProbe:
    return SitemapProbe(after_pages=after, min_yield=min_yield, counters=ShardCounters(), sample=sample, **kw)


def org(i: int) -> str:
    return f"http://h{i}.test"


def test_the_sample_is_probed_at_once_then_small_hosts_wait_and_a_big_one_is_probed_at_its_nth_page():
    p = probe()
    assert p.at_robots(org(0), "h0.test") and p.at_robots(org(1), "h1.test")  # the sample
    p.launched(org(0) + "/sitemap.xml")
    p.launched(org(1) + "/sitemap.xml")
    assert not p.at_robots(org(2), "h2.test")  # the yield is unknown: wait
    p.settle(org(0) + "/sitemap.xml", False)
    p.settle(org(1) + "/sitemap.xml", False)
    assert not p.paying and not p.at_robots(org(3), "h3.test")
    assert p.due("h2.test") == () and p.due("h2.test") == ()  # pages 1 and 2 of h2
    assert p.due("h2.test") == (org(2),)  # its 3rd page: the probe is made now, once
    assert p.due("h2.test") == () and p.due("h9.test") == ()  # not waiting: nothing


def test_a_rising_yield_probes_every_waiting_host_once_and_every_new_host_at_once():
    p = probe()
    for i in range(2):
        assert p.at_robots(org(i), f"h{i}.test")
        p.launched(org(i) + "/sitemap.xml")
    assert not p.at_robots(org(2), "h2.test") and not p.at_robots(org(3), "h3.test")
    p.settle(org(0) + "/sitemap.xml", True)  # 1 of 1 found: paying
    assert p.paying
    assert sorted(p.due("h7.test")) == [org(2), org(3)]  # handed to the next page's gate
    assert p.due("h2.test") == ()  # no longer waiting: no second probe
    assert p.at_robots(org(4), "h4.test")
    assert (p.settled, p.found) == (1, 1)


def test_reads_of_named_sitemaps_are_not_probes_and_the_yield_counts_probes_only():
    c = ShardCounters()
    p = SitemapProbe(after_pages=3, min_yield=0.5, counters=c, sample=1)
    p.launched(org(0) + "/sitemap.xml")
    p.settle(org(0) + "/news.xml", True)  # robots.txt named it: not a probe
    p.settle(org(0) + "/sitemap.xml", False)
    p.settle(org(0) + "/sitemap.xml", True)  # settled once only
    assert (p.settled, p.found, c.sitemap_probes, c.sitemap_probes_found) == (1, 0, 1, 0)


def test_after_pages_zero_probes_every_host_and_the_waiting_hosts_are_bounded():
    every = probe(after=0, sample=0)
    assert all(every.at_robots(org(i), f"h{i}.test") for i in range(10))
    p = probe(sample=0, max_waiting=2)
    for i in range(3):
        assert not p.at_robots(org(i), f"h{i}.test")
    for _ in range(3):
        assert p.due("h0.test") == ()  # the oldest was dropped: it waits no more
        due = p.due("h2.test")
    assert due == (org(2),)


def test_the_reader_plans_named_sitemaps_always_and_the_probe_by_the_policy_and_robots():
    c = ShardCounters()
    p = SitemapProbe(after_pages=2, min_yield=0.5, counters=c, sample=1)
    reader = SitemapReader(max_files=5, max_urls=10, max_bytes=10**6, links=None, counters=c,  # type: ignore[arg-type]
                           dropped=Counter(), probe=p)
    yes = lambda url: True  # noqa: E731
    assert [i.url for i in reader.plan(org(0), "h0.test", ["/s.xml"], yes)] == [org(0) + "/s.xml"]
    assert c.sitemap_probes == 0
    assert reader.plan(org(1), "h1.test", [], lambda url: False) == []  # robots says no: never asked
    assert [i.url for i in reader.plan(org(2), "h2.test", [], yes)] == [org(2) + "/sitemap.xml"]  # the sample
    assert reader.plan(org(3), "h3.test", [], yes) == []  # waits
    assert reader.probes_due("h3.test", yes) == []
    assert [i.url for i in reader.probes_due("h3.test", yes)] == [org(3) + "/sitemap.xml"]
    assert c.sitemap_probes == 2


HOSTS = 8
BIG = "h7.test"


def test_a_shard_probes_its_first_hosts_then_only_a_big_host_from_the_servers_view(tmp_path):
    """Eight hosts, no robots.txt, no sitemap (404s); seven of 2 pages and one of 12.
    Before: every host's /sitemap.xml. Now: the sample's 4, and the big host's at its 10th page."""
    def u(host: str, path: str) -> str:
        return f"http://{host}{path}"

    script = {}
    seeds = []
    for i in range(HOSTS):
        host = f"h{i}.test"
        n = 12 if host == BIG else 2
        seeds.append(u(host, "/"))
        script[u(host, "/")] = [(200, html(*(u(host, f"/p/{k}") for k in range(1, n))), 0.05)]
        for k in range(1, n):
            script[u(host, f"/p/{k}")] = [(200, html(u(host, "/")), 0.05)]
    cfg = config.from_dict({"seeds": seeds, "politeness": {"interval_s": 0.5},
                            "output": {"path": str(tmp_path / "out"), "row_flush_interval_s": 1.0}})
    clock = MockClock()
    server = ScriptedServer(clock, script)
    seen = MemorySeen()
    deliver = LoopBack()
    shard = build_shard(cfg, "shard-000", seeds=seeds, seen=seen, content=no_dups, budget=NoBudgetLimit(),
                        deliver=deliver, owner_of=lambda host: "shard-000",
                        store=FrontierStore(str(tmp_path / "shard.sqlite")), clock=clock, rng=random.Random(3),
                        fetcher=server, run_blocking=inline)
    deliver.shard = shard
    pages = 7 * 2 + 12

    async def scenario() -> None:
        seen.seen.update(seeds)
        shard.admit([UrlItem(s, 0) for s in seeds])
        runner = asyncio.ensure_future(shard.run())
        def done() -> bool:
            return shard.report().idle and sum(1 for r in server.log if "/p/" in r[0] or r[0].endswith(".test/")) == pages

        await clock.run_until(done, max_time=120)
        shard.stop()
        await runner
        await shard.close()

    asyncio.run(scenario())
    probed = [url.split("/")[2] for url, _, _ in server.log if url.endswith("/sitemap.xml")]
    assert len(probed) == len(set(probed)) == 5, probed
    assert BIG in probed
    big = [url for url, _, _ in server.log if url.startswith(f"http://{BIG}/")]
    at = big.index(u(BIG, "/sitemap.xml"))
    assert sum(1 for x in big[:at] if not x.endswith("robots.txt")) >= 9, big  # after its 10th page passed robots
