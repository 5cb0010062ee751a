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
from typing import TYPE_CHECKING

from selectolax.lexbor import LexborHTMLParser

from crawler.urls.encodinglabels import REPLACEMENT, UTF16
from crawler.content.maincontent import extract_main
from crawler.errors import ConfigError
from crawler.parse.feeds import FEED_TYPES
from crawler.parse.charset import ASCII_WS, decode, decoding_codec, detect_encoding

# The page's parts live in their own modules (links, robots directives, text, the depth
# guard); the names below stay readable here, under the names they had in this module.
from crawler.parse.depthguard import FLATTEN as _FLATTEN
from crawler.parse.depthguard import too_deep as _too_deep
from crawler.parse.links import Link, frozen_base, resolve_links
from crawler.parse.links import in_foreign_content as _in_foreign_content
from crawler.parse.links import link_elements as _link_elements
from crawler.parse.pagetext import STRIP_FOR_TEXT as _STRIP_FOR_TEXT
from crawler.parse.pagetext import collapse_ws
from crawler.parse.robotsdirectives import PRODUCT_TOKEN as _PRODUCT_TOKEN
from crawler.parse.robotsdirectives import header_values as _header_values
from crawler.parse.robotsdirectives import robots_tokens as _robots_tokens
from crawler.parse.robotsdirectives import x_robots_tag as _x_robots_tag
from crawler.urls import join_url

if TYPE_CHECKING:
    from crawler.counters import ShardCounters

log = logging.getLogger(__name__)

__all__ = ["Link", "ParsedPage", "collapse_ws", "parse_page", "is_html"]


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
    (RSS, Atom: crawler.parse.feeds.FEED_TYPES), in document order."""


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
# parse_page


def _empty(
    url: str, html: bool, charset: str, *, meta_noindex: bool = False, meta_nofollow: bool = False, error: str | None = None
) -> ParsedPage:
    return ParsedPage(
        url=url, base_url=url, is_html=html, charset=charset, meta_noindex=meta_noindex, meta_nofollow=meta_nofollow, error=error
    )


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

    base_url = frozen_base(url, base_href, url_encoding)
    feeds = [u for u in (join_url(base_url, h, url_encoding) for h in feed_hrefs if h) if u]

    elements, dropped = _link_elements(tree, max_links)
    links = resolve_links(elements, base_url, url_encoding, nofollow)
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
