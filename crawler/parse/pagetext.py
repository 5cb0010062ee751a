"""A page's visible text: which elements hold none, and whitespace collapsed fast.

crawler.parse.html strips :data:`STRIP_FOR_TEXT` from the tree (after the links are
read) and collapses the body's text with :func:`collapse_ws`.
"""

from __future__ import annotations

import numpy as np

__all__ = ["OTHER_WS", "STRIP_FOR_TEXT", "collapse_ws"]

#: Elements whose content is never visible text.
STRIP_FOR_TEXT = ["script", "style", "noscript", "template", "svg"]

#: Every character str.split() splits on except " " (Py_UNICODE_ISSPACE: none is above
#: U+3000; tests/unit/test_parse_text.py checks the whole code space).
OTHER_WS = "".join(c for c in map(chr, range(0x3001)) if c.isspace() and c != " ")
_ASCII_OTHER_WS = "".join(c for c in OTHER_WS if c < "\x80")


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
    for c in OTHER_WS:
        if c in text:
            return " ".join(text.split())
    return " ".join(text.split()) if "  " in text else text
