"""The canonical spelling of a URL: what the seen-set, the frontier and the storage key on.

:class:`UrlNormalizer` follows RFC 3986 section 6.2.2 (syntax-based normalization) plus a
few crawler-specific, documented choices (tracking parameters, userinfo, empty query).
Its output is always a valid RFC 3986 URI with an ``http``/``https`` scheme and a host,
and ``normalize(normalize(u)) == normalize(u)``, so one page is fetched once however a
link spells it (docs/invariants.md #3). It runs once per discovered link: the common
case (an already-canonical URL) takes a fast path that only checks.
"""

from __future__ import annotations

import hashlib

import functools
import re
from collections.abc import Iterable

from crawler.errors import ConfigError
from crawler.urls.hosts import ipv6_literal, normalize_host, port_number
from crawler.urls.syntax import BYTE_PCT, backslashes_to_slashes, clean, percent_encode, remove_dot_segments

__all__ = ["DEFAULT_TRACKING_PARAMS", "UrlNormalizer", "normalize", "DEFAULT_NORMALIZER"]

#: Query parameters that identify a click, a campaign or a session rather than a
#: resource; two URLs that differ only in these fetch the same page, so they are
#: removed from the canonical form. Names compare case-insensitively; an entry ending
#: in ``*`` is a prefix. Deliberately absent: generic names such as ``ref``, ``source``,
#: ``sid`` or ``spm`` (Alibaba's tracker, but short and generic enough that some sites
#: use it for content), because dropping a parameter that selects content would merge
#: distinct pages.
DEFAULT_TRACKING_PARAMS: tuple[str, ...] = (
    "utm_*",  # Google Analytics campaign tags (utm_source, utm_medium, utm_campaign, ...)
    "gclid", "gclsrc", "dclid", "gbraid", "wbraid",  # Google Ads / DoubleClick click ids
    "_ga", "_gl",  # Google Analytics cross-domain linker
    "fbclid",  # Facebook
    "msclkid",  # Microsoft Advertising
    "yclid", "ysclid",  # Yandex
    "twclid",  # X / Twitter
    "ttclid",  # TikTok
    "li_fat_id",  # LinkedIn
    "igshid", "igsh",  # Instagram share ids
    "mc_cid", "mc_eid",  # Mailchimp
    "_hsenc", "_hsmi", "__hssc", "__hstc", "__hsfp", "hsctatracking",  # HubSpot
    "mkt_tok",  # Marketo
    "oly_anon_id", "oly_enc_id",  # Omeda
    "vero_id", "vero_conv",  # Vero
    "rb_clickid",  # Rakuten
    "s_cid",  # Adobe Analytics
    "wickedid",  # Wicked Reports
    "_openstat",  # Openstat
    # Session ids in the query make one page look like endless distinct URLs (a classic
    # spider trap); the server hands out a new session when they are absent.
    "phpsessid", "jsessionid",
)

_DEFAULT_PORTS = {"http": 80, "https": 443}

# --- percent-encoding (RFC 3986 sections 2 and 6.2.2) -------------------------------

_UNRESERVED = frozenset(
    "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-._~"
)  # RFC 3986 section 2.3
_SUB_DELIMS = "!$&'()*+,;="  # RFC 3986 section 2.2


def _translate_table(keep: str) -> dict[int, str]:
    """str.translate table that percent-encodes every ASCII char not in ``keep``."""
    return {i: BYTE_PCT[i] for i in range(128) if chr(i) not in keep}


