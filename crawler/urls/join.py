"""Resolve a link found in a page against the page's base URL, as a browser does.

:func:`join_url` follows the WHATWG URL Standard ("basic URL parser" with a base) where
it differs from RFC 3986 section 5, so its output is the URL a browser would request for
the same ``href`` (tests/unit/test_corpus_links.py checks it against Chromium on real
pages). It does not canonicalize: the host is left as written for
:class:`~crawler.urls.canonical.UrlNormalizer`, which the caller applies next. It runs
once per link of every page; the base is parsed once per page (cached), and an href of
a common shape (no character to encode) is joined by concatenation (``_fast_join``).
"""

from __future__ import annotations

import functools
import re

from crawler.urls.query_encoding import encode_query
from crawler.urls.syntax import (
    BYTE_PCT,
    C0_SET,
    HTTP_SCHEMES,
    backslashes_to_slashes,
    clean,
    match_scheme,
    percent_encode,
    remove_dot_segments,
    split_after_scheme,
)

__all__ = ["join_url"]

# WHATWG percent-encode sets for the path and the fragment (the query has its own
# encoder, which uses the document encoding).
_WHATWG_PATH_TABLE = {ord(c): BYTE_PCT[ord(c)] for c in C0_SET + ' "#<>?`{}'}
_WHATWG_FRAGMENT_TABLE = {ord(c): BYTE_PCT[ord(c)] for c in C0_SET + ' "<>`'}


def _has_host(authority: str) -> bool:
    hostport = authority[authority.rfind("@") + 1 :]
    if hostport[:1] == "[":
        return True  # validated by the normalizer
    return bool(hostport.partition(":")[0])


def _serialize(
    scheme: str, authority: str, path: str, query: str | None, fragment: str | None, encoding: str
) -> str:
    url = scheme + "://" + authority + percent_encode(path, _WHATWG_PATH_TABLE)
    if query is not None:
        url += "?" + encode_query(query, encoding)
    if fragment is not None:
        url += "#" + percent_encode(fragment, _WHATWG_FRAGMENT_TABLE)
    return url


def _absolute(scheme: str, rest: str, encoding: str) -> str | None:
    """``rest`` is everything after ``scheme:`` and its slashes: authority onwards."""
    authority, path, query, fragment = split_after_scheme(rest)
    if not _has_host(authority):
        return None  # WHATWG: a special URL with an empty host is a failure
    path = remove_dot_segments(path or "/")
    return _serialize(scheme, authority, path, query, fragment, encoding)


_MAX_CACHED_BASE = 4096


@functools.lru_cache(maxsize=1024)
def _parse_base(base: str) -> tuple[str, str, str, str | None] | None:
    """(scheme, authority, path, query) of an http(s) base URL. Cached: every link on
    a page is joined against the same base."""
    base = clean(base)
    match = match_scheme(base)
    if match is None:
        return None
    scheme = match.group(1).lower()
    if scheme not in HTTP_SCHEMES:
        return None
    rest = backslashes_to_slashes(base[match.end() :]).lstrip("/")
    authority, path, query, _fragment = split_after_scheme(rest)
    if not _has_host(authority):
        return None
    return scheme, authority, remove_dot_segments(path or "/"), query


def _resolve(base: tuple[str, str, str, str | None], rel: str, encoding: str) -> str | None:
    """RFC 3986 5.2.2 reference resolution with the WHATWG special-scheme leniencies."""
    scheme, authority, base_path, base_query = base
    if rel.startswith("//"):
        return _absolute(scheme, rel.lstrip("/"), encoding)
    fragment = query = None
    i = rel.find("#")
    if i >= 0:
        fragment = rel[i + 1 :]
        rel = rel[:i]
    i = rel.find("?")
    if i >= 0:
        query = rel[i + 1 :]
        rel = rel[:i]
    if rel.startswith("/"):
        path = rel
    elif not rel:
        path = base_path
        if query is None:
            query = base_query
    else:
        path = base_path[: base_path.rfind("/") + 1] + rel
    return _serialize(scheme, authority, remove_dot_segments(path), query, fragment, encoding)


