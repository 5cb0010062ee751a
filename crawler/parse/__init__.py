"""Fetched page -> links, robots directives and text, decoded as a browser decodes it.

* :mod:`~crawler.parse.charset`: which encoding a page is in (BOM, HTTP charset, ``<meta>``
  prescan, late ``<meta>``) and decoding with the WHATWG decoders' behaviour;
* :mod:`~crawler.parse.html`: :func:`parse_page` (the lexbor tree, ``<base>``, title,
  robots ``<meta>``, feeds) and :func:`is_html` (Content-Type, sniffing), with its parts:
  :mod:`~crawler.parse.links` (the link elements and their resolution),
  :mod:`~crawler.parse.robotsdirectives` (meta robots / X-Robots-Tag),
  :mod:`~crawler.parse.pagetext` (visible text) and :mod:`~crawler.parse.depthguard`
  (the deep-nesting guard).

Nothing here raises on input from the web (docs/invariants.md #7).
"""

from __future__ import annotations

from crawler.parse.charset import detect_charset, lookup_charset
from crawler.parse.html import Link, ParsedPage, is_html, parse_page

__all__ = ["Link", "ParsedPage", "parse_page", "is_html", "detect_charset", "lookup_charset"]
