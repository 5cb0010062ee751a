"""A page's followable links: which elements, which base URL, each href resolved.

crawler.parse.html builds the tree and reads the page's ``<base>``; here are the link
record (:class:`Link`), the elements a browser follows (``a[href], area[href]``, found by
:func:`link_elements`), the frozen base URL (:func:`frozen_base`) and the resolution of
every href against it (:func:`resolve_links`).
"""

from __future__ import annotations

from typing import NamedTuple

from selectolax.lexbor import LexborHTMLParser

from crawler.urls import join_url

__all__ = ["Link", "frozen_base", "in_foreign_content", "link_elements", "resolve_links"]


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


_LINKS = "a[href], area[href]"
_REFUSED_BASE_SCHEMES = ("data:", "javascript:")
# An SVG or MathML <base> is not the HTML base element; below these, content is HTML again.
_FOREIGN_ROOTS = frozenset({"svg", "math"})
_HTML_INTEGRATION_POINTS = frozenset({"foreignobject", "desc", "title", "annotation-xml"})

#: The attributes of one link element and its tag name.
LinkElement = tuple[dict[str, str | None], str]


def in_foreign_content(node: object) -> bool:
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


def link_elements(tree: LexborHTMLParser, max_links: int) -> tuple[list[LinkElement], int]:
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


def frozen_base(url: str, base_href: str | None, url_encoding: str) -> str:
    """HTML spec "frozen base URL": the first base element's href, resolved against the
    document URL with the document's encoding; unresolvable (or none) -> the document URL."""
    if base_href is None:
        return url
    joined = join_url(url, base_href, url_encoding)
    # Chromium refuses data: and javascript: base URLs (the document URL stays the
    # base); without this every relative link of such a page would be lost.
    if joined is not None and not joined.startswith(_REFUSED_BASE_SCHEMES):
        return joined
    return url


def resolve_links(elements: list[LinkElement], base_url: str, url_encoding: str, nofollow: bool) -> list[Link]:
    """The :class:`Link` of each element, in order (``nofollow``: the page's robots say so)."""
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
    return links
