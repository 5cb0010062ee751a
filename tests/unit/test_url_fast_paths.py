"""The fast paths of the per-link URL code give exactly what the general code gives.

``join_url`` answers the common href shapes by concatenation (``_fast_join``),
``UrlNormalizer`` takes URLs of a simple shape through one regex (``__call__``),
``TrapRules.check`` answers a URL without query or fragment with two scans and
``Scope.allows`` remembers its decision per host and port. Each keeps its general code
as the reference (``_general_join``, ``UrlNormalizer._full``, ``TrapRules._shape``, the
hostname rule of :func:`scope_reference`), and these tests run both on every link of the real-page corpus,
of the browser-parity fixture's pages, of the bench web's pages, and on generated URLs,
and require the same result. Each test also checks that the fast path was taken on a
good share of its inputs, so it cannot pass by never exercising it.
"""

from __future__ import annotations

import gzip
import json
from functools import cache
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from crawler.parse import parse_page
from crawler.policy.traprules import TrapRules
from crawler.testing.web import SyntheticWeb
from crawler.urls import Scope
from crawler.urls.canonical import _SIMPLE, UrlNormalizer
from crawler.urls.hosts import hostname, registered_domain
from crawler.urls.join import _fast_join, _general_join, join_url
from tests.corpus import require_corpus

FIXTURE = Path(__file__).resolve().parents[2] / "tests" / "fixtures" / "browser_links.json.gz"

NORMALIZERS = (
    UrlNormalizer(),
    UrlNormalizer(sort_query=True),
    UrlNormalizer(("utm_*", "x", "PHPSESSID")),
    UrlNormalizer(("*",)),
)
SCOPES = (
    Scope("host", ["http://h0005.bench.test:18080/", "https://example.com/", "http://[::1]:8080/", "http://127.0.0.1/"]),
    Scope("domain", ["http://h0005.bench.test:18080/", "https://www.bbc.co.uk/", "http://me.github.io/"]),
)
TRAPS = (TrapRules(16, 2048, 12, 3), TrapRules(None, None, 2, 1), TrapRules(None, 60, None, 2), TrapRules(None, None, 1, None))
ENCODINGS = ("utf-8", "windows-1251", "shift_jis")


class Tally:
    """How many inputs each fast path took, of how many."""

    def __init__(self) -> None:
        self.joins = self.fast_joins = self.urls = self.fast_urls = 0


def check_join(base: object, href: str, tally: Tally | None = None) -> None:
    """join_url (fast path first) equals the general join for every encoding."""
    for encoding in ENCODINGS:
        assert join_url(base, href, encoding) == _general_join(base, href, encoding), (base, href, encoding)  # type: ignore[arg-type]
    if tally is not None:
        tally.joins += 1
        tally.fast_joins += _fast_join(base, href) is not None


def check_url(url: str, tally: Tally | None = None) -> None:
    """Every normalizer equals its general path on ``url``; the trap rules' quick answer
    equals their general one, and the scope's remembered decision the one it makes from
    the hostname, on what it normalizes to."""
    for normalizer in NORMALIZERS:
        result = normalizer(url)
        assert result == normalizer._full(url), (url, normalizer)
        if result is not None:
            for traps in TRAPS:
                assert traps.check(result, 2) == traps._shape(result), (result, traps)
            for scope in SCOPES:
                assert scope.allows(result) == scope_reference(scope, result), (result, scope)
    if tally is not None:
        tally.urls += 1
        tally.fast_urls += _SIMPLE(url) is not None


def scope_reference(scope: Scope, url: str) -> bool:
    """Scope.allows as it was written before it remembered decisions by host_key."""
    if not url:
        return False
    if scope.mode == "any":
        return True
    host = hostname(url)
    return host in scope.hosts if scope.mode == "host" else registered_domain(host) in scope.domains


def check_page(body: bytes, url: str, charset: str | None, tally: Tally) -> None:
    page = parse_page(body, url, f"text/html; charset={charset}" if charset else "text/html")
    for link in page.links:
        check_join(page.base_url, link.raw, tally)
        if link.resolved is not None:
            check_url(link.resolved, tally)


