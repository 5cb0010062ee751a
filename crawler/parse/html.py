"""Page parser: extract from a fetched page the links a crawler follows, robots meta, text.

One call per fetched page (:func:`parse_page`), so this is hot-path code. The heavy work is
done in C by selectolax's lexbor backend (an HTML5-conformant tree builder, so malformed
markup yields the same tree a browser builds); Python only touches the few nodes it needs.
The body is decoded first (:mod:`crawler.parse.charset`), and that encoding also decides
how non-ASCII characters of a link's query are percent-encoded (WHATWG URL "query
state"), so a link is resolved the way a browser would request it.

Bad input from the web never raises out of this module (docs/invariants.md #7): a body
that cannot be parsed yields a :class:`ParsedPage` whose ``error`` says why.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, NamedTuple

import numpy as np
from selectolax.lexbor import LexborHTMLParser

from crawler.content.encodinglabels import REPLACEMENT, UTF16
from crawler.errors import ConfigError
from crawler.freshness.feeds import FEED_TYPES
from crawler.content.maincontent import extract_main
from crawler.parse.charset import ASCII_WS, decode, decoding_codec, detect_encoding
from crawler.urls import join_url

if TYPE_CHECKING:
    from crawler.engine.counters import ShardCounters

log = logging.getLogger(__name__)

__all__ = ["Link", "ParsedPage", "collapse_ws", "parse_page", "is_html"]


class Link(NamedTuple):
    """One followable link of a page (an ``<a href>`` or ``<area href>``), in document order.

    Immutable. A named tuple, not a frozen dataclass: a page has ~50 links, and a frozen
    dataclass's ``__init__`` (one ``object.__setattr__`` per field) cost 0.5 us per link,
    a fifth of the link pass; ``parse_page`` builds these with ``tuple.__new__`` (0.1 us).
    """

    raw: str
    """The href attribute as written (character references decoded by the parser)."""
    resolved: str | None
    """``join_url(base, raw, encoding)``: absolute but not normalized; None if unresolvable.

    ``javascript:``, ``mailto:``, ``data:`` hrefs resolve to themselves; the caller drops
    them by scheme."""
    nofollow: bool
    """``rel`` has the token ``nofollow`` (ASCII case-insensitive), or the page is nofollow."""
    tag: str
    """``"a"`` or ``"area"``."""


@dataclass(slots=True)
class ParsedPage:
    """What the crawler needs from one fetched page."""

    url: str
    """The page URL (after redirects); the fallback base URL."""
    base_url: str
    """The effective base: the first ``<base href>`` resolved against ``url``, else ``url``."""
    is_html: bool
    charset: str
    """Python codec name of the encoding used to decode (``"replacement"`` for the WHATWG
    replacement encoding, which decodes any body to a single U+FFFD)."""
    links: list[Link] = field(default_factory=list)
    """At most ``max_links`` links in document order; duplicates kept (the caller dedups
    after normalization)."""
    meta_nofollow: bool = False
    """Robots meta / X-Robots-Tag says nofollow (or none) for all crawlers or for ours."""
    meta_noindex: bool = False
    text: str = ""
    """Visible body text: no script/style/noscript/template/svg, whitespace collapsed to
    single spaces."""
    main_text: str = ""
    """The main content's text (crawler.content.maincontent: no header, footer, nav, aside or
    similar chrome), what the near-duplicate fingerprint is computed over, so chrome
    that changes per request (render times, request ids) does not hide a copy."""
    title: str | None = None
    error: str | None = None
    """Set when the body could not be parsed at all (the caller records it)."""
    main_text_failed: bool = False
    """Main-content extraction broke on this page's markup and the whole ``text`` stands
    in for ``main_text`` (crawler.content.maincontent; the pipeline counts it)."""
    links_dropped: int = 0
    """Links beyond ``max_links`` that were not returned (counted, not materialized)."""
    degraded: bool = False
    """The markup nested so deep that building the real DOM would cost quadratic time; the
    page was parsed from a flattened copy keeping only a/area/base/meta/title tags. Links
    are still found; ``text`` may include script source."""
    feeds: list[str] = field(default_factory=list)
    """Resolved ``href`` of ``<link rel="alternate">`` elements whose ``type`` is a feed
    (RSS, Atom: crawler.freshness.feeds.FEED_TYPES), in document order."""


# --------------------------------------------------------------------------------------
# Content-Type and sniffing

_HTML_ESSENCES = frozenset({"text/html", "application/xhtml+xml"})
# WHATWG MIME Sniffing: these mean "the server did not say"; sniff as if absent.
_UNKNOWN_ESSENCES = frozenset({"", "unknown/unknown", "application/unknown", "*/*"})
_MIME_TOKEN = re.compile(r"[!#$%&'*+\-.^_`|~0-9A-Za-z]+/[!#$%&'*+\-.^_`|~0-9A-Za-z]+\Z")


def _mime_essence(content_type: str | None) -> str | None:
    """``type/subtype`` lowercased, or None when the header is absent or unparsable."""
    if content_type is None:
        return None
    essence = content_type.split(";", 1)[0].strip(ASCII_WS).lower()
    if essence in _UNKNOWN_ESSENCES or not _MIME_TOKEN.match(essence):
        return None
    return essence


# "Rules for identifying an unknown MIME type", HTML patterns: each is followed by a
# tag-terminating byte (space or '>'; we also accept the other ASCII whitespace).
_HTML_SNIFF = re.compile(
    rb"<(?:!doctype html|html|head|script|iframe|h1|div|font|table|a|style|title|b|body|br|p|!--)"
    rb"[ >\t\n\r\x0c]"
)


def _sniff_html(head: bytes) -> bool:
    """HTML signature after whitespace, an XML declaration and comments.

    Beyond the spec's table (which calls ``<?xml`` XML and needs a space or '>' after
    ``<!--``), an XML prolog or leading comments followed by an HTML tag count as HTML:
    XHTML pages and IE conditional comments start that way, and the crawler must see
    their links.
    """
    lower = head.lower()
    for _ in range(16):  # a bounded prolog: bytes beyond the window are not sniffed
        lower = lower.lstrip(b" \t\n\r\x0c")
        if lower.startswith(b"<?xml"):
            end = lower.find(b"?>")
            if end < 0:
                return False
            lower = lower[end + 2 :]
        elif lower.startswith(b"<!--"):
            end = lower.find(b"-->", 2)
            if end < 0:
                return True  # an unterminated comment still means HTML (the spec's rule)
            lower = lower[end + 3 :]
            if not lower.strip(b" \t\n\r\x0c"):
                return True
        else:
            break
    return _HTML_SNIFF.match(lower) is not None


def is_html(content_type: str | None, body: bytes, counters: ShardCounters | None = None) -> bool:
    """True if the response is an HTML document the crawler should parse for links.

    The Content-Type decides (``text/html``, ``application/xhtml+xml``); when it is absent,
    empty, unparsable or one of the "unknown" types, the first bytes are sniffed the way
    browsers do (WHATWG MIME Sniffing: skip a BOM and whitespace, then look for an HTML
    tag such as ``<!DOCTYPE html``, ``<html``, ``<head``, ``<body``, ``<p``, ``<!--``).
    If sniffing breaks on the body, the answer is "not HTML" and ``counters`` (the
    pipeline's) gets one ``html_sniff_failed``.
    """
    try:
        essence = _mime_essence(content_type)
        if essence is not None:
            return essence in _HTML_ESSENCES
        head = body[:1024]
        if head[:3] == b"\xef\xbb\xbf":
            head = head[3:]
        elif head[:2] in (b"\xff\xfe", b"\xfe\xff"):
            codec = "utf-16-le" if head[:2] == b"\xff\xfe" else "utf-16-be"
            head = head[2:].decode(codec, "replace").encode("utf-8", "replace")
        return _sniff_html(head)
    except Exception as exc:  # noqa: BLE001 - web input must not raise (docs/invariants.md #7); "not HTML" is safe
        log.debug("HTML sniffing failed (%r): treated as not HTML", exc)
        if counters is not None:
            counters.html_sniff_failed += 1
        return False


# --------------------------------------------------------------------------------------
# Robots directives (meta robots and X-Robots-Tag)

# Directives whose syntax is "name: value"; any other "word:" prefix names a user agent.
_VALUED_DIRECTIVES = frozenset({"unavailable_after", "max-snippet", "max-image-preview", "max-video-preview"})
_PRODUCT_TOKEN = re.compile(r"[A-Za-z0-9_-]+\Z")


def _robots_tokens(content: str) -> tuple[bool, bool]:
    """(noindex, nofollow) from a comma/space separated directive list."""
    tokens = content.lower().replace(",", " ").split()
    none = "none" in tokens
    return none or "noindex" in tokens, none or "nofollow" in tokens


def _header_values(headers: Mapping[str, str], name: str) -> list[str]:
    """All values of a header, case-insensitively (works for dicts and aiohttp multidicts)."""
    getall = getattr(headers, "getall", None)
    if getall is not None:
        return [str(v) for v in getall(name, ())]
    lname = name.lower()
    return [str(v) for k, v in headers.items() if isinstance(k, str) and k.lower() == lname]


def _x_robots_tag(values: list[str], agent_token: str | None) -> tuple[bool, bool]:
    """(noindex, nofollow) from X-Robots-Tag header values.

    A value is a comma-separated list; ``agent: directives`` starts a group that applies
    only to that crawler and lasts to the end of the header line (Google's documented
    form, e.g. ``googlebot: noindex, nofollow``).
    """
    noindex = nofollow = False
    for value in values:
        agent: str | None = None
        for part in value.split(","):
            name, colon, rest = part.partition(":")
            name = name.strip().lower()
            if colon and name and " " not in name and name not in _VALUED_DIRECTIVES:
                agent, part = name, rest
            if agent is not None and agent != agent_token:
                continue
            ni, nf = _robots_tokens(part)
            noindex |= ni
            nofollow |= nf
    return noindex, nofollow


# --------------------------------------------------------------------------------------
# Pathological nesting guard
#
# The HTML tree builder walks the stack of open elements for many tags ("has a p element
# in button scope", "any other end tag"), so N tags at nesting depth D cost O(N * D):
# 100k unclosed <div> (500 KB) take ~20 s in lexbor. Browsers cap the depth (Blink at
# 512); lexbor does not. A page with few tags cannot be deep, so only bodies with many
# '<' pay for a depth estimate, and a page over budget is parsed from a flattened copy.

_GUARD_MIN_TAGS = 7000  # below this, N * D <= N**2 stays under the budget
_STACK_WORK_BUDGET = 50_000_000  # ~0.1 s of tree-builder stack walking
# Void elements never open a level; the others are closed implicitly by their next
# sibling (<a> by the adoption agency algorithm), so they do not nest deep in practice.
_NO_DEPTH = frozenset(
    b"area base br col embed hr img input link meta param source track wbr keygen frame "
    b"basefont bgsound image p li dd dt td th tr option optgroup rb rp rt rtc tbody thead "
    b"tfoot colgroup caption a".split()
)
_NO_DEPTH_END = frozenset(b"/" + name for name in _NO_DEPTH)
# Start and end tag names ("div", "/div"); a name must end like a tag, so "<a<a<a..."
# (one giant tag name to the tree builder) costs nothing here either.
_TAG_SCAN = re.compile(rb"<(/?[A-Za-z][A-Za-z0-9]*)(?=[ \t\n\x0c\r/>])")
# Every tag except the ones parse_page reads; "[^<>]*" keeps each match local, so an
# unterminated tag cannot make the regex rescan the rest of the body (no quadratic case).
_FLATTEN = re.compile(
    rb"</?(?!(?:a|area|base|meta|title)[ \t\n\x0c\r/>])[A-Za-z][^<>]*>?", re.IGNORECASE
)


def _too_deep(data: bytes) -> bool:
    """True when building the DOM of ``data`` could exceed the stack-walk budget."""
    if len(data) < 3 * _GUARD_MIN_TAGS:  # a tag takes at least 3 bytes ("<b>")
        return False
    # numpy counts 3x faster than bytes.count, and this runs for every larger page.
    n_tags = int(np.count_nonzero(np.frombuffer(data, dtype=np.uint8) == 0x3C))
    if n_tags < _GUARD_MIN_TAGS:
        return False
    depth = deepest = 0
    no_depth, no_depth_end = _NO_DEPTH, _NO_DEPTH_END
    for name in _TAG_SCAN.findall(data):
        name = name.lower()
        if name[0] == 0x2F:  # '/'
            if name not in no_depth_end:
                depth -= depth > 0
        elif name not in no_depth:
            depth += 1
            if depth > deepest:
                deepest = depth
    return deepest * n_tags > _STACK_WORK_BUDGET


# --------------------------------------------------------------------------------------
# parse_page

_LINKS = "a[href], area[href]"
_REFUSED_BASE_SCHEMES = ("data:", "javascript:")
# An SVG or MathML <base> is not the HTML base element; below these, content is HTML again.
_FOREIGN_ROOTS = frozenset({"svg", "math"})
_HTML_INTEGRATION_POINTS = frozenset({"foreignobject", "desc", "title", "annotation-xml"})


def _in_foreign_content(node: object) -> bool:
    """True when ``node`` sits in SVG or MathML (its nearest foreign root comes before any
    HTML integration point on the way up)."""
    parent = getattr(node, "parent", None)
    while parent is not None:
        tag = (parent.tag or "").lower()
        if tag in _FOREIGN_ROOTS:
            return True
        if tag in _HTML_INTEGRATION_POINTS:
            return False
        parent = parent.parent
    return False


_STRIP_FOR_TEXT = ["script", "style", "noscript", "template", "svg"]


# Every character str.split() splits on except " " (Py_UNICODE_ISSPACE: none is above
# U+3000; tests/unit/test_parse_text.py checks the whole code space).
_OTHER_WS = "".join(c for c in map(chr, range(0x3001)) if c.isspace() and c != " ")
_ASCII_OTHER_WS = "".join(c for c in _OTHER_WS if c < "\x80")


def collapse_ws(text: str) -> str:
    """``" ".join(text.split())``, without building the word list when ``text`` is
    collapsed already (no leading, trailing or double space, no other whitespace).

    Splitting and joining a page's text costs ~5 ns per character (a str per word); the
    checks cost a few C scans, and text taken with ``strip=True`` passes them on pages
    whose text nodes hold no line breaks. Anything else takes the split path, so the
    result is always exactly ``" ".join(text.split())``.
    """
    if not text or text[0] == " " or text[-1] == " ":
        return " ".join(text.split())
    if text.isascii():
        for c in _ASCII_OTHER_WS:
            if c in text:
                return " ".join(text.split())
        # "  " in text scans at ~1.4 ns per character (spaces are frequent, each one a
        # candidate match); numpy finds adjacent spaces ~6x faster.
        spaces = np.frombuffer(text.encode("ascii"), dtype=np.uint8) == 0x20
        if (spaces[1:] & spaces[:-1]).any():
            return " ".join(text.split())
        return text
    for c in _OTHER_WS:
        if c in text:
            return " ".join(text.split())
    return " ".join(text.split()) if "  " in text else text


def _link_elements(tree: LexborHTMLParser, max_links: int) -> tuple[list[tuple[dict[str, str | None], str]], int]:
    """(attributes, tag) of the first ``max_links`` elements ``a[href], area[href]``
    selects, in document order, and how many more there are.

    A page without ``<area>`` (nearly all) has its links found by lexbor's C walk for
    one tag name, ~half the instructions of the selector engine, and the attributes read
    here are the ones the link pass reads anyway. An ``<a>`` with an ``xlink:href`` but
    no ``href`` leaves it to the selector: ``[href]`` matches that attribute in SVG
    (where the parser puts it in the XLink namespace) but not in HTML.
    """
    if not tree.tags("area"):
        found: list[dict[str, str | None]] = []
        for node in tree.tags("a"):
            attrs = node.attributes
            if "href" in attrs:
                found.append(attrs)
            elif "xlink:href" in attrs:
                break
        else:
            return [(attrs, "a") for attrs in found[:max_links]], max(0, len(found) - max_links)
    nodes = tree.css(_LINKS)
    return [(node.attributes, node.tag or "a") for node in nodes[:max_links]], max(0, len(nodes) - max_links)


def _empty(url: str, html: bool, charset: str, **kw: object) -> ParsedPage:
    return ParsedPage(url=url, base_url=url, is_html=html, charset=charset, **kw)  # type: ignore[arg-type]


def parse_page(
    body: bytes,
    url: str,
    content_type: str | None = None,
    headers: Mapping[str, str] | None = None,
    *,
    user_agent_token: str | None = None,
    max_links: int = 5000,
) -> ParsedPage:
    """Decode and parse one fetched page; never raises on web input.

    ``content_type`` falls back to the Content-Type in ``headers``. ``user_agent_token``
    (the crawler's robots product token) makes ``<meta name=TOKEN>`` and ``TOKEN:``
    X-Robots-Tag groups apply. At most ``max_links`` links are returned; the rest are
    counted in ``links_dropped``. Raises :class:`ConfigError` only for a negative
    ``max_links`` (a programming/config error, not web input).
    """
    if max_links < 0:
        raise ConfigError(f"max_links must be >= 0, got {max_links}")
    charset = "utf-8"
    html = False
    try:
        if content_type is None and headers:
            ct = _header_values(headers, "content-type")
            content_type = ct[0] if ct else None
        noindex = nofollow = False
        if headers:
            xrt = _header_values(headers, "x-robots-tag")
            if xrt:
                token = user_agent_token.lower() if user_agent_token else None
                noindex, nofollow = _x_robots_tag(xrt, token)
        html = is_html(content_type, body)
        encoding, skip = detect_encoding(body, content_type)
        charset = decoding_codec(encoding)
        if not html:
            return _empty(url, False, charset, meta_noindex=noindex, meta_nofollow=nofollow)
        return _parse_html(body, url, encoding, skip, noindex, nofollow, user_agent_token, max_links)
    except Exception as exc:  # noqa: BLE001 - docs/invariants.md #7: web input costs one page, never the worker
        return _empty(url, html, charset, error=f"{type(exc).__name__}: {exc}"[:500])


def _parse_html(
    body: bytes,
    url: str,
    encoding: str,
    skip: int,
    noindex: bool,
    nofollow: bool,
    user_agent_token: str | None,
    max_links: int,
) -> ParsedPage:
    # lexbor parses bytes as UTF-8 (invalid sequences -> U+FFFD, as WHATWG decodes), so
    # UTF-8 pages go in undecoded; others are transcoded once. lexbor does not strip a
    # BOM itself (it would end up as text and push <head> content into <body>).
    charset = decoding_codec(encoding)
    if charset == "utf-8":
        data = body[skip:] if skip else body
    elif charset == REPLACEMENT:
        data = "\ufffd".encode() if body else b""
    else:
        data = decode(body[skip:] if skip else body, charset).encode("utf-8", "replace")
    # WHATWG URL: queries of UTF-16 / replacement documents are encoded as UTF-8; GBK
    # pages encode them with GBK although they decode with gb18030.
    url_encoding = "utf-8" if charset in UTF16 or charset == REPLACEMENT else encoding

    degraded = _too_deep(data)
    if degraded:
        data = _FLATTEN.sub(b" ", data)
    tree = LexborHTMLParser(data)

    # One C walk per element name (lexbor's elements-by-tag-name) rather than one css()
    # selector list: the selector engine tests every element against each selector of
    # the list (3x the instructions on the bench pages). The attribute tests the
    # selectors made ("base[href]", "link[rel][type][href]") are made here.
    base_href: str | None = None
    for node in tree.tags("base"):
        attrs = node.attributes
        # The frozen base URL: the first HTML base element with an href.
        if "href" in attrs and not _in_foreign_content(node):
            base_href = attrs["href"] or ""
            break
    titles = tree.tags("title")  # document.title: the first <title> in tree order
    title = (" ".join(titles[0].text().split()) or None) if titles else None
    # Robots meta: name="robots" for everyone, name=TOKEN for us. A product token is
    # compared as [name="TOKEN" i] would: the whole value, ASCII case-insensitively; any
    # other token (never a product token) with the value stripped and lowercased.
    token = user_agent_token.lower() if user_agent_token else None
    exact = token is None or _PRODUCT_TOKEN.match(token) is not None
    for node in tree.tags("meta"):
        attrs = node.attributes
        name = attrs.get("name")
        if not name:
            continue
        name = (name.lower() if name.isascii() else "") if exact else name.strip(ASCII_WS).lower()
        if name == "robots" or name == token:
            ni, nf = _robots_tokens(attrs.get("content") or "")
            noindex |= ni
            nofollow |= nf
    feed_hrefs: list[str] = []
    for node in tree.tags("link"):
        # <link rel="alternate" type="application/rss+xml" href>: the page's feeds.
        attrs = node.attributes
        if "rel" in attrs and "type" in attrs and "href" in attrs:
            rel = (attrs["rel"] or "").lower().split()
            if "alternate" in rel and (attrs["type"] or "").split(";")[0].strip().lower() in FEED_TYPES:
                feed_hrefs.append(attrs["href"] or "")

    # HTML spec "frozen base URL": the first base element with an href, resolved against
    # the document URL with the document's encoding; unresolvable -> the document URL.
    base_url = url
    if base_href is not None:
        joined = join_url(url, base_href, url_encoding)
        # Chromium refuses data: and javascript: base URLs (the document URL stays the
        # base); without this every relative link of such a page would be lost.
        if joined is not None and not joined.startswith(_REFUSED_BASE_SCHEMES):
            base_url = joined

    feeds = [u for u in (join_url(base_url, h, url_encoding) for h in feed_hrefs if h) if u]

    elements, dropped = _link_elements(tree, max_links)
    links: list[Link] = []
    append = links.append
    new_link = tuple.__new__  # Link(...) without the generated __new__'s Python frame
    cache: dict[str, str | None] = {}  # pages repeat hrefs (nav, pagination)
    for attrs, tag in elements:
        raw = attrs.get("href")
        if raw is None:
            if "href" not in attrs:
                continue  # only an SVG xlink:href matched [href]; a[href] skips it in a browser
            raw = ""  # <a href> with no value: the document itself
        if raw in cache:
            resolved = cache[raw]
        else:
            resolved = cache[raw] = join_url(base_url, raw, url_encoding)
        link_nofollow = nofollow
        if not nofollow:
            rel = attrs.get("rel")
            if rel and "nofollow" in rel.lower().split():
                link_nofollow = True
        append(new_link(Link, (raw, resolved, link_nofollow, tag)))
    del elements

    text = main = ""
    main_failed = False
    bodyn = tree.body
    if bodyn is not None:
        # After link extraction: stripping removes <noscript>/<svg> links too.
        tree.strip_tags(_STRIP_FOR_TEXT)
        # Text nodes stripped and joined by one space: the same words as the raw text, and
        # usually collapsed already; the main-content pass reuses it when the whole body is
        # the main content (no second walk).
        node_text = bodyn.text(separator=" ", strip=True, skip_empty=True)
        text = collapse_ws(node_text)
        if degraded:
            main = text
        else:
            extracted = extract_main(tree, text, node_text)
            main, main_failed = extracted.text, extracted.error is not None

    return ParsedPage(
        url=url,
        base_url=base_url,
        is_html=True,
        charset=charset,
        links=links,
        meta_nofollow=nofollow,
        meta_noindex=noindex,
        text=text,
        main_text=main,
        main_text_failed=main_failed,
        title=title,
        links_dropped=dropped,
        degraded=degraded,
        feeds=feeds,
    )
