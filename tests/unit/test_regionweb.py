"""The region test web (crawler.testing.regionweb): the delay rule, the pages, the log.

The delay rule and the ground truth are checked on the web object; the delay and the
recording as a crawler meets them with real requests over loopback, from fetchers bound
to the two regions' source addresses (127.0.0.2: eu-west, 127.0.0.3: us-east).
"""

from __future__ import annotations

import asyncio
import re

import pytest

from crawler.fetch.fetcher import Fetcher
from crawler.testing.regionweb import REGION_ADDRESSES, RegionWeb, region_report
from crawler.testing.server import WebServer

EU_CLIENT, US_CLIENT = "127.0.0.2", "127.0.0.3"
UA = "raycrawl-test/1.0 (+https://example.invalid/bot)"


def test_region_addresses_are_the_two_test_regions():
    assert dict(REGION_ADDRESSES) == {EU_CLIENT: "eu-west", US_CLIENT: "us-east"}


@pytest.mark.parametrize(
    "host, client, delay",
    [
        ("eu-west-0.test", EU_CLIENT, 0.01),  # at home: near
        ("eu-west-2.test", US_CLIENT, 0.6),   # from the other region: cross
        ("us-east-1.test", US_CLIENT, 0.01),
        ("us-east-1.test", EU_CLIENT, 0.6),
        ("eu-west-0.test", "127.0.0.1", 0.6),  # an address no region has: far from everything
        ("eu-west-0.test", "", 0.6),
        ("nowhere.test", EU_CLIENT, 0.6),      # not a host of this web: nobody is near it
    ],
)
def test_the_delay_is_decided_by_client_region_and_host_home(host, client, delay):
    web = RegionWeb(cross_delay_s=0.6, near_delay_s=0.01)
    assert web.delay(host, client) == delay
    for path in ("/", "/p/3", "/robots.txt", "/missing"):
        assert web.reply(host, path, client=client).delay == delay  # every answer, 404s included


def test_hosts_have_homes_and_every_page_is_reachable_from_the_seeds_by_served_links():
    web = RegionWeb(hosts_per_region=3, pages_per_host=6, seed=4)
    web.bind(8123)
    assert web.hosts_in("eu-west") == ["eu-west-0.test", "eu-west-1.test", "eu-west-2.test"]
    assert [web.home_of(h) for h in web.hosts_in("us-east")] == ["us-east"] * 3
    assert web.home_of("nowhere.test") is None
    # Walk the served HTML (not the web's own link table) from the seeds.
    seen, todo = set(web.seeds()), list(web.seeds())
    while todo:
        url = todo.pop()
        host, path = re.fullmatch(r"http://([^:/]+):8123(/.*)", url).groups()
        reply = web.reply(host, path, client=EU_CLIENT)
        assert reply.status == 200 and len(reply.body.split()) > 80
        found = set()
        for href in re.findall(rb'href="([^"]+)"', reply.body):
            href = href.decode()
            found.add(f"http:{href}" if href.startswith("//") else web.url(host, href))
        assert found == set(web.links(host, path))
        for u in found - seen:
            seen.add(u)
            todo.append(u)
    assert seen == web.must_fetch() and len(seen) == 2 * 3 * 6
    assert web.reply("eu-west-0.test", "/robots.txt").body == b"User-agent: *\nAllow: /\n"
    assert web.must_not_fetch("eu-west-0.test", "/p/99") == "not a page of this web"
    assert web.must_not_fetch("eu-west-0.test", "/robots.txt") is None


def test_the_same_seed_serves_the_same_bytes():
    def bodies(seed):
        web = RegionWeb(seed=seed)
        web.bind(8123)
        return [web.reply(h, p).body for h in web.hosts() for p in web.paths()]

    assert bodies(1) == bodies(1)
    assert bodies(1) != bodies(2)
    assert len(set(bodies(1))) == len(bodies(1))  # no two pages alike


CROSS = 0.4


@pytest.fixture(scope="module")
def server():
    with WebServer(RegionWeb(cross_delay_s=CROSS, near_delay_s=0.0, seed=7)) as srv:
        yield srv


async def _get(srv: WebServer, source: str | None, targets: list[tuple[str, str]]) -> list[int | None]:
    fetcher = Fetcher(user_agent=UA, resolve={"*.test": "127.0.0.1"}, source_address=source)
    try:
        results = await asyncio.gather(*(fetcher.fetch(srv.url(h, p)) for h, p in targets))
    finally:
        await fetcher.close()
    return [r.status for r in results]


async def test_the_server_delays_the_far_region_and_logs_who_asked_what_when(server):
    server.reset()
    host = "eu-west-1.test"
    assert await asyncio.gather(
        _get(server, EU_CLIENT, [(host, "/")]),
        _get(server, US_CLIENT, [(host, "/p/2")]),
        _get(server, None, [(host, "/robots.txt")]),  # the system's address, 127.0.0.1: unknown
    ) == [[200], [200], [200]]
    recs = {r.client: r for r in server.requests(host)}
    assert set(recs) == {EU_CLIENT, US_CLIENT, "127.0.0.1"}
    assert (recs[EU_CLIENT].path_qs, recs[US_CLIENT].path_qs, recs["127.0.0.1"].path_qs) == ("/", "/p/2", "/robots.txt")
    for r in recs.values():
        assert r.host == host and r.status == 200 and r.start <= r.end
    assert recs[EU_CLIENT].end - recs[EU_CLIENT].start < CROSS / 2  # near: no delay
    assert recs[US_CLIENT].end - recs[US_CLIENT].start >= CROSS
    assert recs["127.0.0.1"].end - recs["127.0.0.1"].start >= CROSS
    report = region_report(server)["hosts"][host]
    assert report["home"] == "eu-west" and report["requests"] == 3
    assert report["by_region"] == {"eu-west": 1, "us-east": 1, "unknown": 1}
    assert report["home_share"] == pytest.approx(1 / 3, abs=0.001)
    assert report["mean_latency_s"] >= 2 * CROSS / 3


async def test_the_log_shows_requests_in_flight_together_to_one_host(server):
    # What a politeness check at the server relies on: two requests to one host at once
    # show as overlapping start..end intervals in the log.
    server.reset()
    host = "us-east-0.test"
    assert await _get(server, EU_CLIENT, [(host, "/p/1"), (host, "/p/2")]) == [200, 200]
    a, b = sorted(server.requests(host), key=lambda r: r.start)
    assert b.start < a.end and {a.client, b.client} == {EU_CLIENT}
    summary = region_report(server)
    assert summary["hosts"][host]["by_region"] == {"eu-west": 2}
    assert summary["hosts"][host]["home_share"] == 0.0 and summary["min_home_share"] == 0.0
    assert summary["hosts"]["eu-west-0.test"]["requests"] == 0
