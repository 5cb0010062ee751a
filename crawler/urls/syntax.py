"""String-level URL syntax shared by the normalizer, the link joiner and seed diagnostics.

Input preprocessing as a browser does it (WHATWG URL Standard, "basic URL parser"),
splitting a URL into its parts, dot-segment removal (RFC 3986 section 5.2.4) and the
percent-encoding primitives. Pure functions on ``str``; none of them raises.
"""

from __future__ import annotations

import re

__all__ = [
    "HTTP_SCHEMES",
    "match_scheme",
    "sub_non_ascii",
    "BYTE_PCT",
    "C0_SET",
    "clean",
    "backslashes_to_slashes",
    "split_after_scheme",
    "remove_dot_segments",
    "utf8_pct",
    "percent_encode",
]

#: The schemes the crawler fetches; WHATWG calls them "special" (with ws, ftp, file).
HTTP_SCHEMES = ("http", "https")
_NON_ASCII = re.compile(r"[^\x00-\x7f]+")
# Regexes other modules use are exported as bound methods: ``IMPORTED.match(x)`` compiles
# to LOAD_ATTR, which allocates a bound method per call (CPython 3.11 treats imported
# names as modules), where ``match_scheme(x)`` does not; join_url calls it per link.
#: ``match_scheme(s)``: RFC 3986 3.1 scheme and its colon at the start of ``s``, or None.
match_scheme = re.compile(r"([A-Za-z][A-Za-z0-9+\-.]*):").match
#: ``sub_non_ascii(repl, s)``: ``re.sub`` over each run of non-ASCII characters of ``s``.
sub_non_ascii = _NON_ASCII.sub

# WHATWG "C0 control or space": stripped from both ends of any URL string.
_C0_SPACE = "".join(chr(i) for i in range(0x21))
# WHATWG: ASCII tab and newline are removed from anywhere in the input.
_DROP_TAB_NL = {0x09: None, 0x0A: None, 0x0D: None}
_SURROGATES = re.compile("[\ud800-\udfff]")

_HEX = "0123456789ABCDEF"
#: Byte value -> its ``%XX`` triplet (uppercase hex, RFC 3986 2.1).
BYTE_PCT = tuple("%" + _HEX[b >> 4] + _HEX[b & 15] for b in range(256))
#: WHATWG "C0 control percent-encode set": the base of every other set.
C0_SET = "".join(chr(i) for i in range(0x20)) + "\x7f"


def clean(s: str) -> str:
    """WHATWG input preprocessing, shared by both parsers.

    Strip leading/trailing C0 control or space, remove tab/LF/CR anywhere, and replace
    lone surrogates (which cannot be UTF-8 encoded) with U+FFFD like a browser does.
    """
    s = s.strip(_C0_SPACE)
    if "\t" in s or "\n" in s or "\r" in s:
        s = s.translate(_DROP_TAB_NL)
    if not s.isascii() and _SURROGATES.search(s):
        s = _SURROGATES.sub("\ufffd", s)
    return s


def backslashes_to_slashes(s: str) -> str:
    """WHATWG: in http(s) URLs a backslash before the query acts as a slash."""
    if "\\" not in s:
        return s
    end = len(s)
    for mark in "?#":
        i = s.find(mark)
        if 0 <= i < end:
            end = i
    return s[:end].replace("\\", "/") + s[end:]


def split_after_scheme(rest: str) -> tuple[str, str, str | None, str | None]:
    """Split ``authority/path?query#fragment`` (leading slashes already removed) into
    (authority, path, query, fragment); an absent query or fragment is None."""
    fragment = query = None
    i = rest.find("#")
    if i >= 0:
        fragment = rest[i + 1 :]
        rest = rest[:i]
    i = rest.find("?")
    if i >= 0:
        query = rest[i + 1 :]
        rest = rest[:i]
    i = rest.find("/")
    if i >= 0:
        return rest[:i], rest[i:], query, fragment
    return rest, "", query, fragment


_SINGLE_DOTS = frozenset((".", "%2e", "%2E"))
_DOUBLE_DOTS = frozenset(a + b for a in (".", "%2e", "%2E") for b in (".", "%2e", "%2E"))


def remove_dot_segments(path: str) -> str:
    """RFC 3986 5.2.4 remove_dot_segments for an absolute path (starts with "/").

    Written per segment as in the WHATWG path state, which also counts ``%2e`` as a dot
    and gives the same result as the RFC algorithm otherwise: ``..`` above the root is
    dropped, and a final ``.`` or ``..`` leaves a trailing slash.
    """
    if "/." not in path and "%2" not in path:
        return path
    segments = path.split("/")[1:]
    out: list[str] = []
    last = len(segments) - 1
    for i, seg in enumerate(segments):
        if seg in _DOUBLE_DOTS:
            if out:
                out.pop()
            if i == last:
                out.append("")
        elif seg in _SINGLE_DOTS:
            if i == last:
                out.append("")
        else:
            out.append(seg)
    return "/" + "/".join(out)


def utf8_pct(match: re.Match[str]) -> str:
    """``re.sub`` callback: the matched text as percent-encoded UTF-8 bytes."""
    return "".join(map(BYTE_PCT.__getitem__, match.group().encode("utf-8")))


def percent_encode(s: str, table: dict[int, str]) -> str:
    """Percent-encode the ASCII chars ``table`` names and all non-ASCII as UTF-8."""
    s = s.translate(table)
    if not s.isascii():
        s = _NON_ASCII.sub(utf8_pct, s)
    return s