def assert_fast_share(tally: Tally, joins: float, urls: float) -> None:
    assert tally.joins and tally.fast_joins >= joins * tally.joins, (tally.fast_joins, tally.joins)
    assert tally.urls and tally.fast_urls >= urls * tally.urls, (tally.fast_urls, tally.urls)


@cache
def fixture() -> dict:
    return json.loads(gzip.decompress(FIXTURE.read_bytes()).decode("utf-8", "surrogatepass"))


def test_corpus_links_take_the_same_path_fast_or_not() -> None:
    root = require_corpus()
    tally = Tally()
    for page in fixture()["pages"]:
        data = (root / page["file"]).read_bytes()
        body = gzip.decompress(data) if data[:2] == b"\x1f\x8b" else data
        check_page(body, page["url"], page["charset"], tally)
        for chromium_href in page["hrefs"]:  # as the browser resolved them
            if chromium_href is not None:
                check_url(chromium_href, tally)
    assert tally.joins > 10_000
    assert_fast_share(tally, joins=0.3, urls=0.5)


def test_browser_fixture_synthetic_pages_take_the_same_path_fast_or_not() -> None:
    # Odd hrefs, tricky markup and legacy encodings: mostly the general path.
    tally = Tally()
    for page in fixture()["synthetic"]:
        check_page(page["body"].encode("latin-1"), page["url"], page["charset"], tally)
    assert tally.joins > 100


def test_bench_web_links_take_the_same_path_fast_or_not() -> None:
    # The bench web writes links in every spelling a crawler must canonicalize.
    web = SyntheticWeb(seed=0, profile="bench", hosts=300)
    web.bind(18080)
    tally = Tally()
    for i in range(300):
        for path in ("/", "/p/1", "/p/7"):
            body = web.body(web.normal_host(i), path)
            if body is not None:
                check_page(body, f"http://h{i:04d}.bench.test:18080{path}", "utf-8", tally)
    assert tally.joins > 10_000
    assert_fast_share(tally, joins=0.5, urls=0.6)


# --- generated ------------------------------------------------------------------------

# Pieces that sit just inside and just outside each fast path's shape.
_PIECES = st.sampled_from([
    "a", "B", "z9", "-", "_", "~", ".", "..", "/", "//", "/./", "/../", "%", "%2e", "%2E", "%2F",
    "%20", "%41", "%7e", "%zz", "?", "#", "&", "=", "&&", ";", ":", "@", "!", "$", "'", "(", "*",
    "+", ",", " ", "\t", "\n", "\\", '"', "<", ">", "`", "{", "|", "^", "[", "]", "é", "\u4e2d",
    "\ud800", "\x00", "\x7f", "utm_source=x", "gclid=1", "a=1", "PHPSESSID=2", "p/3", "index.html",
])
_SCHEMES = st.sampled_from(["http://", "https://", "HTTP://", "Https://", "http:", "http:/", "http:///",
                            "ftp://", "mailto:", "javascript:", "//", "/", "", "./", "../", "?", "#"])
_AUTHORITIES = st.sampled_from([
    "", "example.com", "Example.COM", "h0005.bench.test:18080", "a.test:80", "a.test:443",
    "a.test:", "a.test:0080", "a.test:x", "u:p@a.test", "@a.test", "[::1]", "[::1]:8080",
    "[::1", "127.0.0.1", "0x7f.1", "1.2.3.04", "xn--bcher-kva.de", "bücher.de", "a..b",
    "a.b.", "ex%61mple.com", "a_b.test", ":80", "a[b].test", " a.test",
])
_URLS = st.builds(
    lambda scheme, authority, pieces: scheme + authority + "".join(pieces),
    _SCHEMES, _AUTHORITIES, st.lists(_PIECES, max_size=14),
)
_BASES = st.sampled_from([
    "http://h0005.bench.test:18080/", "https://example.com/a/b/c.html?q=1#f",
    "http://example.com", "http://Example.COM:80/dir/", "http://example.com/a b/é/x",
    "http://example.com/%2e/x", "http://example.com/a/./b/../c", "http://example.com/a%20b/c",
    "https://[::1]:8443/x/y", "http://u@example.com/a/", "mailto:x@y", "not a url", "",
    "http:///a.test/b/", "http://a.test/dir\\sub/x", " http://a.test/\tx/",
    "http://a.test/d/?q=a b", "http://a.test/d/?q='ж\"", "http://a.test/d/?", "http://a.test/d/?%2e",
])


