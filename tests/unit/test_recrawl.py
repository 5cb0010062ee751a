"""Recrawl: the interval policy, the durable per-URL state, refreshes coming due, sitemaps."""

from __future__ import annotations

import datetime as dt
import gzip
import random
import sqlite3

import pytest

from crawler.clock import MockClock
from crawler.errors import ConfigError
from crawler.frontier.frontier import Frontier
from crawler.frontier.urlitem import UrlItem
from crawler.frontier.store import FrontierStore
from crawler.output import OutcomeRow
from crawler.frontier.recrawl import Previous, RecrawlPolicy, Schedule
from crawler.frontier.refreshfeed import RefreshFeed
from crawler.freshness.sitemaps import parse_lastmod, parse_sitemap, robots_sitemaps

H = 3600.0


def policy(**kw):
    args = dict(min_interval_s=H, max_interval_s=8 * H, initial_interval_s=2 * H, grow_factor=2.0, shrink_factor=0.5)
    args.update(kw)
    return RecrawlPolicy(**args)


# -- the interval policy --------------------------------------------------------------------


def test_interval_grows_while_unchanged_shrinks_on_change_and_keeps_its_bounds():
    p = policy()
    first = p.after_fetch(Previous(), 1000.0, 200, "a" * 64, 0b1111)
    assert first.changed is None and first.interval_s == 2 * H and first.next_crawl_at == 1000.0 + 2 * H
    prev = Previous(1, first.interval_s, "a" * 64, 0b1111)
    intervals = []
    for _ in range(4):  # unchanged (same bytes): 4h, 8h, then capped at 8h
        s = p.after_fetch(prev, 0.0, 200, "a" * 64, 0b1111)
        assert s.changed is False
        intervals.append(s.interval_s)
        prev = Previous(prev.fetches + 1, s.interval_s, "a" * 64, 0b1111)
    assert intervals == [4 * H, 8 * H, 8 * H, 8 * H]
    for expected in (4 * H, 2 * H, H, H):  # changed every time: halves down to the minimum
        s = p.after_fetch(prev, 0.0, 200, "b" * 64, 0b1111 ^ 0xFFFF)
        assert s.changed is True and s.interval_s == expected
        prev = Previous(prev.fetches + 1, s.interval_s, "a" * 64, 0b1111)


def test_a_rotating_timestamp_is_not_a_change_but_the_fingerprint_decides_without_validators():
    p = policy()
    prev = Previous(3, 2 * H, "a" * 64, 0xF0F0)
    # Different bytes, main-content fingerprint within the near-duplicate distance: unchanged.
    assert p.changed(prev, 200, "b" * 64, 0xF0F0 ^ 0b101) is False
    assert p.changed(prev, 200, "b" * 64, 0xF0F0 ^ 0b1111) is True  # 4 bits moved
    assert p.changed(prev, 304, None, None) is False  # not modified
    assert p.changed(prev, 200, "b" * 64, None) is True  # no fingerprint: bytes decide
    assert p.changed(Previous(), 200, "a" * 64, 1) is None  # a first fetch compares nothing


def test_errors_grow_the_interval_and_a_sitemap_lastmod_only_nudges():
    p = policy()
    assert p.after_fetch(Previous(2, 2 * H, "a" * 64, 1), 0.0, 404, None, None).interval_s == 4 * H
    assert p.after_fetch(Previous(2, 2 * H, "a" * 64, 1), 0.0, None, None, None).interval_s == 2 * H
    # Moved since the last fetch: due half an interval after it (not "now", not alone).
    assert p.nudge(last_crawled_at=100.0, interval_s=8 * H, next_crawl_at=100.0 + 8 * H, lastmod=200.0, now=300.0) == 100.0 + 4 * H
    assert p.nudge(100.0, 8 * H, 100.0 + 8 * H, lastmod=50.0, now=300.0) == 100.0 + 8 * H  # older: no effect
    with pytest.raises(ConfigError):
        policy(min_interval_s=3 * H)


# -- per-URL state in the durable store -------------------------------------------------------


def _row(url, outcome="fetched", status=200, sha="a" * 64, fp=7, at=1000.0, etag='"v1"', changed=None, seq=1):
    return OutcomeRow(url=url, outcome=outcome, status=status, content_sha256=sha, simhash=fp, etag=etag,
                      fetched_at=dt.datetime.fromtimestamp(at, dt.timezone.utc), changed=changed, fetch_seq=seq)


