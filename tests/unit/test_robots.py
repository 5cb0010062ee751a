"""robots.txt rules and cache (RFC 9309): parsing, group selection, statuses, TTLs, persistence."""

from __future__ import annotations

import json
import random
from typing import Any

import pytest

from crawler.clock import MockClock
from crawler.errors import ConfigError
from crawler.robots import (
    MAX_ROBOTS_REDIRECTS,
    ROBOTS_MAX_BYTES,
    RobotsCache,
    product_token,
)

UA = "raycrawl/0.1 (+https://example.org/bot)"
ORIGIN = "https://ex.com"
DAY = 86_400.0


@pytest.fixture
def clock() -> MockClock:
    return MockClock(start=1000.0)


@pytest.fixture
def cache(clock: MockClock) -> RobotsCache:
    return RobotsCache(UA, clock=clock)


def rules_for(cache: RobotsCache, body: bytes | str, **kw):
    if isinstance(body, str):
        body = body.encode()
    return cache.from_response(ORIGIN, 200, body, **kw)


# (robots.txt, path, allowed?) — each row is something a site owner would expect to hold.
TABLE = [
    # plain Disallow prefix
    ("User-agent: *\nDisallow: /private/\n", "/private/x", False),
    ("User-agent: *\nDisallow: /private/\n", "/public", True),
    ("User-agent: *\nDisallow: /private/\n", "/private", True),  # prefix is "/private/"
    # paths are case-sensitive (RFC 9309 2.2.2)
    ("User-agent: *\nDisallow: /Private\n", "/private", True),
    # longest match wins (RFC 9309 2.2.2), in either order
    ("User-agent: *\nDisallow: /shop/\nAllow: /shop/public/\n", "/shop/public/a", True),
    ("User-agent: *\nAllow: /shop/public/\nDisallow: /shop/\n", "/shop/cart", False),
    ("User-agent: *\nAllow: /a\nDisallow: /a/b\n", "/a/b/c", False),
    ("User-agent: *\nAllow: /a\nDisallow: /a/b\n", "/a/c", True),
    # equal length: the least restrictive (Allow) wins
    ("User-agent: *\nDisallow: /tie\nAllow: /tie\n", "/tie", True),
    # $ anchors the end of the path
    ("User-agent: *\nDisallow: /*.pdf$\n", "/docs/a.pdf", False),
    ("User-agent: *\nDisallow: /*.pdf$\n", "/docs/a.pdfx", True),
    ("User-agent: *\nDisallow: /*.pdf$\n", "/docs/a.pdf?x=1", True),
    # * matches any sequence, including in the query
    ("User-agent: *\nDisallow: /*/secret\n", "/a/b/secret", False),
    ("User-agent: *\nDisallow: /*/secret\n", "/secret", True),
    ("User-agent: *\nDisallow: /*?session=\n", "/page?session=1", False),
    ("User-agent: *\nDisallow: /*?session=\n", "/page?x=1", True),
    ("User-agent: *\nDisallow: /\nAllow: /*.css$\n", "/static/site.css", True),
    # percent-encoding compares equal to the raw character (RFC 9309 2.2.2)
    ("User-agent: *\nDisallow: /caf%C3%A9\n", "/caf%C3%A9/menu", False),
    ("User-agent: *\nDisallow: /café\n", "/caf%C3%A9/menu", False),
    # comments and empty rules
    ("User-agent: * # everyone\nDisallow: /c # no c\n", "/c/1", False),
    ("User-agent: *\nDisallow:\n", "/anything", True),
    # agent groups: another agent's group does not apply to us
    ("User-agent: otherbot\nDisallow: /\n\nUser-agent: *\nDisallow: /nope\n", "/x", True),
    ("User-agent: otherbot\nDisallow: /\n\nUser-agent: *\nDisallow: /nope\n", "/nope", False),
    # ... our group overrides * entirely (case-insensitive token match)
    ("User-agent: *\nDisallow: /\n\nUser-agent: RayCrawl\nDisallow: /private\n", "/x", True),
    ("User-agent: *\nDisallow: /\n\nUser-agent: RayCrawl\nDisallow: /private\n", "/private", False),
    # ... a group for a prefix of our token is not ours (exact product token match)
    ("User-agent: ray\nDisallow: /\n\nUser-agent: *\nDisallow: /star\n", "/x", True),
    ("User-agent: ray\nDisallow: /\n\nUser-agent: *\nDisallow: /star\n", "/star", False),
    # ... no group for us and no *: nothing applies
    ("User-agent: otherbot\nDisallow: /\n", "/x", True),
    # ... several groups for our token are combined (RFC 9309 2.2.1)
    ("User-agent: raycrawl\nDisallow: /a\n\nUser-agent: *\nDisallow: /\n\nUser-agent: raycrawl\nDisallow: /b\n", "/b", False),
    ("User-agent: raycrawl\nDisallow: /a\n\nUser-agent: *\nDisallow: /\n\nUser-agent: raycrawl\nDisallow: /b\n", "/a", False),
    ("User-agent: raycrawl\nDisallow: /a\n\nUser-agent: *\nDisallow: /\n\nUser-agent: raycrawl\nDisallow: /b\n", "/c", True),
    # ... a group naming several agents, ours among them
    ("User-agent: otherbot\nUser-agent: raycrawl\nDisallow: /shared\n", "/shared/1", False),
    # our group with no rules allows everything even if * disallows
    ("User-agent: raycrawl\nCrawl-delay: 3\n\nUser-agent: *\nDisallow: /\n", "/x", True),
    # empty file
    ("", "/x", True),
    # CRLF and lone CR line endings
    ("User-agent: *\r\nDisallow: /crlf\r\n", "/crlf", False),
    ("User-agent: *\rDisallow: /cr\r", "/cr", False),
    # robots.txt itself is always allowed (RFC 9309 2.2.2)
    ("User-agent: *\nDisallow: /\n", "/robots.txt", True),
    ("User-agent: *\nDisallow: /\n", "/robots.txt.bak", False),
]


