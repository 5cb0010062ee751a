"""Hosts placed in regions and handed between shards (crawler.placement.handover), on the mock clock.

Two regions, one shard each, in one process: every shard fetches through a stand-in for
its node's network that answers like the region test web (crawler.testing.regionweb): a
host answers its home region at once and the other region 0.6 s late. Judged from the
stand-in's request log and the rows written: each host ends up fetched from its home
region, found by measuring; an operator's rule moves a host in the middle of its crawl;
and across every move the host never has two requests in flight, the interval holds
between any two of its requests, and every URL gets exactly one row. No sockets, no Ray.
"""

from __future__ import annotations

import asyncio
import random
from collections import defaultdict
from urllib.parse import urlsplit

import pytest

from crawler.config import settings as config
from crawler.clock import MockClock
from crawler.fetch.fetcher import FetchResult
from crawler.frontier.urlitem import UrlItem
from crawler.policy.hostpolicy import parse_host
from crawler.engine.hostview import host_view
from crawler.engine.shard import Shard
from crawler.engine.shardpeers import ShardPeers
from crawler.frontier.store import FrontierStore
from crawler.output import read_pages
from crawler.engine.assembly import build_shard
from crawler.testing.regionweb import RegionWeb
from crawler.placement.topology import Topology, shard_ids

from tests.unit.doubles import MemorySeen, NoBudgetLimit, inline, no_dups

REGIONS = ("near", "far")
CLIENTS = {"10.0.0.1": "near", "10.0.0.2": "far"}
ADDRESS = {region: addr for addr, region in CLIENTS.items()}
INTERVAL = 0.25
PORT = 8000


class Network:
    """One region's network on the mock clock: answers as the region web would to this
    region's address, after its delay (and 10 ms of transfer); logs every request."""

    def __init__(self, web: RegionWeb, clock: MockClock, region: str, log: list) -> None:
        self.web, self.clock, self.region, self.log = web, clock, region, log

    async def fetch(self, url: str, headers=None, **kw) -> FetchResult:
        parts = urlsplit(url)
        assert parts.hostname is not None  # the crawler fetches URLs with a host
        start = self.clock.now()
        reply = self.web.reply(parts.hostname, parts.path or "/", client=ADDRESS[self.region])
        await self.clock.sleep(reply.delay + 0.01)
        end = self.clock.now()
        self.log.append((parts.hostname, parts.path, self.region, start, end))
        return FetchResult(url=url, status=reply.status, headers={k.lower(): v for k, v in reply.headers}, body=reply.body,
                           truncated=False, error=None, error_kind=None, transient=False, started_at=start,
                           headers_at=end, finished_at=end, ip="127.0.0.1")

    async def close(self) -> None:
        return None


class Crawl:
    """Two shards (one per region) over the region web, driven by the mock clock."""

    def __init__(self, tmp_path, rules: dict[str, str] | None = None) -> None:
        self.web = RegionWeb(REGIONS, hosts_per_region=2, pages_per_host=6, clients=CLIENTS)
        self.web.bind(PORT)
        self.cfg = config.from_dict({
            "seeds": [f"http://{h}:{PORT}/" for h in self.web.hosts()],
            "politeness": {"interval_s": INTERVAL}, "sitemaps": {"enabled": False},
            "runtime": {"regions": list(REGIONS)},
            "placement": {"rules": rules or {}},
            "output": {"path": str(tmp_path / "out"), "row_flush_interval_s": 1.0},
        })
        self.clock = MockClock()
        self.log: list[tuple[str, str, str, float, float]] = []
        ids = shard_ids(1, REGIONS)
        self.topology = Topology.of(ids, REGIONS)
        self.shards: dict[str, Shard] = {}
        self.peers = ShardPeers(lambda sid: self.shards[sid], self.topology)
        seen = MemorySeen()
        for sid in ids:
            region = self.topology.region_of_shard(sid)
            assert region is not None  # a shard of a topology with regions
            self.shards[sid] = build_shard(
                self.cfg, sid, seeds=self.cfg.seeds, seen=seen, content=no_dups, budget=NoBudgetLimit(),
                deliver=self.peers.accept, owner_of=self.topology.home_of,
                store=FrontierStore(str(tmp_path / f"{sid}.sqlite")), clock=self.clock, rng=random.Random(7),
                fetcher=Network(self.web, self.clock, region, self.log), run_blocking=inline,
                topology=self.topology, peers=self.peers,
            )

    def done(self) -> bool:
        return all(s.report().idle and s.parts.outbox.pending() == 0 for s in self.shards.values())

    async def run(self, middle=None) -> None:
        for url in self.cfg.seeds:
            host = urlsplit(url).netloc
            await self.shards[self.topology.home_of(host)].accept([UrlItem(url, 0)])
        runners = [asyncio.ensure_future(s.run()) for s in self.shards.values()]
        if middle is not None:
            await middle(self)
        await self.clock.run_until(self.done, max_time=3000)
        for s in self.shards.values():
            s.stop()
        await asyncio.gather(*runners)
        for s in self.shards.values():
            await s.close()

    def rows(self) -> list[dict]:
        return read_pages(self.cfg.output.path).to_pylist()

    def requests_by_host(self) -> dict[str, list[tuple[str, str, float, float]]]:
        out: dict[str, list] = defaultdict(list)
        for host, path, region, start, end in self.log:
            out[host].append((path, region, start, end))
        return {h: sorted(v, key=lambda r: r[2]) for h, v in out.items()}


