"""Fetched page -> links, robots directives and text, decoded as a browser decodes it.

* :mod:`~crawler.parse.charset`: which encoding a page is in (BOM, HTTP charset, ``<meta>``
  prescan, late ``<meta>``) and decoding with the WHATWG decoders' behaviour;
* :mod:`~crawler.parse.html`: :func:`parse_page` (lexbor tree, ``<base>``, links, meta
  robots / X-Robots-Tag, text, deep-nesting guard) and :func:`is_html`.

Nothing here raises on input from the web (docs/invariants.md #7).
"""

from __future__ import annotations

from crawler.parse.charset import detect_charset, lookup_charset
from crawler.parse.html import Link, ParsedPage, is_html, parse_page

__all__ = ["Link", "ParsedPage", "parse_page", "is_html", "detect_charset", "lookup_charset"]
