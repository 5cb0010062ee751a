"""The synthetic web: determinism, ground truth checked against its own HTML, and the server.

The ground-truth test crawls the web *without* the crawler: a tiny breadth-first walk
that parses the served bytes with the standard library's ``html.parser``, resolves
hrefs with ``urllib.parse.urljoin`` and canonicalizes with the helper below (written
independently of ``crawler.testing.web``), obeys robots.txt through protego, and then
must find exactly what :meth:`SyntheticWeb.must_fetch` claims. Server tests speak real
HTTP to a loopback server started here.
"""

from __future__ import annotations

import asyncio
import gzip
import http.client
import itertools
import random
import re
import time
from html.parser import HTMLParser
from urllib.parse import quote, urljoin, urlsplit

import aiohttp
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from protego import Protego

from crawler.content.fingerprints import hamming, simhash64
from crawler.testing import WebServer, crawl_config_for, running_web
from crawler.testing.web import JUNK_HREFS, SPELLINGS, USER_AGENT, SyntheticWeb

UA_TOKEN = "raycrawl"

# --------------------------------------------------------------------------- helpers

_UNRESERVED = set("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-._~")
_C0_SPACE = "".join(map(chr, range(0x21)))


def canon(base: str, href: str) -> str | None:
    """Resolve ``href`` against ``base`` the way a browser would, then canonicalize."""
    href = href.strip(_C0_SPACE)                     # WHATWG: strip C0 controls and space
    href = re.sub(r"[\t\n\r]", "", href)             # WHATWG: remove tab and newline anywhere
    try:
        parts = urlsplit(urljoin(base, href))        # urljoin removes dot segments (RFC 3986 5.2.4)
        host, port = parts.hostname, parts.port
    except ValueError:
        return None
    if parts.scheme not in ("http", "https") or not host or any(ord(c) < 0x20 for c in parts.geturl()):
        return None

    def pct(s: str) -> str:
        s = quote(s, safe="/%:@!$&'()*+,;=?-._~")   # raw non-ASCII -> UTF-8 escapes
        return re.sub(r"%([0-9A-Fa-f]{2})",
                      lambda m: chr(int(m[1], 16)) if chr(int(m[1], 16)) in _UNRESERVED else "%" + m[1].upper(), s)

    query = "&".join(p for p in parts.query.split("&") if p and not p.lower().startswith("utm_"))
    netloc = f"{host}:{port}" if port and port != 80 else host
    return f"{parts.scheme}://{netloc}{pct(parts.path) or '/'}" + (f"?{pct(query)}" if query else "")