_ALNUM_UNRES = "".join(sorted(_UNRESERVED))
# RFC 3986 3.3: pchar = unreserved / pct-encoded / sub-delims / ":" / "@"; path adds "/".
# "%" is kept here: a triplet is validated by _pct_normalize, not by the table.
_RFC_PATH_KEEP = _ALNUM_UNRES + _SUB_DELIMS + ":@/%"
# RFC 3986 3.4: query = *( pchar / "/" / "?" ). The apostrophe is encoded although RFC
# 3986 allows it, because browsers encode it in http(s) queries (WHATWG "special-query
# percent-encode set"); keeping both spellings would split one link in two.
_RFC_QUERY_KEEP = (_ALNUM_UNRES + _SUB_DELIMS + ":@/?%").replace("'", "")
_RFC_PATH_TABLE = _translate_table(_RFC_PATH_KEEP)
_RFC_QUERY_TABLE = _translate_table(_RFC_QUERY_KEEP)
_PATH_IS_CANONICAL = re.compile("[%s]*" % re.escape(_RFC_PATH_KEEP.replace("%", ""))).fullmatch
_QUERY_IS_CANONICAL = re.compile("[%s]*" % re.escape(_RFC_QUERY_KEEP.replace("%", ""))).fullmatch
# The shape UrlNormalizer.__call__ takes its fast path on: a lowercase http(s) scheme
# and "//"; the authority as written (group 1 with the scheme; no userinfo, brackets,
# backslash, C0, space or lone surrogate); a path (group 2) and a query (group 3) of
# characters that need no encoding (escapes are checked later); then nothing or a
# fragment, of anything.
_SIMPLE = re.compile(
    r"(https?://[^/?#@\[\]\\\x00-\x20\ud800-\udfff]+)"
    r"(/[%s]*)?" % re.escape(_RFC_PATH_KEEP)
    + r"(?:\?([%s]*))?" % re.escape(_RFC_QUERY_KEEP)
    + r"(?:#.*)?",
    re.DOTALL,
).fullmatch
_MISSING = object()
# Origins remembered per normalizer (cleared when full), and the longest authority kept.
_MAX_ORIGINS = 16_384
_MAX_CACHED_ORIGIN = 300


def _build_pct_map() -> dict[str, str]:
    """Map every two-hex-digit suffix of a '%' to its canonical replacement.

    RFC 3986 6.2.2.1: hex digits are uppercase. 6.2.2.2: percent-encoded unreserved
    characters are decoded. Everything else (notably %2F and the other reserved
    delimiters) stays encoded, because decoding it would change the URL's meaning.
    """
    table: dict[str, str] = {}
    digits = "0123456789abcdefABCDEF"
    for a in digits:
        for b in digits:
            ch = chr(int(a + b, 16))
            table[a + b] = ch if ch in _UNRESERVED else "%" + (a + b).upper()
    return table


_PCT_MAP = _build_pct_map()


def _pct_normalize(s: str) -> str:
    """Canonicalize the percent-escapes of ``s`` (see :func:`_build_pct_map`).

    A ``%`` not followed by two hex digits is encoded as ``%25``: RFC 3986 2.4 allows
    no other spelling for a literal percent sign, and leaving it bare would make the
    normalization non-idempotent (``%4%31`` would decode to ``%41`` and then to ``A``).
    """
    parts = s.split("%")
    out = [parts[0]]
    get = _PCT_MAP.get
    for part in parts[1:]:
        repl = get(part[:2])
        if repl is None:
            out.append("%25")
            out.append(part)
        else:
            out.append(repl)
            out.append(part[2:])
    return "".join(out)


def _param_sort_key(param: str) -> tuple[str, str]:
    name, _, value = param.partition("=")
    return name, value


# --- the normalizer -----------------------------------------------------------------


