"""The render decision, the wait rule and the script cache: plain logic, no browser, no Ray."""

from __future__ import annotations

import random

import pytest

from crawler.clock import MockClock
from crawler.parse import parse_page
from crawler.render.decide import RenderDecider, page_signals, render_gained
from crawler.render.scriptcache import ScriptCache
from crawler.render.waitrule import WaitRule

URL = "http://a.test/"
TEXT = " ".join(f"word{k}" for k in range(80))


def parsed(html: str):
    return parse_page(html.encode(), URL, "text/html; charset=utf-8", {}, user_agent_token="raycrawl", max_links=100)


def plain(script: str = '<script src="/site.js"></script>') -> str:
    links = "".join(f'<a href="/p/{k}">p{k}</a>' for k in range(5))
    return f"<html><head>{script}</head><body><main><p>{TEXT}</p>{links}</main></body></html>"


SHELL = '<html><head><script src="/app.js"></script></head><body><div id="root"></div></body></html>'


@pytest.mark.parametrize("html,signal", [
    ('<html><body><app-root ng-version="17.0.0"><p>' + TEXT + '</p></app-root><script src="/m.js"></script></body></html>', "framework"),
    ('<html><body><div data-reactroot=""><p>' + TEXT + '</p></div><script src="/m.js"></script></body></html>', "framework"),
    ('<html><body><p>' + TEXT + '</p><script id="__NEXT_DATA__" type="application/json">{}</script></body></html>', "framework"),
    ('<html><body><p>' + TEXT + '</p><script>window.__NUXT__={}</script></body></html>', "framework"),
    ('<html><body><h1 data-svelte-h="x">' + TEXT + '</h1><script src="/m.js"></script></body></html>', "framework"),
    ('<html><body><noscript>Please enable JavaScript to view this site.</noscript><p>' + TEXT
     + '</p><script src="/m.js"></script></body></html>', "noscript"),
    ('<html><body><p>' + TEXT + '</p><div id="app">  </div><script src="/m.js"></script></body></html>', "empty_root"),
    ('<html><body><p>Loading</p><script src="/m.js"></script></body></html>', "thin"),
])
def test_each_signal_is_read_from_the_raw_html(html, signal):
    assert signal in page_signals(html.encode(), parsed(html))


def test_plain_pages_and_pages_without_scripts_show_no_signal():
    assert page_signals(plain().encode(), parsed(plain())) == []
    no_script = '<html><body><div id="root"></div></body></html>'  # empty, but nothing would fill it
    assert page_signals(no_script.encode(), parsed(no_script)) == []


def test_modes_never_and_always_and_non_html():
    rng = random.Random(1)
    assert not RenderDecider("never", rng).decide("a.test", SHELL.encode(), parsed(SHELL)).render
    d = RenderDecider("always", rng).decide("a.test", plain().encode(), parsed(plain()))
    assert d.render and d.reason == "always"
    assert RenderDecider("always", rng).decide("a.test", b"%PDF", None).reason == "not_html"


def test_auto_renders_signals_and_spot_checks_a_small_seeded_share_of_plain_pages():
    dec = RenderDecider("auto", random.Random(3), spot_check_share=0.05)
    d = dec.decide("app.test", SHELL.encode(), parsed(SHELL))
    assert d.render and d.reason.startswith("signal_")
    page = plain()
    decisions = [dec.decide(f"h{k}.test", page.encode(), parsed(page)) for k in range(2000)]
    spot = sum(d.render for d in decisions)
    assert all(d.reason in ("plain", "spot_check") for d in decisions)
    assert 60 <= spot <= 140  # 5% of 2000 = 100, binomial sd ~ 10
    again = RenderDecider("auto", random.Random(3), spot_check_share=0.05)
    again.decide("app.test", SHELL.encode(), parsed(SHELL))
    assert [again.decide(f"h{k}.test", page.encode(), parsed(page)).render for k in range(2000)] == [d.render for d in decisions]