@pytest.mark.parametrize(("robots", "path", "expected"), TABLE)
def test_rule_table(cache: RobotsCache, robots: str, path: str, expected: bool) -> None:
    rules = rules_for(cache, robots)
    assert rules.kind == "parsed"
    assert rules.allowed(ORIGIN + path) is expected
    assert cache.allowed(ORIGIN + path, ORIGIN) is expected


def test_bom_is_skipped(cache: RobotsCache) -> None:
    # Without skipping the BOM the first line reads "\ufeffUser-agent" and the group is lost.
    rules = rules_for(cache, b"\xef\xbb\xbfUser-agent: *\nDisallow: /bom\n")
    assert not rules.allowed(ORIGIN + "/bom")


def test_garbage_bytes_never_raise_and_good_lines_still_count(cache: RobotsCache) -> None:
    body = b"\xff\xfe\x00\x80garbage\xc3(\n<html><body>oops</body></html>\nUser-agent: *\nDisallow: /g\xffx\nDisallow: /g\n"
    rules = rules_for(cache, body)
    assert rules.kind == "parsed"
    assert not rules.allowed(ORIGIN + "/g/1")
    assert rules.allowed(ORIGIN + "/h")
    for seed in range(5):
        noise = random.Random(seed).randbytes(50_000)
        r = cache.from_response(f"https://noise{seed}.com", 200, noise)
        assert r.kind in ("parsed", "allow_all")
        assert isinstance(r.allowed(f"https://noise{seed}.com/x"), bool)


def test_parser_failure_means_allow_all_and_is_counted(cache: RobotsCache, monkeypatch) -> None:
    from protego import Protego

    def boom(text):
        raise RecursionError("parser exploded")

    monkeypatch.setattr(Protego, "parse", boom)  # the class crawler.robots.cache parses with
    rules = rules_for(cache, "User-agent: *\nDisallow: /\n")
    assert rules.kind == "allow_all"
    assert rules.allowed(ORIGIN + "/x")
    assert cache.stats()["parse_errors"] == 1


