"""The page text and main text parse_page takes in one walk are exactly what the plain
method gives: strip the never-text elements, take the raw body text, split and join it,
then extract the main content (crawler.content.maincontent) on its own walks.

The plain method is kept here as the reference; the shared corpus of real pages, bench
pages of the synthetic web and hand-made whitespace cases are compared field by field.
"""

from __future__ import annotations

import gzip
import json
import random
from collections.abc import Iterator

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from selectolax.lexbor import LexborHTMLParser

from crawler.content.maincontent import extract_main
from crawler.parse.feeds import FEED_TYPES
from crawler.parse import html as parse_html
from crawler.parse import links as parse_links
from crawler.parse import pagetext, robotsdirectives
from crawler.parse import parse_page
from crawler.parse.html import collapse_ws
from crawler.testing.web import SyntheticWeb
from crawler.urls import join_url
from tests.corpus import require_corpus

_WS = [chr(i) for i in range(0x110000) if chr(i).isspace()]


def test_collapse_knows_every_whitespace_character() -> None:
    # collapse_ws checks the characters up to U+3000 only: str.split() knows no others.
    assert max(_WS) == "\u3000"
    assert sorted(pagetext.OTHER_WS + " ") == sorted(_WS)


@settings(max_examples=400, deadline=None)
@given(st.lists(st.sampled_from(["a", "b", "é", "€", "𝄞", "\x00", "\x01"] + _WS), max_size=30))
def test_collapse_is_split_and_join(chars: list[str]) -> None:
    text = "".join(chars)
    assert collapse_ws(text) == " ".join(text.split())


@pytest.mark.parametrize(
    "text",
    ["", " ", "a", "a b", "a  b", " a", "a ", "a\nb", "a\x0bb", "a\x1cb", "a\xa0b", "a\u3000b", "é b", "é  b", "é\u2028b",
     "𝄞 x", "𝄞\u205fx", "a\x00b c"],
)
def test_collapse_on_edges(text: str) -> None:
    assert collapse_ws(text) == " ".join(text.split())


# --- parse_page against the plain method ----------------------------------------------


def _reference(data: bytes, degraded: bool) -> tuple[str, str, bool]:
    """(text, main_text, main_text_failed) the plain way, from the bytes lexbor was given."""
    tree = LexborHTMLParser(data)
    body = tree.body
    if body is None:
        return "", "", False
    tree.strip_tags(["script", "style", "noscript", "template", "svg"])
    text = " ".join(body.text(separator=" ").split())
    if degraded:
        return text, text, False
    extracted = extract_main(tree, text)
    return text, extracted.text, extracted.error is not None


def _record_parsed_bytes(monkeypatch: pytest.MonkeyPatch) -> list[bytes]:
    """The bytes parse_page hands to lexbor, call by call (what the reference must read)."""
    fed: list[bytes] = []

    def recording_parser(data: bytes) -> LexborHTMLParser:
        fed.append(data)
        return LexborHTMLParser(data)

    monkeypatch.setattr(parse_html, "LexborHTMLParser", recording_parser)
    return fed


def _assert_same(monkeypatch: pytest.MonkeyPatch, pages: Iterator[tuple[str, bytes]]) -> int:
    fed = _record_parsed_bytes(monkeypatch)
    n = 0
    for url, body in pages:
        fed.clear()
        page = parse_page(body, url, None, user_agent_token="raycrawl")
        assert page.error is None, url
        if not page.is_html:
            continue
        assert len(fed) == 1, url
        assert (page.text, page.main_text, page.main_text_failed) == _reference(fed[0], page.degraded), url
        n += 1
    return n


def _corpus_pages() -> Iterator[tuple[str, bytes]]:
    corpus = require_corpus()
    for line in (corpus / "manifest.jsonl").read_text().splitlines():
        if line.strip():
            entry = json.loads(line)
            body = (corpus / entry["file"]).read_bytes()
            yield entry["url"], gzip.decompress(body) if body[:2] == b"\x1f\x8b" else body


def test_every_corpus_page_has_the_plain_text_and_main_text(monkeypatch: pytest.MonkeyPatch) -> None:
    assert _assert_same(monkeypatch, _corpus_pages()) > 100