def test_state_is_recorded_with_the_ack_and_answers_url_status(tmp_path):
    st = FrontierStore(str(tmp_path / "s.sqlite"))
    url = "http://a.test/p"
    st.add([UrlItem(url, 2)])
    assert st.url_status(url)["status"] == "pending"
    p = policy()
    st.record([(_row(url), p.after_fetch(Previous(), 1000.0, 200, "a" * 64, 7))])
    s = st.url_status(url)
    assert (s["status"], s["fetches"], s["etag"], s["content_hash"], s["interval_s"]) == ("fetched", 1, '"v1"', "a" * 64, 2 * H)
    assert s["last_crawled_at"] == 1000.0 and s["next_crawl_at"] == 1000.0 + 2 * H
    assert st.url_status(url_hash=s["url_hash"])["url"] == url  # by its public id too
    # A 304 keeps the validators and the hash it did not resend.
    st.record([(_row(url, "not_modified", 304, None, None, 9000.0, None, False, 2),
                p.after_fetch(Previous(1, 2 * H, "a" * 64, 7), 9000.0, 304, None, None))])
    s = st.url_status(url)
    assert (s["status"], s["fetches"], s["changes"], s["etag"], s["content_hash"]) == ("not_modified", 2, 0, '"v1"', "a" * 64)
    assert s["interval_s"] == 4 * H and s["next_crawl_at"] == 9000.0 + 4 * H


def test_a_store_of_an_earlier_version_gains_the_state_columns(tmp_path):
    path = str(tmp_path / "old.sqlite")
    db = sqlite3.connect(path)
    db.executescript("""
        CREATE TABLE urls (id INTEGER PRIMARY KEY, h INTEGER NOT NULL UNIQUE, url TEXT NOT NULL, host TEXT NOT NULL,
            depth INTEGER NOT NULL, referrer TEXT, kind TEXT NOT NULL DEFAULT 'discover',
            state INTEGER NOT NULL DEFAULT 0, replay INTEGER NOT NULL DEFAULT 0);
        CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
    """)
    db.close()
    st = FrontierStore(path)
    st.add([UrlItem("http://a.test/x", 0)])
    assert st.url_status("http://a.test/x")["status"] == "pending"


def test_refreshes_come_due_in_order_and_carry_their_validators(tmp_path):
    clock = MockClock(wall_start=10_000.0)

    class Pacer:
        def next_allowed(self, host):
            return 0.0

    st = FrontierStore(str(tmp_path / "s.sqlite"))
    frontier = Frontier(Pacer(), clock, random.Random(0), window=4, spill=st)
    urls = [f"http://a.test/{i}" for i in range(3)]
    st.add([UrlItem(u, 1) for u in urls])
    p = policy()
    for i, u in enumerate(urls):  # due in 2h + i*30 min
        st.record([(_row(u, at=10_000.0 + i * 1800), p.after_fetch(Previous(), 10_000.0 + i * 1800, 200, "a" * 64, 7))])
    feed = RefreshFeed(st, frontier, clock, horizon_s=60.0)
    assert feed.tick() == 0  # nothing due within the horizon
    clock.advance(2 * H + 1800 - 30)  # the second is due in 30 s, the first overdue
    assert feed.tick() == 2
    got = frontier.pop_ready(10)
    assert [i.url for i in got] == [urls[0]]  # one per host in flight; the first is due now
    item = got[0]
    assert (item.kind, item.fetch_seq, item.prev.etag, item.prev.content_sha256) == ("refresh", 2, '"v1"', "a" * 64)
    assert feed.tick() == 0  # the cursor moved on: nothing is handed out twice