def _join(base: object, href: str, encoding: str) -> str | None:
    href = clean(href)
    if not isinstance(base, str):
        base_parts = None
    elif len(base) <= _MAX_CACHED_BASE:
        base_parts = _parse_base(base)
    else:  # a huge <base href> from a hostile page must not be pinned in the cache
        base_parts = _parse_base.__wrapped__(base)
    match = match_scheme(href)
    if match is not None:
        scheme = match.group(1).lower()
        rest = href[match.end() :]
        if scheme not in HTTP_SCHEMES:
            # mailto:, javascript:, data:, tel:, ftp:, ... are absolute; returned so the
            # caller can count why the link is skipped (the normalizer rejects them).
            return scheme + ":" + rest
        rest = backslashes_to_slashes(rest)
        if base_parts is not None and base_parts[0] == scheme:
            # WHATWG "special relative or authority state": ``http:foo`` on an http page
            # is a relative reference, ``http://x`` is not.
            return _resolve(base_parts, rest, encoding)
        return _absolute(scheme, rest.lstrip("/"), encoding)
    if base_parts is None:
        return None
    return _resolve(base_parts, backslashes_to_slashes(href), encoding)


# --- the fast path -------------------------------------------------------------------
# Most hrefs are written in a form whose path, query and fragment the steps above leave
# as they are: ASCII with no whitespace (clean() keeps it), no backslash, no character
# the path, query or fragment percent-encode set holds. For those the result is a
# concatenation (plus dot-segment removal on the path), which join_url does without the
# general parser. The character sets are RFC 3986's unreserved, sub-delims and ":@/%" (a
# subset of what WHATWG leaves unencoded); the query's drops "'", which WHATWG encodes.
_UNRESERVED_SUB = "A-Za-z0-9" + re.escape("-._~!$&'()*+,;=")
_PATH_OK = _UNRESERVED_SUB + re.escape(":@/%")
_QUERY_OK = _UNRESERVED_SUB.replace("'", "") + re.escape(":@/?%")
_FRAGMENT_OK = _UNRESERVED_SUB + re.escape(":@/?%")
_SEGMENT_OK = _UNRESERVED_SUB + re.escape("@%")  # no ":" (a scheme) and no "/"
_QUERY = rf"\?[{_QUERY_OK}]*"
_FRAGMENT = rf"#[{_FRAGMENT_OK}]*"
_TAIL = rf"(?:{_QUERY})?(?:{_FRAGMENT})?"
# A host and port as written, starting with a host character (so the host is not empty).
_AUTHORITY = r"[A-Za-z0-9\-._~][A-Za-z0-9\-._~:]*"
#: ``http://host/path...`` with the scheme in any case (no dot segment: checked apart).
_FAST_ABSOLUTE = re.compile(rf"(?i:https?)://{_AUTHORITY}/[{_PATH_OK}]*{_TAIL}").fullmatch
#: ``//host/path...``: takes the base's scheme (no dot segment: checked apart).
_FAST_NETWORK = re.compile(rf"//{_AUTHORITY}/[{_PATH_OK}]*{_TAIL}").fullmatch
#: ``/path...``: the base's scheme and authority; groups: path, query and fragment.
_FAST_ROOTED = re.compile(rf"(/(?!/)[{_PATH_OK}]*)({_TAIL})").fullmatch
#: ``path...``: the base's directory; groups as above. No ":" before the first "/" (it
#: would be a scheme).
_FAST_RELATIVE = re.compile(rf"([{_SEGMENT_OK}]+(?:/[{_PATH_OK}]*)?)({_TAIL})").fullmatch
#: ``?query...`` and ``#fragment``: the base's path, and its query for the latter.
_FAST_QUERY = re.compile(rf"{_QUERY}(?:{_FRAGMENT})?").fullmatch
_FAST_FRAGMENT = re.compile(_FRAGMENT).fullmatch
#: ``mailto:...``, ``javascript:...``: any other scheme, printable ASCII after it.
_FAST_OTHER_SCHEME = re.compile(r"([A-Za-z][A-Za-z0-9+\-.]*):[!-~]*").fullmatch
_FAST_BASE_PATH = re.compile(rf"/[{_PATH_OK}]*").fullmatch
_FAST_BASE_QUERY = re.compile(rf"[{_QUERY_OK}]*").fullmatch


# The fast path serves bases up to this length (page URLs are far shorter), so its cache
# holds at most 256 x 5 prefixes of 1 KB whatever pages a crawl meets.
_MAX_FAST_BASE = 1024