def _bench_pages(n: int) -> Iterator[tuple[str, bytes]]:
    """Pages of the synthetic web's bench profile (what benchmarks.stages times)."""
    web = SyntheticWeb(seed=0, profile="bench", hosts=60)
    web.bind(8080)
    for k in range(n // 60 + 1):
        for i in range(60):
            if k < web.graph.layout(i).pages:
                path = "/" if k == 0 else f"/p/{k}"
                body = web.body(web.normal_host(i), path)
                if body is not None:
                    yield f"http://{web.normal_host(i)}:8080{path}", body


def test_bench_pages_have_the_plain_text_and_main_text(monkeypatch: pytest.MonkeyPatch) -> None:
    assert _assert_same(monkeypatch, _bench_pages(240)) > 200


_PIECES = [
    "<p>", "</p>", "<div class=nav>", "<div class='article-body'>", "</div>", "<nav>", "</nav>", "<article>",
    "</article>", "<main>", "</main>", "<header>", "</header>", "<footer>", "</footer>", "<aside>", "</aside>",
    "<script>var s = 1;</script>", "<style>p{}</style>", "<noscript><a href=/n>n</a></noscript>", "<template>t</template>",
    "<svg><title>svg</title><a href=/s>s</a></svg>", "<math><style>m</style>mi</math>", "<form>", "</form>",
    "<a href=/x>link text</a>", "<span>", "</span>", "<br>", "&nbsp;", "\xa0", "\u3000", "\x0b", "\t", "\n", "  ", " ",
    "word", "other words here", "é", "<pre>  a\n  b </pre>", "<textarea> t </textarea>", "<div role=navigation>",
    "<div hidden>", "<table><tr><td>cell</td></tr></table>", "<div role=main>", "<section role='navigation main'>",
    "<main role=navigation>", "<math><nav>math nav</nav></math>", "<x-nav class=nav>custom</x-nav>", "<svg><header>h</header></svg>",
    "<ul class=menu><li><a href=/m>menu</a></li></ul>", "<div class=sidebar><p>side text here</p></div>", "<dialog>d</dialog>",
    "<button>b</button>", "<select><option>o</option></select>", "<div aria-hidden=true>", "<p id=footer>",
]


def _nasty_pages(n: int) -> Iterator[tuple[str, bytes]]:
    rng = random.Random(20)
    for k in range(n):
        parts = [rng.choice(_PIECES) for _ in range(rng.randint(0, 80))]
        if k % 3 == 0:  # long enough to pass the main-content size rules
            parts.insert(rng.randint(0, len(parts)), "<p>" + " lorem ipsum dolor" * 40 + "</p>")
        yield f"http://ex.com/{k}", ("<!doctype html><title>t</title>" + "".join(parts)).encode()


def test_made_up_pages_have_the_plain_text_and_main_text(monkeypatch: pytest.MonkeyPatch) -> None:
    assert _assert_same(monkeypatch, _nasty_pages(600)) == 600


def test_a_degraded_page_has_the_plain_text(monkeypatch: pytest.MonkeyPatch) -> None:
    body = b"<div>" * 20_000 + b"<p>deep  text\n here</p><script>x()</script>"
    pages = [("http://ex.com/deep", body)]
    assert _assert_same(monkeypatch, iter(pages)) == 1
    assert parse_page(body, "http://ex.com/deep", "text/html").degraded


# --- the head pass against one selector list ---------------------------------------------


def _head_reference(data: bytes, url: str, agent: str | None) -> tuple[object, ...]:
    """(title, noindex, nofollow, base_url, feeds) from one css() selector list, the way
    parse_page took them before it walked per tag name (UTF-8 pages, no headers)."""
    tree = LexborHTMLParser(data)
    head = 'base[href], title, meta[name="robots" i], link[rel][type][href]'
    token = agent.lower() if agent else None
    if token is None:
        selector = head
    elif robotsdirectives.PRODUCT_TOKEN.match(token):
        selector = f'{head}, meta[name="{token}" i]'
    else:
        selector = "base[href], title, meta[name], link[rel][type][href]"
    base_href = title = None
    seen_title = noindex = nofollow = False
    feed_hrefs = []
    for node in tree.css(selector):
        attrs = node.attributes
        if node.tag == "link":
            rel = (attrs.get("rel") or "").lower().split()
            if "alternate" in rel and (attrs.get("type") or "").split(";")[0].strip().lower() in FEED_TYPES:
                feed_hrefs.append(attrs.get("href") or "")
        elif node.tag == "meta":
            name = (attrs.get("name") or "").strip(" \t\n\x0c\r").lower()
            if name == "robots" or name == token:
                ni, nf = robotsdirectives.robots_tokens(attrs.get("content") or "")
                noindex |= ni
                nofollow |= nf
        elif node.tag == "base":
            if base_href is None and not parse_links.in_foreign_content(node):
                base_href = attrs.get("href") or ""
        elif not seen_title:
            seen_title = True
            title = " ".join(node.text().split()) or None
    base_url = url
    if base_href is not None:
        joined = join_url(url, base_href, "utf-8")
        if joined is not None and not joined.startswith(("data:", "javascript:")):
            base_url = joined
    feeds = [u for u in (join_url(base_url, h, "utf-8") for h in feed_hrefs if h) if u]
    return title, noindex, nofollow, base_url, feeds


_HEAD_PIECES = [
    "<base href=/b/>", "<base>", "<base href>", "<svg><base href=/svgbase/></svg>", "<math><mi><base href=/mi/></mi></math>",
    "<base href='javascript:x'>", "<title> T  1 </title>", "<title></title>", "<svg><title>svg title</title></svg>",
    "<meta name=robots content=noindex>", "<meta name=ROBOTS content=nofollow>", "<meta name=' robots' content=noindex>",
    "<meta name=raycrawl content=none>", "<meta name=RayCrawl content=nofollow>", "<meta name content=noindex>",
    "<meta name=\u212a content=noindex>", "<meta name='bad token' content=nofollow>", "<meta name=k content=nofollow>",
    "<meta property=og:title content=x>", "<link rel=alternate type=application/rss+xml href=/feed>",
    "<link rel='Alternate stylesheet' type='application/atom+xml; charset=utf-8' href=/atom>",
    "<link rel=alternate type=application/rss+xml href>", "<link rel=alternate href=/nofeed>",
    "<svg><link rel=alternate type=application/rss+xml xlink:href=/x></svg>", "<link rel type=application/rss+xml href=/e>",
    "<template><meta name=robots content=noindex><title>tt</title><base href=/t/></template>",
    "<noscript><meta name=robots content=nofollow></noscript>", "<p>text", "<div>", "</div>", "<head>", "<body>",
]


@pytest.mark.parametrize("agent", [None, "RayCrawl", "k", "bad token"])
def test_made_up_heads_read_as_one_selector_list_reads_them(monkeypatch: pytest.MonkeyPatch, agent: str | None) -> None:
    fed = _record_parsed_bytes(monkeypatch)
    rng = random.Random(21)
    for k in range(500):
        body = "".join(rng.choice(_HEAD_PIECES) for _ in range(rng.randint(0, 12))).encode()
        url = f"http://ex.com/d/{k}"
        fed.clear()
        page = parse_page(body, url, "text/html", user_agent_token=agent)
        got = (page.title, page.meta_noindex, page.meta_nofollow, page.base_url, page.feeds)
        assert got == _head_reference(fed[0], url, agent), body


# --- the link pass against the selector ----------------------------------------------------


def _links_reference(data: bytes, base_url: str, nofollow: bool, max_links: int) -> tuple[list[tuple], int]:
    """(raw, resolved, nofollow, tag) of the elements css("a[href], area[href]") selects."""
    nodes = LexborHTMLParser(data).css("a[href], area[href]")
    links = []
    for node in nodes[:max_links]:
        attrs = node.attributes
        raw = attrs.get("href")
        if raw is None:
            if "href" not in attrs:
                continue
            raw = ""
        rel = attrs.get("rel")
        link_nofollow = nofollow or bool(rel and "nofollow" in rel.lower().split())
        links.append((raw, join_url(base_url, raw, "utf-8"), link_nofollow, node.tag or "a"))
    return links, max(0, len(nodes) - max_links)


_LINK_PIECES = [
    "<a href=/a>a</a>", "<a href>empty</a>", "<a name=x>no href</a>", "<a href=/n rel='NoFollow noopener'>n</a>",
    "<map><area href=/area alt=''></map>", "<area>", "<svg><a xlink:href=/svg>s</a></svg>", "<svg><a href=/svg2>s</a></svg>",
    "<a xlink:href=/html-xlink>h</a>", "<template><a href=/t>t</a></template>", "<noscript><a href=/ns>n</a></noscript>",
    "<math><mi><a xlink:href=/mi>m</a></mi></math>", "<svg><foreignObject><a xlink:href=/fo href=/fo2>f</a></foreignObject></svg>",
    "<a href='/q?x=1'>q</a>", "<A HREF=/upper>u</A>", "<p>text</p>", "<base href=/b/>", "<meta name=robots content=nofollow>",
]


@pytest.mark.parametrize("max_links", [0, 3, 5000])
def test_made_up_links_are_the_ones_the_selector_finds(monkeypatch: pytest.MonkeyPatch, max_links: int) -> None:
    fed = _record_parsed_bytes(monkeypatch)
    rng = random.Random(22)
    kinds = set()
    for k in range(600):
        body = "".join(rng.choice(_LINK_PIECES) for _ in range(rng.randint(0, 10))).encode()
        fed.clear()
        page = parse_page(body, f"http://ex.com/d/{k}", "text/html", max_links=max_links)
        got = ([tuple(link) for link in page.links], page.links_dropped)
        assert got == _links_reference(fed[0], page.base_url, page.meta_nofollow, max_links), body
        kinds.add((b"<area" in body, b"xlink:href" in body))
    assert len(kinds) == 4  # pages with and without area, with and without xlink:href