def assert_polite_and_exact(crawl: Crawl) -> None:
    """One request in flight per host and the interval between any two, whichever region
    sent them; every page of the web exactly one row; no page requested twice."""
    for host, reqs in crawl.requests_by_host().items():
        for (_, _, _, end), (path, region, start, _) in zip(reqs, reqs[1:]):
            assert start >= end + INTERVAL - 1e-9, f"{host}{path} from {region} at {start:.3f}, previous ended {end:.3f}"
    rows = crawl.rows()
    urls = [r["url"] for r in rows]
    assert len(urls) == len(set(urls)), "a URL got two rows"
    expected = {f"http://{h}:{PORT}{p}" for h in crawl.web.hosts() for p in crawl.web.paths()}
    assert set(urls) == expected
    pages = [(h, p) for h, p, _, _, _ in crawl.log if p != "/robots.txt"]
    assert len(pages) == len(set(pages)), "a page was requested twice"


def test_each_host_is_measured_once_and_fetched_from_its_home_region(tmp_path):
    crawl = Crawl(tmp_path)
    asyncio.run(crawl.run())
    assert_polite_and_exact(crawl)
    for host, reqs in crawl.requests_by_host().items():
        home = crawl.web.home_of(host)
        pages = [region for path, region, _, _ in reqs if path != "/robots.txt"]
        assert pages and set(pages) == {home}, f"{host} (home {home}) was fetched from {set(pages)}"
        probes = [region for path, region, _, _ in reqs[:2]]
        assert sorted(probes) == sorted(REGIONS), f"{host}: first contact not timed from every region"
    far_host = crawl.web.hosts_in("far")[0]
    owner = crawl.shards[crawl.topology.owner_in("far", f"{far_host}:{PORT}")]
    placed = owner.parts.regions.describe(f"{far_host}:{PORT}")
    assert placed.region == "far" and placed.how == "measured"
    assert placed.figures["far"] < 0.1 < 0.6 <= placed.figures["near"]
    # Its home (the default region's shard) forwards to the owner, and says so.
    home = crawl.shards[crawl.topology.home_of(f"{far_host}:{PORT}")]
    assert home.parts.regions.owner_elsewhere(f"{far_host}:{PORT}") == owner.shard_id
    stats = home.report().regions
    assert stats["region_moves_out"] == len(crawl.web.hosts_in("far"))


def test_an_operator_rule_places_a_host_without_measuring(tmp_path):
    host = RegionWeb(REGIONS, hosts_per_region=2, clients=CLIENTS).hosts_in("near")[0]
    crawl = Crawl(tmp_path, rules={host: "far"})
    asyncio.run(crawl.run())
    assert_polite_and_exact(crawl)
    reqs = crawl.requests_by_host()[host]
    assert {region for _, region, _, _ in reqs} == {"far"}, "a ruled host is neither measured nor fetched elsewhere"


def test_a_move_in_the_middle_of_a_crawl_loses_nothing_and_keeps_the_interval(tmp_path):
    crawl = Crawl(tmp_path)
    host = crawl.web.hosts_in("near")[0]
    key = f"{host}:{PORT}"

    async def middle(c: Crawl) -> None:
        # Wait until the host has a few pages fetched near home, then place it far away.
        await c.clock.run_until(lambda: sum(1 for h, p, *_ in c.log if h == host and p != "/robots.txt") >= 2, max_time=600)
        home = c.shards[c.topology.home_of(key)]
        assert home.parts.regions is not None  # a shard of a crawl with runtime.regions
        placing = asyncio.ensure_future(home.parts.regions.place(key, "far"))  # the clock runs meanwhile
        await c.clock.run_until(placing.done, max_time=600)
        answer = placing.result()
        assert answer.region == "far" and answer.how == "rule"

    asyncio.run(crawl.run(middle))
    assert_polite_and_exact(crawl)
    pages = [region for path, region, _, _ in crawl.requests_by_host()[host] if path != "/robots.txt"]
    k = pages.index("far")
    assert k >= 2 and set(pages[k:]) == {"far"}, pages
    far = crawl.shards[crawl.topology.owner_in("far", key)]
    info = host_view(far.parts, parse_host(key))
    placement = info.keys[0].placement
    assert placement is not None and placement.how == "rule"


