"""Input-sized documents are cut to their limits and parsed off the event loop (DESIGN
invariant 16): pages from ``OFF_LOOP_BYTES`` up, every feed, every sitemap (with the
URL checks and ``<lastmod>`` nudges it brings) and every robots.txt body go through the
shard's ``run_blocking`` seam; small pages do not (the hop would cost more than the
parse). The seam is a recording stand-in here, so the tests run inline and say what went
where; a sitemap is cut at its URL limit by the bytes its parser was handed, a robots.txt
of 12,000 rules answers each URL as protego does without trying every rule.
"""

from __future__ import annotations

import asyncio
import random
from collections import Counter

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from protego import Protego

from crawler.clock import MockClock
from crawler.config import settings as config
from crawler.engine.partbuilders import build_link_policy, build_news, build_recrawl, build_sitemaps
from crawler.engine.pipeline import OFF_LOOP_BYTES, PagePipeline, ParseSlot
from crawler.fetch.fetcher import classify
from crawler.freshness.sitemaps import CHUNK_BYTES, SitemapReader, parse_sitemap
from crawler.frontier.urlitem import UrlItem
from crawler.policy.politeness import Politeness
from crawler.robots import RobotsCache, RobotsClient
from crawler.robots.rules import INDEX_MIN_RULES, RuleIndex, _quote_path
from crawler.urls import host_key, join_url
from crawler.counters import ShardCounters

from tests.unit.doubles import ContentTable, response

SEED = "http://a.test/"
NS = 'xmlns="http://www.sitemaps.org/schemas/sitemap/0.9"'


class Recorder:
    """A ``run_blocking`` that runs inline and remembers what it was handed."""

    def __init__(self) -> None:
        self.ran: list[str] = []

    async def __call__(self, fn, *args, **kwargs):
        self.ran.append(getattr(fn, "__name__", repr(fn)))
        return fn(*args, **kwargs)


def cfg():
    return config.from_dict({"seeds": [SEED], "scope": "host"})


def pipeline(seam: Recorder, clock: MockClock) -> PagePipeline:
    c = cfg()
    return PagePipeline("s0", build_link_policy(c, [SEED]), ContentTable(), clock, user_agent_token="raycrawl",
                        max_links_per_page=100, min_text_tokens=5, max_body_bytes=c.limits.max_body_bytes,
                        store_bodies=False, recrawl=build_recrawl(c), news=build_news(c, clock), run_blocking=seam)


def page(size: int) -> bytes:
    block = b'<p>%d words of text for the reader here</p><a href="/p/%d">next</a>\n'
    parts, n, i = [b"<html><body><main>"], 0, 0
    while n < size:
        parts.append(block % (i, i))
        n, i = n + len(parts[-1]), i + 1
    return b"".join(parts) + b"</main></body></html>"