class UrlNormalizer:
    """Turn an absolute URL into its canonical spelling, or None if it is unusable.

    Rules, in order (RFC 3986 section 6.2.2 unless said otherwise):

    * Input cleanup as a browser does (WHATWG): strip leading/trailing C0 control or
      space, remove tab/LF/CR anywhere, backslash before the query counts as slash, and
      slashes after ``http:`` are optional (``http:example.com``, ``http:///x.com``).
    * Scheme lowercased; only ``http`` and ``https`` are accepted.
    * Userinfo is dropped: a crawler does not authenticate, ``http://u:p@h/`` and
      ``http://h/`` fetch the same public resource, and credentials must never reach
      the frontier, the logs or the output dataset.
    * Host: percent-decoded, lowercased, non-ASCII hosts IDNA-encoded (UTS #46, as
      browsers; failure -> None), one trailing dot removed, checked against RFC 3986
      reg-name characters (so ``a[b].com`` -> None). WHATWG IPv4 forms (``0x7f.1``)
      become dotted decimal; IPv6 literals keep their brackets, in RFC 5952 form.
    * Port: must be ASCII digits <= 65535 (else None); leading zeros dropped; an empty
      or default port (80 for http, 443 for https) is removed (RFC 3986 6.2.3).
    * Path: empty -> ``/``; characters RFC 3986 does not allow (space, ``"<>`` ...,
      non-ASCII as UTF-8) percent-encoded; escapes uppercased; escapes of unreserved
      characters (``ALPHA DIGIT - . _ ~``) decoded, all others (``%2F``...) kept;
      a bare ``%`` becomes ``%25``; dot segments removed (RFC 3986 5.2.4). A trailing
      slash is left as it is: ``/a`` and ``/a/`` are different resources to a server.
    * Query: same encoding rules (plus ``'``, which browsers encode); empty parameters
      (``&&``) and tracking parameters removed, others kept in order with duplicates
      (``sort_query=True`` sorts them by name, then value); an empty query drops ``?``.
    * Fragment dropped: it is never sent to the server.

    Calling the normalizer never raises; it returns None for anything that is not a
    usable http(s) URL.
    """

    __slots__ = ("tracking_params", "sort_query", "_exact", "_prefixes", "_query_work", "_origins")

    def __init__(
        self,
        tracking_params: Iterable[str] = DEFAULT_TRACKING_PARAMS,
        sort_query: bool = False,
    ) -> None:
        if isinstance(tracking_params, str):
            raise ConfigError(
                "tracking_params must be a list of parameter names, not the single "
                f"string {tracking_params!r}"
            )
        params = tuple(tracking_params)
        exact: set[str] = set()
        prefixes: list[str] = []
        for param in params:
            if not isinstance(param, str) or not param.strip():
                raise ConfigError(
                    f"tracking_params entry {param!r} must be a non-empty parameter name "
                    "(a trailing '*' makes it a prefix)"
                )
            name = param.strip().lower()
            if name.endswith("*"):
                prefixes.append(name[:-1])  # "*" alone: drop every query parameter
            else:
                exact.add(name)
        self.tracking_params: tuple[str, ...] = params
        self.sort_query: bool = bool(sort_query)
        self._exact = frozenset(exact)
        self._prefixes = tuple(prefixes)
        # Canonical origin by ``scheme://authority`` as written (see _origin_of).
        self._origins: dict[str, str | None] = {}
        # One regex decides whether a canonical-looking query needs the slow path: it
        # matches an empty parameter or a parameter whose name is a tracking one.
        alternatives = [re.escape(n) + r"(?:[=&]|\Z)" for n in sorted(exact)]
        alternatives += [re.escape(p) for p in prefixes]
        self._query_work = re.compile(
            r"(?:\A|&)(?:&|\Z" + "".join("|" + a for a in alternatives) + ")",
            re.IGNORECASE | re.ASCII,
        ).search

    def __repr__(self) -> str:
        return (
            f"UrlNormalizer(tracking_params={len(self.tracking_params)} names, "
            f"sort_query={self.sort_query})"
        )

    def __call__(self, url: str) -> str | None:
        """Return the canonical form of ``url``, or None if it is not a usable http(s) URL."""
        match = _SIMPLE(url) if isinstance(url, str) else None
        if match is None:
            return self._full(url)
        # The fast path: ``url`` has a lowercase http(s) scheme, an authority without
        # userinfo or brackets, a path and query of characters that need no encoding,
        # and no backslash, whitespace or lone surrogate before its fragment, so the
        # cleanup, splitting and encoding steps of :meth:`_full` would leave it as it is.
        # What is left is done by the same code: the origin (cached), escapes and dot
        # segments, the query's parameters.
        written, path, query = match.groups()
        origin = self._origin(written)
        if origin is None:
            return None
        if path is None:
            path = "/"
        elif "%" in path:
            path = remove_dot_segments(_pct_normalize(path))
        elif "/." in path:
            path = remove_dot_segments(path)
        return self._with_query(origin + path, query)

    def _origin(self, written: str) -> str | None:
        """:meth:`_origin_of`, remembered."""
        origin = self._origins.get(written, _MISSING)
        # One dict lookup on a per-link path, with an object() sentinel.
        return self._origin_of(written) if origin is _MISSING else origin  # type: ignore[return-value]  # not the sentinel

    def _with_query(self, origin_path: str, query: str | None) -> str:
        """``origin_path`` and the normalized query, if anything of it is left."""
        if query:
            query = self._normalize_query(query)
            if query:
                return origin_path + "?" + query
        return origin_path

    def _origin_of(self, written: str) -> str | None:
        """Canonical ``scheme://host[:port]`` of ``scheme://authority`` as written (the
        scheme lowercase http or https, no userinfo), or None; remembered per normalizer,
        since a crawl's links name the same few authorities over and over."""
        colon = written.find(":")
        scheme = written[:colon]
        authority = written[colon + 3 :]
        if authority[:1] == "[":
            i = authority.find("]")
            host = ipv6_literal(authority[1:i]) if i >= 0 else None
            if host is None:
                origin = None
            else:
                port = authority[i + 1 :]
                if port[:1] == ":":
                    origin = self._with_port(scheme, "[" + host + "]", port[1:])
                else:
                    origin = None if port else scheme + "://[" + host + "]"
        else:
            authority, _, port = authority.partition(":")
            host = normalize_host(authority)
            origin = None if host is None else self._with_port(scheme, host, port)
        if len(written) <= _MAX_CACHED_ORIGIN:
            # Bounded like the host cache: cleared when full; a hostile page's huge
            # authority is never pinned.
            if len(self._origins) >= _MAX_ORIGINS:
                self._origins.clear()
            self._origins[written] = origin
        return origin

    @staticmethod
    def _with_port(scheme: str, host: str, port: str) -> str | None:
        if port:
            number = port_number(port)
            if number is None:
                return None
            if number != _DEFAULT_PORTS[scheme]:
                return scheme + "://" + host + ":" + str(number)
        return scheme + "://" + host

    def _full(self, url: object) -> str | None:
        """Every rule, step by step: what :meth:`__call__` does for any URL its fast path
        does not take (and the reference the fast path is tested against)."""
        if not isinstance(url, str):
            return None
        url = clean(url)
        colon = url.find(":")
        if colon != 4 and colon != 5:  # len("http"), len("https"): cheap early reject
            return None
        scheme = url[:colon]
        if scheme != "http" and scheme != "https":
            scheme = scheme.lower()
            if scheme != "http" and scheme != "https":
                return None
        rest = url[colon + 1 :]
        if "\\" in rest:
            rest = backslashes_to_slashes(rest)
        # WHATWG "special authority ignore slashes": any number of slashes, even none.
        rest = rest.lstrip("/")
        rest = rest.partition("#")[0]
        rest, _, query = rest.partition("?")
        i = rest.find("/")
        if i >= 0:
            authority = rest[:i]
            path = rest[i:]
        else:
            authority = rest
            path = "/"
        i = authority.rfind("@")  # WHATWG: the last "@" ends the userinfo
        if i >= 0:
            authority = authority[i + 1 :]
        origin = self._origin(scheme + "://" + authority)
        if origin is None:
            return None

        if path != "/" and (not _PATH_IS_CANONICAL(path) or "/." in path):
            path = percent_encode(path, _RFC_PATH_TABLE)
            if "%" in path:
                path = _pct_normalize(path)
            path = remove_dot_segments(path)
        return self._with_query(origin + path, query)

    def _normalize_query(self, query: str) -> str:
        if _QUERY_IS_CANONICAL(query) and not self.sort_query and not self._query_work(query):
            return query  # fast path: nothing to encode, strip or sort
        query = percent_encode(query, _RFC_QUERY_TABLE)
        if "%" in query:
            query = _pct_normalize(query)
        exact = self._exact
        prefixes = self._prefixes
        params = []
        for param in query.split("&"):
            if not param:
                continue
            name = param.partition("=")[0].lower()
            if name in exact or (prefixes and name.startswith(prefixes)):
                continue
            params.append(param)
        if self.sort_query:
            params.sort(key=_param_sort_key)
        return "&".join(params)


#: The normalizer with the default tracking parameters, shared by :func:`normalize` and
#: seed validation.
DEFAULT_NORMALIZER = UrlNormalizer()


@functools.lru_cache(maxsize=32)
def _normalizer_for(tracking_params: tuple[str, ...]) -> UrlNormalizer:
    return UrlNormalizer(tracking_params)


def normalize(url: str, tracking_params: Iterable[str] = DEFAULT_TRACKING_PARAMS) -> str | None:
    """Canonical form of ``url`` (see :class:`UrlNormalizer`), or None; never raises
    for a ``str`` URL. Normalizers for non-default ``tracking_params`` are cached."""
    if tracking_params is DEFAULT_TRACKING_PARAMS:
        return DEFAULT_NORMALIZER(url)
    return _normalizer_for(tuple(tracking_params))(url)


def url_hash(url: str) -> str:
    """The public id of a normalized URL: the first 8 bytes of its SHA-1, in hex (16
    characters). Rows, per-URL status, events and the control API name URLs by it."""
    return hashlib.sha1(url.encode("utf-8", "surrogatepass")).hexdigest()[:16]