def test_the_host_estimate_learns_from_renders_both_ways():
    dec = RenderDecider("auto", random.Random(0), spot_check_share=0.0, host_min_renders=3, host_threshold=0.5)
    page = plain()
    # A host whose renders keep finding more: its plain-looking pages are rendered too.
    assert dec.decide("spa.test", page.encode(), parsed(page)).reason == "plain"
    for _ in range(3):
        dec.learn("spa.test", True)
    d = dec.decide("spa.test", page.encode(), parsed(page))
    assert d.render and d.reason == "host_gain"
    # A host whose marked pages never gained: signals are overruled there.
    marked = '<html><body><div data-reactroot=""><p>' + TEXT + '</p></div><script src="/m.js"></script></body></html>'
    assert dec.decide("ssr.test", marked.encode(), parsed(marked)).render
    for _ in range(3):
        dec.learn("ssr.test", False)
    d = dec.decide("ssr.test", marked.encode(), parsed(marked))
    assert not d.render and d.reason == "host_no_gain" and d.signals == ("framework",)
    # The table survives a checkpoint.
    other = RenderDecider("auto", random.Random(0))
    other.restore(dec.snapshot())
    assert other.estimate("spa.test") == dec.estimate("spa.test") == 0.8


def test_a_render_gained_when_it_found_a_new_link_or_much_more_text():
    raw = parsed(SHELL)
    assert render_gained(raw, parsed(SHELL.replace('<div id="root"></div>', '<div id="root"><a href="/r/1">r</a></div>')))
    assert render_gained(raw, parsed(SHELL.replace('<div id="root"></div>', f'<div id="root"><p>{TEXT}</p></div>')))
    assert not render_gained(parsed(plain()), parsed(plain()))


def test_wait_rule_waits_for_dom_content_loaded_then_quiet_and_never_past_the_maximum():
    rule = WaitRule(quiet_s=0.25, max_wait_s=2.0)
    assert not rule.ready(100.0)  # before DOMContentLoaded: never
    rule.dom_content_loaded(1.0)
    rule.request_started(1.125)
    assert not rule.ready(1.875)  # a request is open
    rule.request_ended(2.0)
    assert not rule.ready(2.125)
    assert rule.ready(2.25) and rule.why == "quiet"
    rule.dom_changed(2.5)  # the app draws what it fetched
    assert not rule.ready(2.625) and rule.next_check(2.625, 0.0625) == 0.0625
    assert rule.next_check(2.7, 0.0625) == pytest.approx(0.05)
    assert rule.ready(2.75)
    busy = WaitRule(quiet_s=0.25, max_wait_s=2.0)
    busy.dom_content_loaded(0.0)
    busy.request_started(0.125)  # a request that never ends (a long poll)
    assert not busy.ready(1.875)
    assert busy.ready(2.0) and busy.why == "max_wait"


def test_script_cache_serves_fresh_revalidates_stale_and_stays_bounded():
    clock = MockClock()
    cache = ScriptCache(clock, max_entries=2, max_bytes=100, ttl_s=10.0)
    cache.store("http://a.test/app.js", 200, (("etag", '"v1"'),), b"x" * 40)
    entry, fresh = cache.lookup("http://a.test/app.js")
    assert fresh and entry.body == b"x" * 40
    clock.advance(10.0)
    entry, fresh = cache.lookup("http://a.test/app.js")
    assert not fresh and entry.validators() == {"If-None-Match": '"v1"'}
    cache.renew("http://a.test/app.js")
    assert cache.lookup("http://a.test/app.js")[1]
    cache.store("http://a.test/secret.js", 200, (("cache-control", "private, no-store"),), b"s")
    assert cache.lookup("http://a.test/secret.js") == (None, False)
    cache.store("http://a.test/b.js", 200, (), b"b" * 40)
    cache.store("http://a.test/c.js", 200, (), b"c" * 40)  # over 2 entries: the oldest goes
    assert cache.lookup("http://a.test/app.js") == (None, False) and len(cache) == 2