async def test_large_pages_are_parsed_off_the_loop_and_small_ones_inline_with_the_same_outcome():
    seam, clock = Recorder(), MockClock()
    pipe = pipeline(seam, clock)
    small, large = page(OFF_LOOP_BYTES // 4), page(OFF_LOOP_BYTES + 1000)
    out_small = await pipe.page(UrlItem(SEED + "s", 0), response(SEED + "s", body=small, ctype="text/html"))
    assert seam.ran == [] and len(out_small.links) == 100
    out_large = await pipe.page(UrlItem(SEED + "l", 0), response(SEED + "l", body=large, ctype="text/html"))
    assert seam.ran == ["parse_page"] and len(out_large.links) == 100
    assert [link.url for link in out_large.links] == [link.url for link in out_small.links]
    assert out_large.row.simhash is not None


async def test_a_feed_is_always_parsed_off_the_loop():
    seam, clock = Recorder(), MockClock()
    feed = b'<rss version="2.0"><channel><item><link>/a/1</link></item></channel></rss>'
    out = await pipeline(seam, clock).page(UrlItem(SEED + "feed.xml", 0),
                                           response(SEED + "feed.xml", body=feed, ctype="application/rss+xml"))
    assert seam.ran == ["parse_feed"] and [link.url for link in out.links] == [SEED + "a/1"]


async def test_a_shard_parses_one_document_at_a_time_and_the_loop_runs_meanwhile():
    running, most, ticks = 0, 0, 0

    async def seam(fn, *args, **kwargs):
        nonlocal running, most
        running += 1
        most = max(most, running)
        await asyncio.sleep(0)  # the parse "runs": another could start now if the slot let it
        running -= 1
        return fn(*args, **kwargs)

    async def loop_work():
        nonlocal ticks
        for _ in range(10):
            ticks += 1
            await asyncio.sleep(0)

    slot = ParseSlot(seam)
    results, _ = await asyncio.gather(asyncio.gather(*(slot(len, b"x" * i) for i in range(5))), loop_work())
    assert results == [0, 1, 2, 3, 4] and most == 1 and ticks == 10


def urlset(n: int, lastmod: str | None = None) -> bytes:
    mod = f"<lastmod>{lastmod}</lastmod>" if lastmod else ""
    items = "".join(f"<url><loc>{SEED}p/{i}</loc>{mod}</url>" for i in range(n))
    return f'<?xml version="1.0"?><urlset {NS}>{items}</urlset>'.encode()


async def test_a_sitemap_is_parsed_and_checked_off_the_loop_and_yields_what_it_yielded_inline():
    seam = Recorder()
    c = cfg()
    links = build_link_policy(c, [SEED])
    nudged: list[str] = []
    reader = SitemapReader(max_files=5, max_urls=50, max_bytes=10**6, links=links, counters=ShardCounters(), dropped=Counter(),
                           nudge=lambda url, lastmod: nudged.append(url), run_blocking=seam)
    body = urlset(80, lastmod="2024-05-01")
    routed, queued = [], []

    async def fetch(host, url, max_body_bytes=None):
        return response(url, body=body, ctype="application/xml")

    async def route(got) -> bool:
        routed.extend(got)
        return True

    await reader.read(UrlItem(SEED + "sitemap.xml", 0, kind="sitemap"), fetch, queued.extend, route)
    assert seam.ran == ["_digest", "_nudge_all"]
    inline, _ = reader.yields(UrlItem(SEED + "sitemap.xml", 0, kind="sitemap"), 200, body)
    assert [i.url for i in routed] == [i.url for i in inline] == [f"{SEED}p/{i}" for i in range(50)]
    assert nudged[:50] == [f"{SEED}p/{i}" for i in range(50)]


def test_the_shard_hands_its_seam_to_the_sitemap_reader():
    seam, clock = Recorder(), MockClock()
    c = cfg()
    pipe = pipeline(seam, clock)
    reader = build_sitemaps(c, pipe.links, pipe, build_recrawl(c), build_news(c, clock), None, clock, seam)
    assert reader._run_blocking is seam


def test_a_sitemap_far_over_its_url_limit_is_cut_while_it_is_parsed():
    body = urlset(200_000)
    sm = parse_sitemap(body, SEED + "sitemap.xml", max_urls=100, max_bytes=len(body))
    assert len(sm.urls) == 100 and sm.truncated
    assert sm.bytes_parsed == CHUNK_BYTES < len(body) // 100
    text = b"".join(b"%sp/%d\n" % (SEED.encode(), i) for i in range(200_000))
    cut = parse_sitemap(text, SEED + "sitemap.txt", max_urls=100, max_bytes=len(text))
    assert len(cut.urls) == 100 and cut.truncated and cut.bytes_parsed == text.index(b"p/100\n") + 5


def test_a_sitemap_of_exactly_its_url_limit_is_not_counted_as_cut():
    for body in (urlset(100), b"".join(b"%sp/%d\n" % (SEED.encode(), i) for i in range(100))):
        sm = parse_sitemap(body, SEED + "sitemap.xml", max_urls=100)
        assert len(sm.urls) == 100 and not sm.truncated


@pytest.mark.parametrize("prolog", [b"", b"<!--" + b"c" * 8000 + b"-->", b"<?pi " + b"x" * 8000 + b"?>"])
def test_a_sitemap_declaring_a_dtd_is_refused_wherever_the_doctype_is(prolog):
    body = (b'<?xml version="1.0"?>' + prolog + b'<!DOCTYPE u [<!ENTITY lol "lol">]><urlset><url><loc>'
            + SEED.encode() + b"&lol;</loc></url></urlset>")
    sm = parse_sitemap(body, SEED + "sitemap.xml")
    assert sm.error == "DTD or entity declaration (refused)" and sm.urls == []


# -- robots.txt ------------------------------------------------------------------------------


async def test_a_robots_body_is_parsed_off_the_loop():
    seam, clock = Recorder(), MockClock()
    cache = RobotsCache("raycrawl/0.1", clock=clock)
    client = RobotsClient(cache, classify=classify, normalize=lambda u: u, join=join_url, host_of=host_key,
                          pacer=Politeness(1.0, 60.0, clock=clock), clock=clock, run_blocking=seam)

    async def fetch(host, url):
        return response(url, body=b"User-agent: *\nDisallow: /private/\n", ctype="text/plain")

    rules, requests = await client.refresh("http://a.test", "a.test", fetch)
    assert seam.ran == ["read"] and requests == 1
    assert not rules.allowed("http://a.test/private/x") and rules.allowed("http://a.test/public")


def big_robots(n: int) -> bytes:
    lines = ["User-agent: *"] + [f"Disallow: /private/{k}/\nAllow: /private/{k}/public" for k in range(n)]
    return ("\n".join(lines) + "\n").encode()


def test_a_large_robots_txt_answers_each_url_as_protego_does_without_trying_every_rule():
    body = big_robots(6_000)  # 300 KB: under ROBOTS_MAX_BYTES, every rule kept
    rules = RobotsCache("raycrawl/0.1", clock=MockClock()).from_response("http://a.test", 200, body)
    assert rules._index is not None  # the group is indexed
    parser = Protego.parse(body.decode())
    rng = random.Random(7)
    urls = [f"http://a.test/private/{rng.randrange(7_000)}/{rng.choice(['public', 'x', 'public/y', ''])}" for _ in range(500)]
    urls += ["http://a.test/", "http://a.test/other", "http://a.test/robots.txt"]
    assert [rules.allowed(u) for u in urls] == [parser.can_fetch(u, "raycrawl") for u in urls]


_PATTERNS = st.lists(st.tuples(st.sampled_from(["Allow", "Disallow"]),
                               st.text(alphabet="/ab*$%.?=", min_size=1, max_size=8).map(lambda p: "/" + p)),
                     min_size=INDEX_MIN_RULES, max_size=INDEX_MIN_RULES + 40)


@settings(max_examples=60, deadline=None)
@given(_PATTERNS, st.lists(st.text(alphabet="/ab$%.?=c", max_size=12), min_size=1, max_size=30))
def test_the_rule_index_decides_as_protego_does(rules, paths):
    text = "User-agent: *\n" + "\n".join(f"{field}: {pattern}" for field, pattern in rules)
    parser = Protego.parse(text)
    index = RuleIndex.of(parser, "*")
    if index is None:  # fewer distinct rules than the index is built for
        return
    for path in paths:
        url = "http://a.test/" + path
        assert index.allowed(_quote_path(url)) == parser.can_fetch(url, "*"), (text, url)