@functools.lru_cache(maxsize=256)
def _base_prefixes(base: str) -> tuple[str, str, str | None, str | None, str | None] | None:
    """What the fast path puts before an href of ``base``, by the href's kind:
    ``scheme:`` (network path), ``scheme://authority`` (absolute path), the base's
    directory (relative path), ``scheme://authority/path`` (query only), and that with
    the base's query (fragment only); each None when the base's part would be
    percent-encoded (the general join then decides)."""
    parts = _parse_base(base)
    if parts is None:
        return None
    scheme, authority, path, query = parts
    origin = scheme + "://" + authority
    if not _FAST_BASE_PATH(path):
        return scheme + ":", origin, None, None, None
    directory = path[: path.rfind("/") + 1]
    whole = origin + remove_dot_segments(path)  # as _resolve serializes an empty href
    if query is None:
        itself: str | None = whole
    else:
        itself = whole + "?" + query if _FAST_BASE_QUERY(query) else None
    return scheme + ":", origin, directory, whole, itself


def _fast_join(base: object, href: str) -> str | None:
    """join_url's result for an href of the common shapes above, else None (then the
    general parser decides). tests/unit/test_url_fast_paths.py proves both agree."""
    first = href[:1]
    if first == "/":
        if href[1:2] == "/":
            if "/." in href or "%2" in href or not _FAST_NETWORK(href):
                return None
            kind, match = 0, None
        else:
            match = _FAST_ROOTED(href)
            if match is None:
                return None
            kind = 1
    elif first == "#":
        if not _FAST_FRAGMENT(href):
            return None
        kind, match = 4, None
    elif first == "?":
        if not _FAST_QUERY(href):
            return None
        kind, match = 3, None
    elif not first:
        kind, match = 4, None
    elif _FAST_ABSOLUTE(href):
        if "/." in href or "%2" in href:
            return None
        if href.startswith(("http:", "https:")):
            return href
        colon = href.find(":")
        return href[:colon].lower() + href[colon:]
    else:
        match = _FAST_RELATIVE(href)
        if match is None:
            other = _FAST_OTHER_SCHEME(href)
            if other is None:
                return None
            scheme = other.group(1).lower()
            if scheme == "http" or scheme == "https":
                return None  # "http:x" on an http page is relative: the general join
            return scheme + href[len(scheme) :]
        kind = 2
    if not isinstance(base, str) or len(base) > _MAX_FAST_BASE:
        return None
    prefixes = _base_prefixes(base)
    if prefixes is None:
        return None
    prefix = prefixes[kind]
    if prefix is None:
        return None
    if match is None:
        return prefix + href
    path, tail = match.groups()
    if kind == 2:
        return prefixes[1] + remove_dot_segments(prefix + path) + tail
    return prefix + remove_dot_segments(path) + tail


def join_url(base: str, href: str, encoding: str = "utf-8") -> str | None:
    """Resolve ``href`` found in a page whose base URL is ``base``, as a browser does.

    Follows the WHATWG URL Standard where it differs from RFC 3986: C0 control or
    space stripped from both ends, tab/LF/CR removed anywhere, ``\\`` is ``/`` before the
    query, ``//host`` takes the base's scheme, any number of slashes may follow
    ``http:``, ``..`` above the root is dropped, ``%2e`` counts as a dot segment.
    Non-ASCII in the path is percent-encoded as UTF-8, in the query with the document
    ``encoding`` (a WHATWG label such as ``windows-1251`` or ``shift_jis``; unknown
    labels fall back to UTF-8), characters it cannot represent becoming
    ``%26%23NNNN%3B``. The host is left for :class:`UrlNormalizer` (IDNA, case, port).

    Returns the absolute URL (not normalized, fragment kept), the lowercased-scheme
    href for non-http(s) schemes (``mailto:``, ``javascript:``, ``data:``...), or None
    when the href cannot be resolved (no usable base for a relative href, empty host).
    Never raises.
    """
    if not isinstance(href, str):
        return None
    joined = _fast_join(base, href)
    if joined is not None:
        return joined
    cleaned = clean(href)
    if cleaned is not href:
        # Whitespace around or inside the href: resolving the cleaned href is what the
        # general join does first (clean is idempotent), and it may take the fast path.
        joined = _fast_join(base, cleaned)
        if joined is not None:
            return joined
    return _general_join(base, href, encoding)


def _general_join(base: object, href: str, encoding: str) -> str | None:
    """join_url without its fast path: every step for any href (and the reference the
    fast path is tested against)."""
    try:
        return _join(base, href, encoding)
    except (ValueError, UnicodeError, LookupError):
        # Defensive: _join is written not to raise, but a codec misbehaving on a hostile
        # href must cost only that link (docs/invariants.md #7). The caller counts None.
        return None