def test_a_refresh_scheduled_while_the_cursor_moves_on_is_neither_lost_nor_doubled(tmp_path):
    """A tick between a fetch and its durable ack moves the cursor past the fetch's next
    due time while the store still holds the old one: the refresh must still come due,
    once (it used to be lost until a restart)."""
    t0 = 10_000.0
    clock = MockClock(wall_start=t0)

    class Pacer:
        def next_allowed(self, host):
            return 0.0

    st = FrontierStore(str(tmp_path / "s.sqlite"))
    frontier = Frontier(Pacer(), clock, random.Random(0), window=4, spill=st)
    a, b, c, d = "http://a.test/", "http://b.test/", "http://c.test/", "http://d.test/"
    st.add([UrlItem(u, 0) for u in (a, b, c, d)])
    due = {a: t0 + 30, b: t0 + 55, c: t0 + 91, d: t0 + 200}
    for u, at in due.items():
        st.record([(_row(u, at=t0), Schedule(None, 60.0, at))])
    feed = RefreshFeed(st, frontier, clock, horizon_s=60.0)
    assert feed.tick() == 2  # a and b
    clock.advance(30)
    [item] = [i for i in frontier.pop_ready(10) if i.url == a]
    # 1. The refresh of a is fetched; its next due time (t0+90) is past the cursor (b's).
    sched = Schedule(True, 60.0, clock.wall() + 60)
    row = _row(a, at=clock.wall(), sha="b" * 64, seq=2)
    feed.after_record(item, row, sched)
    frontier.release("a.test")
    # 2. Before the row is durable, a tick loads c (t0+91): the cursor passes t0+90.
    clock.advance(1)
    assert feed.tick() == 1
    # 3. The ack: the store now says t0+90, behind the cursor, so the feed hands it over.
    st.record([(row, sched)])
    assert feed.acked([(row, sched)]) == 1
    clock.advance(59)
    got = [i for i in frontier.pop_ready(10) if i.url == a]
    assert [(i.kind, i.fetch_seq) for i in got] == [("refresh", 3)]
    frontier.release("a.test")
    # A due time ahead of the cursor stays with the store scan: one refresh, not two.
    item = got[0]
    sched = Schedule(True, 150.0, clock.wall() + 150)
    row = _row(a, at=clock.wall(), sha="c" * 64, seq=3)
    feed.after_record(item, row, sched)
    st.record([(row, sched)])
    assert feed.acked([(row, sched)]) == 0
    handed = 0
    for _ in range(4):
        clock.advance(60)
        feed.tick()
        for i in frontier.pop_ready(10):
            handed += i.url == a
            frontier.release(i.host)
    assert handed == 1
    # A due time the cursor has already passed goes to the frontier at once.
    feed.after_record(UrlItem(d, 0, host="d.test"), _row(d, at=clock.wall()), Schedule(True, 10.0, t0 + 100))
    assert [i.url for i in frontier.pop_ready(10)] == [d]


# -- sitemaps ----------------------------------------------------------------------------------

NS = 'xmlns="http://www.sitemaps.org/schemas/sitemap/0.9"'


def urlset(*locs, lastmod=None):
    items = "".join(f"<url><loc>{u}</loc>{f'<lastmod>{lastmod}</lastmod>' if lastmod else ''}</url>" for u in locs)
    return f'<?xml version="1.0" encoding="UTF-8"?><urlset {NS}>{items}</urlset>'.encode()


def test_a_urlset_and_an_index_plain_and_gzipped():
    sm = parse_sitemap(urlset("http://a.test/1", "/2", lastmod="2024-05-01"), "http://a.test/sitemap.xml")
    assert sm.urls == [("http://a.test/1", parse_lastmod("2024-05-01")), ("http://a.test/2", parse_lastmod("2024-05-01"))]
    assert sm.error is None and parse_lastmod("2024-05-01") == dt.datetime(2024, 5, 1, tzinfo=dt.timezone.utc).timestamp()
    index = f'<sitemapindex {NS}><sitemap><loc>http://a.test/s1.xml.gz</loc></sitemap></sitemapindex>'.encode()
    sm = parse_sitemap(gzip.compress(index), "http://a.test/sitemap_index.xml.gz")
    assert sm.sitemaps == ["http://a.test/s1.xml.gz"] and sm.urls == []
    text = parse_sitemap(b"http://a.test/t1\n# no\nhttp://a.test/t2\n", "http://a.test/sitemap.txt")
    assert [u for u, _ in text.urls] == ["http://a.test/t1", "http://a.test/t2"]
    assert robots_sitemaps("http://a.test", []) == ["http://a.test/sitemap.xml"]
    assert robots_sitemaps("http://a.test", ["/s.xml", "http://b.test/x.xml"]) == ["http://a.test/s.xml", "http://b.test/x.xml"]


def test_malformed_and_over_limit_sitemaps_cost_only_themselves():
    assert parse_sitemap(b"<urlset><url><loc>http://a.test/1</loc></url", "http://a.test/s.xml").error.startswith("malformed")
    bomb = b'<?xml version="1.0"?><!DOCTYPE lolz [<!ENTITY lol "lol">]><urlset><url><loc>&lol;</loc></url></urlset>'
    assert "DTD" in parse_sitemap(bomb, "http://a.test/s.xml").error
    many = urlset(*(f"http://a.test/{i}" for i in range(120)))
    cut = parse_sitemap(many, "http://a.test/s.xml", max_urls=100)
    assert cut.truncated and len(cut.urls) == 100
    big = gzip.compress(b"<urlset>" + b" " * 5000 + b"</urlset>")
    assert "over 1000 bytes" in parse_sitemap(big, "http://a.test/s.xml.gz", max_bytes=1000).error
    assert "broken gzip" in parse_sitemap(b"\x1f\x8b" + b"x" * 20, "http://a.test/s.xml.gz").error
    assert parse_lastmod("yesterday") is None and parse_lastmod("2024-05-01T10:00:00Z") is not None