class _Links(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.base: str | None = None
        self.links: list[tuple[str, bool, str]] = []  # (href, rel nofollow, tag)
        self.nofollow = False
        self.text: list[str] = []
        self._skip = 0

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = {k: v or "" for k, v in attrs}
        if tag == "base" and self.base is None and "href" in a:
            self.base = a["href"]
        elif tag in ("a", "area") and "href" in a:
            self.links.append((a["href"], "nofollow" in a.get("rel", "").lower().split(), tag))
        elif tag == "meta" and a.get("name", "").lower() == "robots":
            self.nofollow = self.nofollow or "nofollow" in a.get("content", "").lower()
        elif tag in ("script", "style", "title"):
            self._skip += 1

    def handle_endtag(self, tag: str) -> None:
        if tag in ("script", "style", "title") and self._skip:
            self._skip -= 1

    def handle_data(self, data: str) -> None:
        if not self._skip:
            self.text.append(data)


def parse(body: bytes, content_type: str) -> _Links:
    m = re.search(r"charset=([\w-]+)", content_type)
    p = _Links()
    p.feed(body.decode(m[1] if m else "utf-8", errors="replace"))
    p.close()
    return p


def visible_text(body: bytes, content_type: str = "text/html; charset=utf-8") -> str:
    return " ".join(" ".join(parse(body, content_type).text).split())


def _split(web: SyntheticWeb, url: str) -> tuple[str, str]:
    """(host, path_qs) of a URL of the web."""
    parts = web.split(url)
    assert parts is not None, url
    return parts


def _maybe_body(web: SyntheticWeb, url: str) -> bytes | None:
    """What the web serves at ``url`` (None: nothing)."""
    return web.body(*_split(web, url))


def _served(web: SyntheticWeb, host: str, path_qs: str) -> bytes:
    """The page the web serves at ``host`` + ``path_qs`` (a test fails if there is none)."""
    body = web.body(host, path_qs)
    assert body is not None, (host, path_qs)
    return body


def _body(web: SyntheticWeb, url: str) -> bytes:
    return _served(web, *_split(web, url))


def _found(pattern: bytes, body: bytes, group: int = 0) -> bytes:
    """``group`` of the first match of ``pattern`` (dot matches newlines), which must exist."""
    m = re.search(pattern, body, re.S)
    assert m is not None, pattern
    return m[group]


def walk(web: SyntheticWeb, follow_rel_nofollow: bool = False, max_body: int = 2_000_000) -> dict:
    """Crawl ``web`` through ``web.reply`` like a correct crawler; report what it requested."""
    robots: dict[str, Protego | bool] = {}
    depth = {u: 0 for u in web.seeds()}
    queue = list(web.seeds())
    requested: set[str] = set()
    retried: set[str] = set()
    blocked: set[str] = set()
    traps: set[str] = set()
    hrefs: list[str] = []
    tags: set[str] = set()
    bases = 0
    traps_hosts = web.trap_hosts()
    for url in queue:
        parts = urlsplit(url)
        host, path_qs = parts.hostname, url.split(parts.netloc, 1)[1]
        assert host is not None, url
        if host not in robots:
            r = web.reply(host, "/robots.txt")
            if r.status == 301:
                loc = dict(r.headers)["Location"]
                r = web.reply(host, urlsplit(loc).path)
            robots[host] = (Protego.parse(r.body.decode()) if r.status == 200
                            else r.status < 500)  # 4xx: allow all; 5xx: disallow all
        rules = robots[host]
        if rules is False or (rules is not True and not rules.can_fetch(url, UA_TOKEN)):
            blocked.add(url)
            continue
        if host in traps_hosts and path_qs != "/":
            traps.add(url)
            continue
        requested.add(url)
        r = web.reply(host, path_qs, attempt=1)
        if r.status in (429, 503) or r.delay:
            retried.add(url)
            r = web.reply(host, path_qs, attempt=2)
            if r.status != 200 or r.delay:
                continue
        headers = dict(r.headers)
        if r.status in (301, 302, 307, 308):
            children = [(canon(url, headers["Location"]), False)]
        elif r.status != 200 or not headers["Content-Type"].startswith("text/html") or len(r.body) > max_body:
            continue
        else:
            body = gzip.decompress(r.body) if headers.get("Content-Encoding") == "gzip" else r.body
            page = parse(body, headers["Content-Type"])
            if page.nofollow:
                continue
            base = url
            if page.base is not None:
                bases += 1
                base = urljoin(url, page.base)
            hrefs += [h for h, _, _ in page.links]
            tags |= {t for _, _, t in page.links}
            children = [(canon(base, h), nf) for h, nf, _ in page.links]
        for child, nofollow in children:
            if child and (follow_rel_nofollow or not nofollow) and child not in depth:
                depth[child] = depth[url] + 1
                queue.append(child)
    return {"requested": requested, "retried": retried, "blocked": blocked, "traps": traps,
            "depth": depth, "hrefs": hrefs, "tags": tags, "bases": bases}


@pytest.fixture(scope="module")
def web() -> SyntheticWeb:
    w = SyntheticWeb(seed=0, profile="test")
    w.bind(8080)
    return w


@pytest.fixture(scope="module")
def walked(web: SyntheticWeb) -> dict:
    return walk(web)


@pytest.fixture(scope="module")
def server():
    with running_web(seed=0, profile="test") as srv:
        yield srv


@pytest.fixture
def srv(server: WebServer) -> WebServer:
    server.reset()
    return server


def get(srv: WebServer, host: str, path: str, **headers: str) -> tuple[int, dict[str, str], bytes]:
    conn = http.client.HTTPConnection("127.0.0.1", srv.port, timeout=5)
    try:
        conn.request("GET", path, headers={"Host": f"{host}:{srv.port}", "User-Agent": USER_AGENT, **headers})
        resp = conn.getresponse()
        return resp.status, dict(resp.getheaders()), resp.read()
    finally:
        conn.close()


# ----------------------------------------------------------------------- determinism


def test_same_seed_gives_same_graph_and_bytes() -> None:
    a, b, c = SyntheticWeb(seed=7), SyntheticWeb(seed=7), SyntheticWeb(seed=8)
    for w in (a, b, c):
        w.bind(8080)
    assert a.hosts() == b.hosts() and a.seeds() == b.seeds()
    assert a.must_fetch() == b.must_fetch()
    urls = sorted(a.must_fetch())
    assert all(_maybe_body(a, u) == _maybe_body(b, u) for u in urls)
    # another seed: another web (same host names, different pages and text)
    assert a.must_fetch() != c.must_fetch() or any(_maybe_body(a, u) != _maybe_body(c, u) for u in urls[:20])


def test_port_appears_in_every_url_once_bound() -> None:
    w = SyntheticWeb()
    assert w.seeds()[0] == "http://h0000.web.test/"
    w.bind(4321)
    assert all(":4321/" in u for u in w.must_fetch())
    assert b"h0001.web.test:4321/" in _served(w, "h0000.web.test", "/").lower()


def test_profiles_have_the_promised_sizes() -> None:
    test = SyntheticWeb(profile="test")
    normal = [h for h in test.hosts() if h.startswith("h")]
    assert len(normal) == 12 and set(test.special_hosts().values()) >= {"robots-500", "trap-deep", "mirror"}
    t0 = time.perf_counter()
    demo = SyntheticWeb(profile="demo")
    assert 250 <= len(demo.hosts()) <= 400 and 2500 <= len(demo.must_fetch()) <= 4000
    bench = SyntheticWeb(profile="bench")  # lazy: thousands of hosts cost nothing up front
    assert len(bench.hosts()) >= 1000
    assert time.perf_counter() - t0 < 3


def test_bench_pages_are_20_to_30_kb_with_20_to_60_links() -> None:
    w = SyntheticWeb(profile="bench")
    w.bind(8080)
    rng = random.Random(3)
    for _ in range(40):
        i = rng.randrange(w.profile.hosts)
        k = rng.randrange(w.graph.layout(i).pages)
        host, path = w.normal_host(i), f"/p/{k}" if k else "/"
        body = _served(w, host, path)
        links = [h for h, _, _ in parse(body, "text/html; charset=utf-8").links if h not in JUNK_HREFS.values()]
        assert 20_000 <= len(body) <= 30_000, (host, path, len(body))
        assert 20 <= len(links) <= 60 + 1, (host, path, len(links))  # +1: the "#top" link


# ---------------------------------------------------------------------- ground truth


def test_walk_of_served_html_finds_exactly_must_fetch(web: SyntheticWeb, walked: dict) -> None:
    must = web.must_fetch()
    failures = set(web.failure_urls())
    assert walked["retried"] == failures
    assert walked["requested"] - failures == must
    assert walked["blocked"] == web.robots_blocked_urls()
    for url in must:
        depth = web.depth(url)
        assert depth is not None and walked["depth"][url] == depth <= web.required_depth()
    assert {urlsplit(u).hostname for u in walked["traps"]} == set(web.trap_hosts())


def test_ground_truth_reasons_agree_with_the_walk(web: SyntheticWeb, walked: dict) -> None:
    for url in walked["requested"]:
        assert web.must_not_fetch(url) is None, url
    for url in walked["blocked"]:
        assert web.must_not_fetch(url), url
        assert web.expected_outcome(url) == "robots_blocked"
    for url in walked["traps"]:
        assert web.must_not_fetch(url) is None and web.expected_requests(url) is None
    hidden = {"/nf-hidden/1", "/rn-hidden/2", "/after-big", "/in-script", "/in-comment", "/from-png"}
    for host in web.hosts():
        for path in hidden:
            if web.page(host, path):
                assert web.must_not_fetch(host, path), (host, path)


def test_rel_nofollow_targets_are_only_reachable_through_rel_nofollow(web: SyntheticWeb) -> None:
    extra = web.must_fetch(follow_rel_nofollow=True) - web.must_fetch()
    assert {urlsplit(u).path for u in extra} == {"/rn-hidden/1", "/rn-hidden/2", "/rn-hidden/3"}
    assert walk(web, follow_rel_nofollow=True)["requested"] - set(web.failure_urls()) == web.must_fetch(
        follow_rel_nofollow=True)
    url = sorted(extra)[0]
    assert "follow_rel_nofollow" in (web.must_not_fetch(url) or "")
    assert web.must_not_fetch(url, follow_rel_nofollow=True) is None


def test_links_come_in_every_spelling(web: SyntheticWeb, walked: dict) -> None:
    hrefs = walked["hrefs"]
    used = {lk.spelling for u in web.must_fetch() if (p := web.page(*_split(web, u))) for lk in p.links}
    assert used >= set(SPELLINGS)
    checks = {
        "absolute": lambda h: h.startswith("http://"),
        "upper-case": lambda h: h.startswith("HTTP://H"),
        "scheme-relative": lambda h: h.startswith("//"),
        "relative": lambda h: re.match(r"[a-z0-9]", h) and ":" not in h,
        "dot": lambda h: h.startswith("./"),
        "parent": lambda h: h.startswith("../"),
        "fragment": lambda h: "#section" in h,
        "tracking": lambda h: "utm_source=x&utm_medium=y" in h,
        "escape": lambda h: re.search(r"%(?:7[0-9a-fA-F]|3\d|6[0-9a-fA-F])", h),
        "whitespace": lambda h: h != h.strip() and "\n" in h.strip(),
        "cyrillic": lambda h: "страница" in h,
    }
    for name, check in checks.items():
        assert any(check(h) for h in hrefs), name
    assert set(JUNK_HREFS.values()) <= set(hrefs)
    assert walked["tags"] == {"a", "area"} and walked["bases"] > 0


def test_chain_and_cross_host_only_pages_exist(web: SyntheticWeb) -> None:
    lay = web.graph.layout(0)
    deepest = web.url("h0000.web.test", f"/p/{lay.hubs + lay.chain}")
    assert web.depth(deepest) == 6
    lay3 = web.graph.layout(3)
    orphan = web.url("h0003.web.test", f"/p/{lay3.hubs + lay3.chain + 1}")
    assert orphan in web.must_fetch()
    linkers = {u for u in web.must_fetch() if (p := web.page(*_split(web, u)))
               and any((lk.host or p.host, lk.path_qs) == web.split(orphan) for lk in p.links)}
    assert linkers and all(urlsplit(u).hostname != "h0003.web.test" for u in linkers)


def test_must_not_fetch_reasons(web: SyntheticWeb) -> None:
    h = web.host_for
    assert web.must_not_fetch(h("robots-500"), "/")
    assert web.must_not_fetch(h("robots-500"), "/robots.txt") is None
    assert "/private/" in (web.must_not_fetch(h("robots-private"), "/private/1") or "")
    assert web.must_not_fetch(h("robots-agent"), "/nobots/1")
    assert web.must_not_fetch(h("robots-otherbot"), "/p/1") is None
    assert web.must_not_fetch(h("robots-redirect"), "/robots-real.txt") is None
    assert web.must_not_fetch(h("robots-redirect"), "/secret/1")
    assert web.must_not_fetch("a[b].test", "/x")
    assert "canonical" in (web.must_not_fetch("h0000.web.test", "/%70/1") or "")
    assert "canonical" in (web.must_not_fetch("h0000.web.test", "/p/1?utm_source=x") or "")
    assert "canonical" in (web.must_not_fetch("h0000.web.test", "/p/../p/1") or "")
    assert web.must_not_fetch("h0000.web.test", "/p/p/1")          # a mis-resolved relative link
    assert web.must_not_fetch("h0000.web.test", "/nul-href/%EF%BF%BDpage") is None  # browsers follow it (NUL -> U+FFFD)
    assert web.must_not_fetch(h("meta-nofollow"), "/nf-hidden/1")
    assert web.must_not_fetch("http://h0000.web.test:8080/p/1") is None


def test_expected_requests_and_outcomes(web: SyntheticWeb) -> None:
    u = web.url
    h = web.host_for
    assert web.expected_requests(u(h("retry-503-once"), "/flaky")) == 2
    assert web.expected_requests(u(h("retry-429-once"), "/busy")) == 2
    assert web.retry_after(u(h("retry-429-once"), "/busy")) == 1.0
    assert web.expected_requests(u(h("retry-503-always"), "/down"), attempts=4) == 4
    assert web.expected_requests(u(h("stall"), "/slow"), attempts=3) == 3
    assert web.expected_requests(u(h("status-4xx"), "/missing")) == 1
    assert web.expected_requests(u(h("robots-500"), "/")) == 0
    assert web.expected_requests(u(h("trap-deep"), "/deep/5")) is None
    assert web.expected_outcome(u(h("status-4xx"), "/forbidden")) == "http_error"
    assert web.expected_outcome(u(h("redirect"), "/r/loop-b")) == "redirect"
    assert web.expected_outcome(u(h("retry-503-always"), "/down")) == "http_error"  # the last answer was a 503
    assert web.expected_outcome(u(h("redirect-dest"), "/landing")) == "fetched"
    assert web.robots_delay_hosts() == {h("robots-delay"): 0.2}


def test_near_duplicates_within_simhash_distance_3_and_mirrors_identical(web: SyntheticWeb) -> None:
    (group,) = web.near_duplicate_groups()
    fps = [simhash64(visible_text(_body(web, u))) for u in sorted(group)]
    assert len(set(_body(web, u) for u in group)) == len(group)  # not exact duplicates
    assert max(hamming(a, b) for a, b in itertools.combinations(fps, 2)) <= 3
    normal = sorted(u for u in web.must_fetch() if (urlsplit(u).hostname or "").startswith("h"))[:40]
    others = [simhash64(visible_text(_body(web, u))) for u in normal]
    assert min(hamming(a, b) for a, b in itertools.combinations(others, 2)) > 3
    pairs = web.mirror_pairs()
    assert len(pairs) >= 5 and all(p[0] in web.must_fetch() and p[1] in web.must_fetch() for p in pairs)
    assert all(_body(web, a) == _body(web, b) for a, b in pairs)


_CHROME = re.compile(rb"(?:<header>.*?</header>|<aside>.*?</aside>|<footer>.*?</footer>)\n?", re.S)


def test_chrome_variant_groups_differ_only_in_footer_nav_and_aside(web: SyntheticWeb) -> None:
    groups = web.chrome_duplicate_groups()
    assert len(groups) == web.profile.chrome_groups == 2
    must = web.must_fetch()
    near = set().union(*web.near_duplicate_groups())
    for group in groups:
        assert len(group) == 4 and group <= must and not group & near
        assert len({urlsplit(u).hostname for u in group}) == 2  # copies on two hosts
        bodies = [_body(web, u) for u in sorted(group)]
        # Without their <header><nav>, <aside> and <footer>, the copies are one document.
        assert len({_CHROME.sub(b"", b) for b in bodies}) == 1
        footers = [_found(rb"<footer>(.*?)</footer>", b, 1) for b in bodies]
        assert len(set(footers)) == 4
        assert all(re.fullmatch(rb"<p>Rendered 2024-\d\d-\d\d \d\d:\d\d:\d\d UTC \xc2\xb7 request id [0-9a-f]{12}</p>", f)
                   for f in footers)
        article = _found(rb"<article>.*</article>", bodies[0])
        assert 9_000 <= len(article) <= 11_000 and b"<a " not in article
        assert len({_CHROME.findall(b)[0] for b in bodies if b.count(b"<nav>")}) > 1  # the chrome differs
        # Whole-page SimHash does not put every pair within 3: only the main content does.
        fps = [simhash64(visible_text(b)) for b in bodies]
        assert max(hamming(a, b) for a, b in itertools.combinations(fps, 2)) > 3
        mains = {simhash64(visible_text(_found(rb"<main>.*</main>", b))) for b in bodies}
        assert len(mains) == 1


def test_chrome_variant_groups_are_reachable_in_the_demo_too() -> None:
    demo = SyntheticWeb(profile="demo")
    groups = demo.chrome_duplicate_groups()
    assert len(groups) == demo.profile.chrome_groups >= 4
    assert all(len(g) == 4 for g in groups) and set().union(*groups) <= demo.must_fetch()
    assert SyntheticWeb(profile="bench").chrome_duplicate_groups() == []


@settings(max_examples=150, deadline=None)
@given(host=st.sampled_from(["h0000.web.test", "trap-facets.web.test", "trap-calendar.web.test",
                             "trap-deep.web.test", "mirror.web.test", "nope.test", ""]),
       path=st.text(min_size=0, max_size=40))
def test_reply_never_raises_on_odd_targets(web: SyntheticWeb, host: str, path: str) -> None:
    r = web.reply(host, "/" + path)
    assert 200 <= r.status < 600
    web.must_not_fetch(host or "x.test", "/" + path)


# --------------------------------------------------------------------------- server


def test_failures_answer_as_documented(srv: WebServer) -> None:
    h = srv.web.host_for
    assert get(srv, h("retry-503-once"), "/flaky")[0] == 503
    assert get(srv, h("retry-503-once"), "/flaky")[0] == 200
    assert [get(srv, h("retry-503-always"), "/down")[0] for _ in range(3)] == [503] * 3
    status, headers, _ = get(srv, h("retry-429-once"), "/busy")
    assert (status, headers["Retry-After"]) == (429, "1")
    assert get(srv, h("retry-429-once"), "/busy")[0] == 200
    assert get(srv, h("status-4xx"), "/missing")[0] == 404
    assert get(srv, h("status-4xx"), "/forbidden")[0] == 403
    assert get(srv, "unknown.test", "/")[0] == 404
    srv.reset()
    assert get(srv, h("retry-503-once"), "/flaky")[0] == 503  # reset: fails once again


def test_redirects(srv: WebServer) -> None:
    h, port = srv.web.host_for("redirect"), srv.port
    status, headers, _ = get(srv, h, "/r/moved")
    assert (status, headers["Location"]) == (301, f"http://{h}:{port}/r/target")
    hops: list[int] = []
    path = "/r/c1"
    while len(hops) < 10:
        status, headers, _ = get(srv, h, path)
        if status == 200:
            break
        hops.append(status)
        path = urlsplit(urljoin(f"http://{h}:{port}{path}", headers["Location"])).path
    assert (hops, path) == ([302, 307, 308], "/r/chain-end")
    assert get(srv, h, "/r/loop-a")[1]["Location"].endswith("/r/loop-b")
    assert get(srv, h, "/r/loop-b")[1]["Location"] == "/r/loop-a"
    loc = get(srv, h, "/r/offsite")[1]["Location"]
    assert loc == f"http://redirect-dest.web.test:{port}/landing"
    assert get(srv, "redirect-dest.web.test", "/landing")[0] == 200


def test_robots_variants(srv: WebServer) -> None:
    h = srv.web.host_for

    def rules(behaviour: str) -> Protego:
        status, _, body = get(srv, h(behaviour), "/robots.txt")
        assert status == 200
        return Protego.parse(body.decode())

    assert not rules("robots-private").can_fetch("/private/1", UA_TOKEN)
    agent = rules("robots-agent")
    assert not agent.can_fetch("/nobots/1", UA_TOKEN) and agent.can_fetch("/p/1", UA_TOKEN)
    assert agent.can_fetch("/nobots/1", "somebot")
    other = rules("robots-otherbot")
    assert other.can_fetch("/p/1", UA_TOKEN) and not other.can_fetch("/p/1", "otherbot")
    assert rules("robots-delay").crawl_delay(UA_TOKEN) == pytest.approx(0.2)
    assert get(srv, h("robots-404"), "/robots.txt")[0] == 404
    assert get(srv, h("robots-500"), "/robots.txt")[0] == 500
    status, headers, _ = get(srv, h("robots-redirect"), "/robots.txt")
    assert status == 301 and headers["Location"].endswith("/robots-real.txt")
    status, _, body = get(srv, h("robots-redirect"), "/robots-real.txt")
    assert not Protego.parse(body.decode()).can_fetch("/secret/1", UA_TOKEN)


def test_content_variants(srv: WebServer) -> None:
    h = srv.web.host_for
    status, headers, zipped = get(srv, h("gzip"), "/z/1", **{"Accept-Encoding": "gzip"})
    assert headers["Content-Encoding"] == "gzip"
    _, plain_headers, plain = get(srv, h("gzip"), "/z/1")
    assert "Content-Encoding" not in plain_headers and gzip.decompress(zipped) == plain
    _, headers, body = get(srv, h("cp1251"), "/ru")
    assert headers["Content-Type"] == "text/html; charset=windows-1251"
    assert "/ru/страница".encode("cp1251") in body and "город".encode("cp1251") in body
    with pytest.raises(UnicodeDecodeError):
        body.decode("utf-8")
    assert get(srv, h("cp1251"), "/ru/" + quote("страница"))[0] == 200
    _, headers, body = get(srv, h("binary"), "/asset/1")
    assert headers["Content-Type"] == "image/png" and body.startswith(b"\x89PNG\r\n\x1a\n")
    _, headers, body = get(srv, h("oversized"), "/big")
    assert int(headers["Content-Length"]) == len(body) > srv.web.profile.max_body_bytes
    _, headers, body = get(srv, h("oversized"), "/big-chunked")
    assert headers.get("Transfer-Encoding") == "chunked" and "Content-Length" not in headers
    assert len(body) > srv.web.profile.max_body_bytes
    _, _, body = get(srv, h("malformed"), "/broken")
    page = parse(body, "text/html; charset=utf-8")
    assert [x for x, _, _ in page.links][:1] == ["/broken-target"] and b"\xff\xfe" in body
    assert not any("in-script" in x or "in-comment" in x for x, _, _ in page.links)
    _, _, body = get(srv, h("meta-nofollow"), "/nf")
    assert parse(body, "text/html").nofollow


def test_traps_go_on_forever(srv: WebServer) -> None:
    h = srv.web.host_for
    _, _, body = get(srv, h("trap-calendar"), "/cal/2024/12")
    assert b'"/cal/2025/01"' in body
    _, _, body = get(srv, h("trap-loop"), "/loop/loop/loop/")
    assert b'href="loop/"' in body
    _, _, body = get(srv, h("trap-session"), "/s/0123456789ab/page")
    sids = re.findall(rb"/s/([0-9a-f]{12})/", body)
    assert sids and b"0123456789ab" not in sids
    _, _, body = get(srv, h("trap-facets"), "/shop?color=red&size=m")
    assert b"page=2" in body
    assert get(srv, h("trap-deep"), "/deep/987654321")[0] == 200


async def test_stalled_page_does_not_block_other_requests(srv: WebServer) -> None:
    h = srv.web.host_for
    async with aiohttp.ClientSession() as session:
        async def fetch(host: str, path: str) -> int:
            async with session.get(f"http://127.0.0.1:{srv.port}{path}", headers={"Host": host}) as r:
                await r.read()
                return r.status

        stalled = asyncio.ensure_future(fetch(h("stall"), "/slow"))
        for _ in range(200):  # wait until the server is inside the stalled handler
            if srv.in_flight(h("stall")):
                break
            await asyncio.sleep(0.01)
        assert srv.in_flight(h("stall")) == 1
        t0 = time.monotonic()
        assert await fetch("h0000.web.test", "/") == 200
        assert time.monotonic() - t0 < 1.0
        assert not stalled.done()  # still sleeping (5 s in the test profile)
        stalled.cancel()


async def test_a_request_begun_before_a_reset_stays_out_of_the_new_log(srv: WebServer) -> None:
    """A stalled request whose client gave up ends after the next test's reset; it must
    not turn up in that test's log (it did: the next test saw two requests, not one)."""
    h = srv.web.host_for
    async with aiohttp.ClientSession() as session:
        stalled = asyncio.ensure_future(session.get(f"http://127.0.0.1:{srv.port}/slow", headers={"Host": h("stall")}))
        for _ in range(200):
            if srv.in_flight(h("stall")):
                break
            await asyncio.sleep(0.01)
        assert srv.in_flight(h("stall")) == 1
        srv.reset()
        stalled.cancel()
        for _ in range(500):  # the server notices the client is gone and ends the handler
            if not srv.in_flight(h("stall")):
                break
            await asyncio.sleep(0.01)
    assert srv.in_flight(h("stall")) == 0
    assert srv.requests() == []


def test_request_log_records_each_request(srv: WebServer) -> None:
    before = time.monotonic()
    status, _, _ = get(srv, "H0000.WEB.TEST", "/%70/1?utm_source=x", **{"User-Agent": "probe/1.0"})
    assert status == 200
    (rec,) = srv.requests()
    assert (rec.host, rec.path_qs, rec.method, rec.status) == ("h0000.web.test", "/%70/1?utm_source=x", "GET", 200)
    assert rec.user_agent == "probe/1.0" and rec.headers["User-Agent"] == "probe/1.0"
    assert before <= rec.start <= rec.end <= time.monotonic()
    assert srv.request_counts() == {srv.web.url("h0000.web.test", "/p/1"): 1}
    assert "canonical" in srv.web.must_not_fetch(rec.host, rec.path_qs)


def test_crawl_config_for_targets_the_server(srv: WebServer) -> None:
    cfg = crawl_config_for(srv, fetch={"attempts": 2}, limits={"max_depth": 12})
    assert cfg["seeds"] == srv.web.seeds() and all(f":{srv.port}/" in s for s in cfg["seeds"])
    assert cfg["fetch"]["resolve"] == {"*.test": "127.0.0.1"} and cfg["fetch"]["attempts"] == 2
    assert cfg["limits"]["max_depth"] == 12 and cfg["scope"] == "any" and cfg["user_agent"] == USER_AGENT
    assert cfg["fetch"]["timeout_s"] < srv.web.profile.stall_seconds
    assert cfg["limits"]["max_body_bytes"] < srv.web.profile.oversized_bytes
    try:
        from crawler.config.settings import from_dict
    except ImportError:  # pragma: no cover - config is written concurrently
        return
    loaded = from_dict(crawl_config_for(srv))
    assert loaded.scope == "any" and loaded.limits.max_depth >= srv.web.required_depth()