@settings(max_examples=3000, suppress_health_check=[HealthCheck.too_slow])
@given(_BASES, _URLS)
def test_generated_hrefs_and_urls_take_the_same_path_fast_or_not(base: str, href: str) -> None:
    check_join(base, href)
    check_url(href)
    resolved = join_url(base, href)
    if resolved is not None:
        check_url(resolved)


def test_the_generated_inputs_reach_every_fast_path() -> None:
    # The generator is only useful if it lands on each fast path; these are its shapes.
    base = "http://h0005.bench.test:18080/a/?q"
    for href, expected in [
        ("http://example.com/a?b=1#c", "http://example.com/a?b=1#c"),
        ("HTTP://Example.COM/a", "http://Example.COM/a"),
        ("//example.com/a", "http://example.com/a"),
        ("/p/3?a=1#f", "http://h0005.bench.test:18080/p/3?a=1#f"),
        ("/p/%2e%2E/3", "http://h0005.bench.test:18080/3"),
        ("p/3", "http://h0005.bench.test:18080/a/p/3"),
        ("../p/./3", "http://h0005.bench.test:18080/p/3"),
        ("?b", "http://h0005.bench.test:18080/a/?b"),
        ("#f", "http://h0005.bench.test:18080/a/?q#f"),
        ("", "http://h0005.bench.test:18080/a/?q"),
        ("MailTo:x@y", "mailto:x@y"),
    ]:
        assert _fast_join(base, href) == expected, href
        check_join(base, href)
    for href in (" /p", "/a b", "/é", "//a@b/c", "//a/./b", "http://a/%2e/b", "http:p", "/a\\b", "p:3/x y"):
        assert _fast_join(base, href) is None, href
        check_join(base, href)
    for href in ("#f", ""):  # the base's query would be encoded: the general join
        assert _fast_join("http://a.test/d/?q=ж", href) is None
        check_join("http://a.test/d/?q=ж", href)
    for url in ("http://a.test/x?y=1#z", "http://A.TEST:80/", "https://a.test", "http://a.test/%41?b=%7e"):
        assert _SIMPLE(url) is not None
    for url in ("http://u@a.test/", "http://[::1]/", "http://a.test/ x", "HTTP://a.test/"):
        assert _SIMPLE(url) is None


def test_origins_are_remembered_within_a_bound() -> None:
    normalizer = UrlNormalizer()
    assert normalizer("http://A.Test:80/x") == "http://a.test/x"
    assert normalizer._origins == {"http://A.Test:80": "http://a.test"}
    huge = "http://" + "a" * 400 + ".test/x"
    assert normalizer(huge) is None  # longer than a DNS name
    assert len(normalizer._origins) == 1  # and not pinned in memory
    for i in range(20_000):
        normalizer(f"http://h{i}.test/")
    assert 0 < len(normalizer._origins) <= 16_384


@pytest.mark.parametrize("traps", TRAPS, ids=repr)
@settings(max_examples=500)
@given(url=st.builds(lambda a, b: a + b, st.sampled_from(["http://a.test", "http://a.test:81", "", "/"]),
                     st.lists(st.sampled_from(["/", "a", "b", "?", "&", "#", "x=1", "//"]), max_size=20).map("".join)))
def test_trap_rules_quick_answer_is_the_general_one(traps: TrapRules, url: str) -> None:
    assert traps.check(url, 0) == traps._shape(url)


def test_a_seed_added_while_crawling_widens_the_remembered_scope_at_once() -> None:
    for mode, outside in (("host", "http://b.test/x"), ("domain", "http://www.b.co.uk/x")):
        scope = Scope(mode, ["http://a.test/"])
        assert scope.allows("http://a.test/y") and not scope.allows(outside)
        scope.add_seeds([outside])
        assert scope.allows(outside) and scope.allows(outside.replace("/x", "/z"))
        assert scope.allows("http://a.test/y")