def test_a_move_a_crash_interrupted_is_finished_on_restart(tmp_path):
    """The marker is durable before anything leaves: a shard restarted mid-move hands the
    host over instead of fetching it, and the receiver takes it once."""
    crawl = Crawl(tmp_path)
    host = crawl.web.hosts_in("near")[1]
    key = f"{host}:{PORT}"
    home_id = crawl.topology.home_of(key)

    async def scenario() -> None:
        shard = crawl.shards[home_id]
        await shard.accept([UrlItem(f"http://{key}/", 0), UrlItem(f"http://{key}/p/1", 0)])
        shard.parts.regions.moving[key] = crawl.topology.owner_in("far", key)
        shard.parts.checkpointer.save()
        shard.parts.store.close()

    asyncio.run(scenario())
    again = Crawl(tmp_path, rules={host: "far"})  # (without it, far would measure it back home)
    assert key in again.shards[home_id].parts.regions.moving
    asyncio.run(again.run())
    far = FrontierStore(str(tmp_path / f"{again.topology.owner_in('far', key)}.sqlite"))
    near = FrontierStore(str(tmp_path / f"{home_id}.sqlite"))
    assert far.url_status(f"http://{key}/p/1")["status"] == "fetched"
    assert near.url_status(f"http://{key}/p/1") is None, "the old owner still holds the host"
    pages = [region for path, region, _, _ in again.requests_by_host()[host] if path != "/robots.txt"]
    assert set(pages) == {"far"}


def test_a_rule_added_between_runs_moves_a_host_that_already_has_work(tmp_path):
    """A host queued in its home region; the next run's config places it far away: the
    owner moves it before its first request, and it is fetched from there only, once."""
    first = Crawl(tmp_path)
    host = first.web.hosts_in("near")[0]
    key = f"{host}:{PORT}"
    home_id = first.topology.home_of(key)

    async def queue_only() -> None:
        await first.shards[home_id].accept([UrlItem(f"http://{key}/", 0)])
        first.shards[home_id].parts.store.close()

    asyncio.run(queue_only())
    again = Crawl(tmp_path, rules={host: "far"})
    asyncio.run(again.run())
    assert_polite_and_exact(again)
    regions = {region for _, region, _, _ in again.requests_by_host()[host]}
    assert regions == {"far"}, f"{host} was fetched from {regions}"
    assert again.shards[home_id].report().regions["region_moves_out"] >= 1


def test_a_move_that_fails_leaves_the_host_where_it_was_and_routed_there(tmp_path):
    """The far shard cannot take the host (its adoption fails): the host stays near, its
    home keeps routing to it, and it is fetched from there only, each page once."""
    crawl = Crawl(tmp_path)
    refused = []

    async def failing_adopt(shard, state):
        refused.append(state.host)
        raise OSError("the far shard's disk is full")

    crawl.peers.adopt = failing_adopt
    asyncio.run(crawl.run())
    assert_polite_and_exact(crawl)
    assert sorted(refused) == sorted(f"{h}:{PORT}" for h in crawl.web.hosts_in("far"))
    for host in crawl.web.hosts_in("far"):
        key = f"{host}:{PORT}"
        pages = {region for path, region, _, _ in crawl.requests_by_host()[host] if path != "/robots.txt"}
        assert pages == {"near"}, f"{host}: pages fetched from {pages} after a failed move"
        home = crawl.shards[crawl.topology.home_of(key)]
        assert home.parts.regions.owner_elsewhere(key) is None
        assert home.parts.regions.describe(key).region == "near"
    assert crawl.shards["shard-near-000"].report().regions["region_move_failures"] == len(refused)


class RecordingRuntime:
    """Records what reaches the runtime seam (nothing should, for a refused region)."""

    def __init__(self) -> None:
        self.calls: list[tuple] = []

    async def set_host_policy(self, shard_id, change):
        self.calls.append(("policy", shard_id, change))

    async def place(self, shard_id, host, region):
        self.calls.append(("place", shard_id, host, region))
        return {}


@pytest.mark.parametrize("regions, region, message", [
    (None, "eu-west", "region: this crawl has one region (runtime.regions is null)"),
    (["eu-west", "us-east"], "mars", "region: 'mars' is not one of runtime.regions (eu-west, us-east) or auto"),
])
def test_a_region_the_crawl_does_not_have_is_refused_before_anything_changes(regions, region, message):
    from crawler.errors import ConfigError
    from crawler.session.steering import Steering
    from crawler.session.termination import TerminationDetector

    cfg = config.from_dict({"seeds": ["http://a.test/"], "runtime": {"regions": regions}})
    runtime = RecordingRuntime()
    steering = Steering(cfg, runtime, lambda host: "shard-000", TerminationDetector())
    with pytest.raises(ConfigError) as exc:
        asyncio.run(steering.set_host_policy("a.test", paused=True, region=region))
    assert str(exc.value) == message
    assert runtime.calls == []
    asyncio.run(steering.set_host_policy("a.test", paused=True, region="auto" if regions else None))
    assert [c[0] for c in runtime.calls] == (["policy", "place"] if regions else ["policy"])