def test_only_first_500_kib_of_a_10_mb_file_counts(cache: RobotsCache) -> None:
    head = b"User-agent: *\nDisallow: /early\n"
    padding = b"# " + b"x" * 98 + b"\n"
    filler = padding * (ROBOTS_MAX_BYTES // len(padding) + 1)
    body = head + filler + b"Disallow: /late\n" + padding * 100_000  # ~10 MB
    assert len(body) > 10_000_000
    rules = rules_for(cache, body)
    assert not rules.allowed(ORIGIN + "/early")
    assert rules.allowed(ORIGIN + "/late")  # after the limit: not considered
    assert len(rules.text.encode()) <= ROBOTS_MAX_BYTES
    assert cache.stats()["truncated"] == 1


def test_line_cut_by_the_limit_is_dropped(cache: RobotsCache) -> None:
    # "Allow: /public-only" cut to "Allow: /p" would open /private; the cut line must go.
    head = b"User-agent: *\nDisallow: /\n"
    pad_len = ROBOTS_MAX_BYTES - len(head) - len(b"Allow: /p")
    pad = b"#" * (pad_len - 1) + b"\n"
    body = head + pad + b"Allow: /public-only\n"
    assert body[:ROBOTS_MAX_BYTES].endswith(b"Allow: /p")
    rules = rules_for(cache, body)
    assert not rules.allowed(ORIGIN + "/private")


def test_truncated_flag_drops_partial_last_line(cache: RobotsCache) -> None:
    body = b"User-agent: *\nDisallow: /\nAllow: /pub"  # the fetcher stopped mid-line
    assert rules_for(cache, body, truncated=True).allowed(ORIGIN + "/public") is False
    assert rules_for(cache, body).allowed(ORIGIN + "/public") is True  # complete file: rule holds


@pytest.mark.parametrize(
    ("robots", "delay"),
    [
        ("User-agent: *\nCrawl-delay: 5\n", 5.0),
        ("User-agent: *\nCrawl-delay: 0.5\n", 0.5),
        ("User-agent: raycrawl\nCrawl-delay: 2\n\nUser-agent: *\nCrawl-delay: 9\n", 2.0),
        ("User-agent: otherbot\nCrawl-delay: 30\n", None),
        ("User-agent: *\nCrawl-delay: soon\n", None),
        ("User-agent: *\nCrawl-delay: -3\n", None),
        ("User-agent: *\nRequest-rate: 1/10s\n", 10.0),
        ("User-agent: *\nDisallow: /x\n", None),
    ],
)
def test_crawl_delay(cache: RobotsCache, robots: str, delay: float | None) -> None:
    assert rules_for(cache, robots).crawl_delay == delay
    assert cache.crawl_delay(ORIGIN) == delay


def test_product_token() -> None:
    assert product_token(UA) == "raycrawl"
    assert product_token("RayCrawl") == "raycrawl"
    assert product_token("my-bot (compatible)") == "my-bot"
    with pytest.raises(ConfigError, match="product token"):
        RobotsCache("   ", clock=MockClock())


def test_robots_url() -> None:
    assert RobotsCache.robots_url("https://ex.com") == "https://ex.com/robots.txt"
    assert RobotsCache.robots_url("http://ex.com:8080") == "http://ex.com:8080/robots.txt"


# -- statuses (RFC 9309 2.3.1) -------------------------------------------------------------


@pytest.mark.parametrize(
    ("status", "kind", "ttl"),
    [
        (200, "parsed", DAY),
        (404, "allow_all", DAY),
        (401, "allow_all", DAY),
        (403, "allow_all", DAY),
        (410, "allow_all", DAY),
        (301, "allow_all", DAY),  # redirect not followed to a file: unavailable
        (429, "disallow_all", 600.0),  # a rate limit is not an absence
        (500, "disallow_all", 600.0),
        (503, "disallow_all", 600.0),
        (None, "disallow_all", 600.0),  # unreachable: DNS, refused, timeout
        (99, "disallow_all", 600.0),
    ],
)
def test_status_handling(cache: RobotsCache, clock: MockClock, status, kind, ttl) -> None:
    rules = cache.from_response(ORIGIN, status, b"User-agent: *\nDisallow: /private\n")
    assert rules.kind == kind
    assert rules.source_status == status
    assert rules.expires_at - clock.now() == ttl
    expected = {"parsed": False, "allow_all": True, "disallow_all": False}[kind]
    assert cache.allowed(ORIGIN + "/private", ORIGIN) is expected
    assert cache.allowed(ORIGIN + "/public", ORIGIN) is (kind != "disallow_all")
    # the robots.txt URL stays fetchable whatever happened
    assert cache.allowed(ORIGIN + "/robots.txt", ORIGIN) is True


def test_redirect_overflow_is_unavailable(cache: RobotsCache, clock: MockClock) -> None:
    assert MAX_ROBOTS_REDIRECTS == 5
    rules = cache.from_redirect_overflow(ORIGIN)
    assert rules.kind == "allow_all"
    assert rules.expires_at - clock.now() == DAY
    assert cache.allowed(ORIGIN + "/x", ORIGIN) is True
    assert cache.stats()["redirect_overflow"] == 1


def test_not_modified_refreshes_the_copy(cache: RobotsCache, clock: MockClock) -> None:
    cache.from_response(ORIGIN, 200, b"User-agent: *\nDisallow: /p\n")
    clock.advance(DAY + 1)
    assert cache.get(ORIGIN) is None
    rules = cache.from_response(ORIGIN, 304, None)
    assert rules.kind == "parsed" and rules.expires_at == clock.now() + DAY
    assert cache.allowed(ORIGIN + "/p", ORIGIN) is False


# -- TTLs and the stale copy -----------------------------------------------------------------


def test_ttl_expiry(cache: RobotsCache, clock: MockClock) -> None:
    assert cache.allowed(ORIGIN + "/x", ORIGIN) is None  # unknown origin: fetch robots first
    cache.from_response(ORIGIN, 200, b"User-agent: *\nDisallow: /x\n")
    clock.advance(DAY - 1)
    assert cache.allowed(ORIGIN + "/x", ORIGIN) is False
    clock.advance(1)
    assert cache.get(ORIGIN) is None
    assert cache.allowed(ORIGIN + "/x", ORIGIN) is None
    s = cache.stats()
    assert s["misses"] == 3 and s["hits"] == 1


def test_error_ttl_is_shorter(cache: RobotsCache, clock: MockClock) -> None:
    cache.from_response(ORIGIN, 500, b"")
    clock.advance(599)
    assert cache.allowed(ORIGIN + "/x", ORIGIN) is False
    clock.advance(1)
    assert cache.allowed(ORIGIN + "/x", ORIGIN) is None


def test_stale_good_copy_stands_in_for_5xx(cache: RobotsCache, clock: MockClock) -> None:
    cache.from_response(ORIGIN, 200, b"User-agent: *\nDisallow: /x\nCrawl-delay: 4\n")
    fetched = clock.now()
    clock.advance(DAY)  # expired: the engine refetches and gets a 503
    rules = cache.from_response(ORIGIN, 503, b"down")
    assert rules.kind == "parsed" and rules.fetched_at == fetched
    assert rules.expires_at == clock.now() + 600  # asked again soon
    assert cache.allowed(ORIGIN + "/x", ORIGIN) is False
    assert cache.allowed(ORIGIN + "/y", ORIGIN) is True
    assert cache.crawl_delay(ORIGIN) == 4.0
    assert cache.stats()["stale_used"] == 1
    # still down after 30 days: the copy is too old, the origin becomes disallowed
    clock.advance(28 * DAY)  # the copy is 29 days old
    assert cache.from_response(ORIGIN, None, None).kind == "parsed"
    clock.advance(DAY)  # 30 days old
    rules = cache.from_response(ORIGIN, None, None)
    assert rules.kind == "disallow_all"
    assert cache.allowed(ORIGIN + "/y", ORIGIN) is False


def test_a_404_is_not_a_good_copy(cache: RobotsCache, clock: MockClock) -> None:
    cache.from_response(ORIGIN, 404, b"")
    clock.advance(DAY)
    assert cache.from_response(ORIGIN, 500, b"").kind == "disallow_all"


def test_stale_copy_can_be_disabled(clock: MockClock) -> None:
    cache = RobotsCache(UA, clock=clock, stale_ok_s=0)
    cache.from_response(ORIGIN, 200, b"User-agent: *\nDisallow: /x\n")
    assert cache.from_response(ORIGIN, 500, b"").kind == "disallow_all"


def test_custom_ttls_and_config_errors(clock: MockClock) -> None:
    cache = RobotsCache(UA, clock=clock, ttl_s=60, error_ttl_s=5)
    assert cache.from_response(ORIGIN, 200, b"").expires_at == clock.now() + 60
    assert cache.from_response(ORIGIN, 502, b"").expires_at == clock.now() + 5
    for bad in ({"ttl_s": 0}, {"error_ttl_s": -1}, {"max_entries": 0}, {"stale_ok_s": float("nan")}):
        with pytest.raises(ConfigError):
            RobotsCache(UA, clock=clock, **bad)


# -- bounds, persistence -----------------------------------------------------------------------


def test_bounded_evicts_oldest(clock: MockClock) -> None:
    cache = RobotsCache(UA, clock=clock, max_entries=3)
    for name in "abc":
        cache.from_response(f"https://{name}.com", 404, None)
    cache.from_response("https://a.com", 404, None)  # refreshed: now the newest
    cache.from_response("https://d.com", 404, None)
    assert len(cache) == 3
    assert "https://b.com" not in cache
    assert all(f"https://{n}.com" in cache for n in "acd")
    assert cache.stats()["evicted"] == 1


def test_snapshot_round_trip_on_a_new_clock(cache: RobotsCache, clock: MockClock) -> None:
    cache.from_response("https://p.com", 200, b"User-agent: raycrawl\nDisallow: /p\nCrawl-delay: 7\n")
    cache.from_response("https://a.com", 404, None)
    cache.from_response("https://d.com", 503, None)
    clock.advance(400)
    data = json.loads(json.dumps(cache.snapshot()))

    # A new process: a different monotonic origin, 100 s of downtime on the wall clock.
    clock2 = MockClock(start=5.0, wall_start=clock.wall() + 100)
    fresh = RobotsCache(UA, clock=clock2)
    assert fresh.restore(data) == 3
    assert fresh.allowed("https://p.com/p/1", "https://p.com") is False
    assert fresh.allowed("https://p.com/q", "https://p.com") is True
    assert fresh.crawl_delay("https://p.com") == 7.0
    assert fresh.allowed("https://a.com/x", "https://a.com") is True
    assert fresh.allowed("https://d.com/x", "https://d.com") is False  # unreachable verdict kept
    restored = fresh.get("https://p.com")
    assert restored is not None and restored.kind == "parsed"


def test_snapshot_restore_times(clock: MockClock) -> None:
    cache = RobotsCache(UA, clock=clock)
    cache.from_response("https://p.com", 200, b"User-agent: *\nDisallow: /p\n")
    cache.from_response("https://d.com", 503, None)
    clock.advance(400)
    data = json.loads(json.dumps(cache.snapshot()))
    clock2 = MockClock(start=5.0, wall_start=clock.wall() + 100)
    fresh = RobotsCache(UA, clock=clock2)
    fresh.restore(data)
    p, d = fresh.get("https://p.com"), fresh.get("https://d.com")
    assert p is not None and d is not None
    assert p.expires_at == pytest.approx(clock2.now() + DAY - 500)
    assert p.fetched_at == pytest.approx(clock2.now() - 500)
    assert d.kind == "disallow_all" and d.expires_at == pytest.approx(clock2.now() + 100)
    clock2.advance(100)
    assert fresh.get("https://d.com") is None


def test_restore_skips_malformed_entries(cache: RobotsCache) -> None:
    good = {"origin": "https://g.com", "kind": "allow_all", "source_status": 404, "age_s": 0, "ttl_left_s": 10}
    bad: list[dict[str, Any]] = [
        {"origin": "https://x.com"},
        {**good, "kind": "maybe"},
        {**good, "kind": "parsed", "text": None},
        {**good, "age_s": "old"},
    ]
    assert cache.restore([good, *bad]) == 1
    assert cache.stats()["restore_errors"] == 4
    assert cache.allowed("https://g.com/x", "https://g.com") is True
