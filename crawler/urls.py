"""URL normalization, link joining, politeness keys and crawl scope.

Every URL the crawler handles passes through here, so these functions are pure, cheap
and never raise on input from the web: a URL that cannot be used becomes ``None`` and
the caller counts it (DESIGN.md invariant 7). Only :func:`validate_seed`, :class:`Scope`
and the :class:`UrlNormalizer` constructor raise (SeedError / ConfigError), because
their input comes from the user.

Two functions with two different jobs:

* :func:`join_url` resolves an ``href`` found in a page against the page's base URL the
  way a browser does (WHATWG URL Standard, "basic URL parser"), including the document
  encoding of the query string. Its output is what a browser would request.
* :class:`UrlNormalizer` turns an absolute URL into the one canonical spelling the
  seen-set, the frontier and the storage key on. Its rules follow RFC 3986 section 6.2.2
  (syntax-based normalization) plus a few crawler-specific, documented choices (tracking
  parameters, userinfo, empty query). The output is always a valid RFC 3986 URI with an
  ``http``/``https`` scheme and a host, and ``normalize(normalize(u)) == normalize(u)``.

The design follows w3lib's ``canonicalize_url`` / ``safe_url_string`` but is written
for speed on the hot path (about 30,000 calls a second per process).
"""

from __future__ import annotations

import codecs
import functools
import ipaddress
import re
import unicodedata
from collections.abc import Iterable
from urllib.parse import unquote

import idna
import tldextract

from crawler.errors import ConfigError, SeedError

__all__ = [
    "DEFAULT_TRACKING_PARAMS",
    "UrlNormalizer",
    "normalize",
    "join_url",
    "host_key",
    "origin",
    "registered_domain",
    "Scope",
    "validate_seed",
]

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

_HTTP_SCHEMES = ("http", "https")
_DEFAULT_PORTS = {"http": 80, "https": 443}

# WHATWG "C0 control or space": stripped from both ends of any URL string.
_C0_SPACE = "".join(chr(i) for i in range(0x21))
# WHATWG: ASCII tab and newline are removed from anywhere in the input.
_DROP_TAB_NL = {0x09: None, 0x0A: None, 0x0D: None}
_SURROGATES = re.compile("[\ud800-\udfff]")
_NON_ASCII = re.compile(r"[^\x00-\x7f]+")
_SCHEME = re.compile(r"([A-Za-z][A-Za-z0-9+\-.]*):")

# --- percent-encoding tables -------------------------------------------------------

_HEX = "0123456789ABCDEF"
_BYTE_PCT = tuple("%" + _HEX[b >> 4] + _HEX[b & 15] for b in range(256))
_UNRESERVED = frozenset(
    "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-._~"
)  # RFC 3986 section 2.3
_SUB_DELIMS = "!$&'()*+,;="  # RFC 3986 section 2.2


def _translate_table(keep: str) -> dict[int, str]:
    """str.translate table that percent-encodes every ASCII char not in ``keep``."""
    return {i: _BYTE_PCT[i] for i in range(128) if chr(i) not in keep}


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

# WHATWG percent-encode sets used by join_url (what a browser puts on the wire).
_C0_SET = "".join(chr(i) for i in range(0x20)) + "\x7f"
_WHATWG_PATH_TABLE = {ord(c): _BYTE_PCT[ord(c)] for c in _C0_SET + ' "#<>?`{}'}
_WHATWG_QUERY_SET = _C0_SET + " \"#<>'"  # special-query set (http/https)
_WHATWG_QUERY_TABLE = {ord(c): _BYTE_PCT[ord(c)] for c in _WHATWG_QUERY_SET}
_WHATWG_FRAGMENT_TABLE = {ord(c): _BYTE_PCT[ord(c)] for c in _C0_SET + ' "<>`'}
# Byte -> text for "percent-encode after encoding": bytes >= 0x80 and bytes in the
# query set are encoded, other ASCII bytes are kept (WHATWG URL, section 1.3).
_WHATWG_QUERY_BYTES = tuple(
    _BYTE_PCT[b] if b >= 0x80 or chr(b) in _WHATWG_QUERY_SET else chr(b) for b in range(256)
)


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


def _utf8_pct(match: re.Match[str]) -> str:
    return "".join(map(_BYTE_PCT.__getitem__, match.group().encode("utf-8")))


def _encode(s: str, table: dict[int, str]) -> str:
    """Percent-encode the ASCII chars ``table`` names and all non-ASCII as UTF-8."""
    s = s.translate(table)
    if not s.isascii():
        s = _NON_ASCII.sub(_utf8_pct, s)
    return s


def _clean(s: str) -> str:
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


def _backslashes_to_slashes(s: str) -> str:
    """WHATWG: in http(s) URLs a backslash before the query acts as a slash."""
    if "\\" not in s:
        return s
    end = len(s)
    for mark in "?#":
        i = s.find(mark)
        if 0 <= i < end:
            end = i
    return s[:end].replace("\\", "/") + s[end:]


_SINGLE_DOTS = frozenset((".", "%2e", "%2E"))
_DOUBLE_DOTS = frozenset(
    a + b for a in (".", "%2e", "%2E") for b in (".", "%2e", "%2E")
)


def _remove_dot_segments(path: str) -> str:
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


# --- hosts ------------------------------------------------------------------------

# RFC 3986 3.2.2 reg-name without pct-encoded (decoded before this check). Stricter than
# WHATWG, which also allows e.g. '"', '{' and '`': no DNS name can contain those.
_REG_NAME = re.compile(r"[a-z0-9\-._~!$&'()*+,;=]+").fullmatch
_DEC = re.compile(r"[0-9]+").fullmatch
_OCT = re.compile(r"[0-7]*").fullmatch
_HEXNUM = re.compile(r"[0-9a-fA-F]*").fullmatch
_MAX_HOST_LENGTH = 253
_ENDS_IN_NUMBER = re.compile(r"(?:[0-9]+|0[xX][0-9a-fA-F]*)").fullmatch


def _ipv4_number(part: str) -> int | None:
    """WHATWG "IPv4 number parser": decimal, 0x-hex or 0-prefixed octal.

    Leading zeros are stripped and long numbers refused before ``int()``: any value
    above 2**32 fails anyway, and ``int()`` raises on strings of over 4300 digits.
    """
    if not part:
        return None
    if part[:2] in ("0x", "0X"):
        digits, base, check = part[2:].lstrip("0"), 16, _HEXNUM
    elif len(part) > 1 and part[0] == "0":
        digits, base, check = part[1:].lstrip("0"), 8, _OCT
    else:
        digits, base, check = part, 10, _DEC
    if not digits:
        return 0
    if len(digits) > 12 or not check(digits):
        return None
    return int(digits, base)


def _ipv4(host: str) -> str | None:
    """WHATWG IPv4 parser: ``0x7f.1`` and ``2130706433`` both mean 127.0.0.1."""
    parts = host.split(".")
    if len(parts) > 4:
        return None
    nums = []
    for part in parts:
        n = _ipv4_number(part)
        if n is None:
            return None
        nums.append(n)
    if any(n > 255 for n in nums[:-1]) or nums[-1] >= 256 ** (5 - len(nums)):
        return None
    value = nums[-1]
    for i, n in enumerate(nums[:-1]):
        value += n << (8 * (3 - i))
    return "%d.%d.%d.%d" % (value >> 24, (value >> 16) & 255, (value >> 8) & 255, value & 255)


def _ipv6(text: str) -> str | None:
    """Validate an IPv6 literal and serialize it as WHATWG does (RFC 5952 form).

    Serialized by hand rather than with ``IPv6Address.compressed`` because the latter
    changed for IPv4-mapped addresses in Python 3.13, and the canonical form must not
    depend on the interpreter version. Zone ids (``%25eth0``) are rejected, as WHATWG
    does: they mean nothing off the local machine.
    """
    if "%" in text:
        return None
    try:
        value = int(ipaddress.IPv6Address(text))
    except ValueError:
        return None
    pieces = [(value >> (112 - 16 * i)) & 0xFFFF for i in range(8)]
    best_start, best_len, i = -1, 1, 0
    while i < 8:  # longest run (length >= 2) of zero pieces, first one wins a tie
        if pieces[i] == 0:
            j = i
            while j < 8 and pieces[j] == 0:
                j += 1
            if j - i > best_len:
                best_start, best_len = i, j - i
            i = j
        else:
            i += 1
    if best_start < 0:
        return ":".join("%x" % p for p in pieces)
    head = ":".join("%x" % p for p in pieces[:best_start])
    tail = ":".join("%x" % p for p in pieces[best_start + best_len :])
    return head + "::" + tail


def _idna_host(host: str) -> str | None:
    """Encode a non-ASCII host to its lowercase A-label form (UTS #46, as WHATWG).

    ``uts46_remap`` applies the UTS #46 mapping (case folding, full-width dots, ...) and
    rejects disallowed code points. Labels are then Punycode-encoded one by one rather
    than with ``idna.encode``, whose strict IDNA2008 label rules reject hosts browsers
    accept (``a_b.bücher.de``, emoji domains).
    """
    try:
        mapped = idna.uts46_remap(host, std3_rules=False, transitional=False)
        labels = [
            label if label.isascii() else "xn--" + label.encode("punycode").decode("ascii")
            for label in mapped.split(".")
        ]
    except (idna.IDNAError, UnicodeError, ValueError):
        return None
    return ".".join(labels).lower()


def _valid_a_label(label: str) -> bool:
    """An ``xn--`` label is kept only if encoding its Unicode form gives it back.

    That makes the Unicode and the Punycode spelling of a host normalize to the same
    string ("IDNA both ways") and rejects garbage Punycode.
    """
    try:
        decoded = label[4:].encode("ascii").decode("punycode")
    except UnicodeError:
        return False
    if not decoded or decoded.isascii():
        return False
    return _idna_host(decoded) == label


def _normalize_host(host: str) -> str | None:
    """Canonical host (no brackets, no port) or None; see :class:`UrlNormalizer`."""
    if "%" in host:
        # WHATWG host parser: percent-decode (UTF-8) before IDNA processing, so
        # ``ex%61mple.com`` is example.com and ``a%2Fb.com`` is rejected below.
        try:
            host = unquote(host, errors="strict")
        except UnicodeDecodeError:
            return None
    if len(host) > _MAX_HOST_LENGTH + 1:
        # DNS names are at most 253 characters (RFC 1035 2.3.4, plus a trailing dot);
        # checked before IDNA because Punycode is quadratic in the label length.
        return None
    if host.isascii():
        host = host.lower()
    else:
        mapped = _idna_host(host)
        if mapped is None:
            return None
        host = mapped
    if host.endswith("."):
        # The root label of a fully qualified name (RFC 1034 3.1): ``a.com.`` resolves
        # like ``a.com``; one spelling keeps one politeness queue per server.
        host = host[:-1]
    if (
        not host
        or len(host) > _MAX_HOST_LENGTH
        or host[0] == "."
        or host[-1] == "."
        or ".." in host
        or not _REG_NAME(host)
    ):
        # DNS cannot carry empty labels or longer names; other characters are not a
        # reg-name (RFC 3986 3.2.2).
        return None
    last = host[host.rfind(".") + 1 :]
    if "0" <= last[0] <= "9" and _ENDS_IN_NUMBER(last):
        # WHATWG "ends in a number": the host must then be an IPv4 address.
        return _ipv4(host)
    if "xn--" in host:
        for label in host.split("."):
            if label.startswith("xn--") and not _valid_a_label(label):
                return None
    return host


def _port_number(port: str) -> int | None:
    """Port as an int if it is ASCII digits <= 65535 (leading zeros allowed), else None."""
    if not (port.isascii() and port.isdigit()):
        return None
    digits = port.lstrip("0")
    if len(digits) > 5:  # also keeps int() away from its 4300-digit limit
        return None
    number = int(digits) if digits else 0
    return number if number <= 65535 else None


def _split_after_scheme(rest: str) -> tuple[str, str, str | None, str | None]:
    """Split ``authority/path?query#fragment`` (leading slashes already removed)."""
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


def _param_sort_key(param: str) -> tuple[str, str]:
    name, _, value = param.partition("=")
    return name, value


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

    __slots__ = ("tracking_params", "sort_query", "_exact", "_prefixes", "_query_work")

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
        if not isinstance(url, str):
            return None
        url = _clean(url)
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
            rest = _backslashes_to_slashes(rest)
        # WHATWG "special authority ignore slashes": any number of slashes, even none.
        rest = rest.lstrip("/")
        i = rest.find("#")
        if i >= 0:
            rest = rest[:i]
        i = rest.find("?")
        if i >= 0:
            query = rest[i + 1 :]
            rest = rest[:i]
        else:
            query = ""
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

        if authority[:1] == "[":
            i = authority.find("]")
            if i < 0:
                return None
            host = _ipv6(authority[1:i])
            if host is None:
                return None
            host = "[" + host + "]"
            port = authority[i + 1 :]
            if port:
                if port[0] != ":":
                    return None
                port = port[1:]
        else:
            i = authority.find(":")
            if i >= 0:
                port = authority[i + 1 :]
                authority = authority[:i]
            else:
                port = ""
            host = _normalize_host(authority)
            if host is None:
                return None
        if port:
            number = _port_number(port)
            if number is None:
                return None
            port = "" if number == _DEFAULT_PORTS[scheme] else ":" + str(number)

        if path != "/" and (not _PATH_IS_CANONICAL(path) or "/." in path):
            path = _encode(path, _RFC_PATH_TABLE)
            if "%" in path:
                path = _pct_normalize(path)
            path = _remove_dot_segments(path)
        if query:
            query = self._normalize_query(query)
            if query:
                return scheme + "://" + host + port + path + "?" + query
        return scheme + "://" + host + port + path

    def _normalize_query(self, query: str) -> str:
        if _QUERY_IS_CANONICAL(query) and not self.sort_query and not self._query_work(query):
            return query  # fast path: nothing to encode, strip or sort
        query = _encode(query, _RFC_QUERY_TABLE)
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


_DEFAULT_NORMALIZER = UrlNormalizer()


@functools.lru_cache(maxsize=32)
def _normalizer_for(tracking_params: tuple[str, ...]) -> UrlNormalizer:
    return UrlNormalizer(tracking_params)


def normalize(url: str, tracking_params: Iterable[str] = DEFAULT_TRACKING_PARAMS) -> str | None:
    """Canonical form of ``url`` (see :class:`UrlNormalizer`), or None; never raises
    for a ``str`` URL. Normalizers for non-default ``tracking_params`` are cached."""
    if tracking_params is DEFAULT_TRACKING_PARAMS:
        return _DEFAULT_NORMALIZER(url)
    return _normalizer_for(tuple(tracking_params))(url)


# --- join_url -----------------------------------------------------------------------

# WHATWG Encoding Standard labels whose browser encoding differs from Python's codec
# of the same name (e.g. "iso-8859-1" means windows-1252 on the web).
_ENCODING_LABELS: dict[str, str] = {}
for _codec, _labels in (
    ("cp1252", "ansi_x3.4-1968 ascii cp1252 cp819 csisolatin1 ibm819 iso-8859-1 iso-ir-100 "
     "iso8859-1 iso88591 iso_8859-1 iso_8859-1:1987 l1 latin1 us-ascii windows-1252 x-cp1252"),
    ("cp1254", "cp1254 csisolatin5 iso-8859-9 iso-ir-148 iso8859-9 iso88599 iso_8859-9 "
     "iso_8859-9:1989 l5 latin5 windows-1254 x-cp1254"),
    ("cp874", "dos-874 iso-8859-11 iso8859-11 iso885911 tis-620 windows-874"),
    ("gbk", "chinese csgb2312 csiso58gb231280 gb2312 gb_2312 gb_2312-80 gbk iso-ir-58 x-gbk "
     "cp936 ms936 windows-936"),
    ("cp932", "csshiftjis ms932 ms_kanji shift-jis shift_jis sjis windows-31j x-sjis"),
    ("cp949", "cseuckr csksc56011987 euc-kr iso-ir-149 korean ks_c_5601-1987 ks_c_5601-1989 "
     "ksc5601 ksc_5601 windows-949"),
    ("big5hkscs", "big5 big5-hkscs cn-big5 csbig5 x-x-big5"),
    # UTF-16 and "replacement" encodings use UTF-8 for URLs (WHATWG URL, "encoding").
    ("utf-8", "utf-16 utf-16le utf-16be unicode unicodefffe ucs-2 iso-10646-ucs-2 "
     "csunicode unicode-1-1-utf-8 utf8 utf-7 replacement iso-2022-kr iso-2022-cn "
     "iso-2022-cn-ext hz-gb-2312 csiso2022kr"),
):
    for _label in _labels.split():
        _ENCODING_LABELS[_label] = _codec


@functools.lru_cache(maxsize=64)
def _query_codec(label: object) -> str:
    """Python codec for a document encoding label; UTF-8 for anything unusable."""
    if not isinstance(label, str) or len(label) > 64:
        return "utf-8"
    name = label.strip().lower()
    name = _ENCODING_LABELS.get(name, name)
    try:
        info = codecs.lookup(name)
        # Only ASCII-compatible text encodings work for URLs; this also rejects
        # bytes-to-bytes codecs such as base64, whose str.encode raises LookupError.
        if "a-z/?&=%".encode(info.name) != b"a-z/?&=%":
            return "utf-8"
    except (LookupError, ValueError, UnicodeError):
        return "utf-8"
    return "utf-8" if info.name == "utf-8" else info.name


def _ncr(ch: str) -> str:
    """WHATWG "percent-encode after encoding": a character the encoding cannot represent
    becomes the HTML numeric character reference ``&#NNNN;``, sent as ``%26%23NNNN%3B``."""
    return "%%26%%23%d%%3B" % ord(ch)


def _ncr_error_handler(exc: UnicodeError) -> tuple[str, int]:
    """Encode error handler: characters the encoding cannot represent become NCRs."""
    if not isinstance(exc, UnicodeEncodeError):
        raise exc
    return "".join(map(_ncr, exc.object[exc.start : exc.end])), exc.end


codecs.register_error("crawler-url-ncr", _ncr_error_handler)

# --- WHATWG encoders where Python's codec of the same name differs ------------------
#
# The query of a link on a legacy-encoded page is encoded with the page's encoding as the
# WHATWG Encoding Standard defines it, which is not always Python's codec: Python's CJK
# codecs add one-way "best fit" mappings (cp932: U+00A2 -> 0x8191), use other versions of
# the national standards (gb18030-2005, HKSCS-2004), or pick another of two duplicate
# byte sequences. Each difference below was measured against Chromium's output for every
# code point (tools/browser_links.py, docs/browser-agreement.md); characters none of this
# touches encode as before.

# windows-1250...1258 and windows-874: the WHATWG index maps every byte 0x80-0x9F that
# Microsoft left undefined to the C1 control of the same number; Python rejects those.
_C1_CODECS = frozenset(
    "cp874 cp1250 cp1251 cp1252 cp1253 cp1254 cp1255 cp1256 cp1257 cp1258".split()
)
# KOI8-U on the web is KOI8-RU (0xAE/0xBE are the Belarusian short U, not box drawing), and
# windows-1255 has U+05BA at 0xCA.
_SINGLE_BYTE_FIXES: dict[str, dict[str, bytes | None]] = {
    "koi8_u": {"\u045e": b"\xae", "\u040e": b"\xbe", "\u255d": None, "\u256c": None},
    "cp1255": {"\u05ba": b"\xca"},
}


@functools.lru_cache(maxsize=64)
def _single_byte_extra(codec: str) -> dict[str, bytes | None]:
    """Characters a WHATWG single-byte encoding maps differently from Python's codec."""
    name = codec.replace("-", "_")
    extra: dict[str, bytes | None] = dict(_SINGLE_BYTE_FIXES.get(name, {}))
    if name in _C1_CODECS:
        for b in range(0x80, 0xA0):
            try:
                bytes((b,)).decode(name)
            except UnicodeDecodeError:
                extra[chr(b)] = bytes((b,))
    return extra


def _single_byte_char(codec: str, ch: str) -> bytes | None:
    """A single-byte encoding whose WHATWG index also differs outside the C1 range."""
    extra = _single_byte_extra(codec)
    if ch in extra:
        return extra[ch]
    return _roundtrip(ch, codec)


def _roundtrip(ch: str, codec: str) -> bytes | None:
    """``ch`` encoded with ``codec`` if decoding gives it back (no best-fit mapping)."""
    try:
        data = ch.encode(codec)
        return data if data.decode(codec) == ch else None
    except UnicodeError:
        return None


@functools.cache
def _sjis_ibm_extensions() -> dict[str, bytes]:
    """IBM extension characters (Shift_JIS 0xFA40-0xFC4B) by character.

    Python's cp932 encodes them with their NEC-selected duplicates (0xED/0xEE leads);
    WHATWG's "index Shift_JIS pointer" excludes that range, so browsers send 0xFAxx."""
    table: dict[str, bytes] = {}
    for lead in (0xFA, 0xFB, 0xFC):
        for trail in (*range(0x40, 0x7F), *range(0x80, 0xFD)):
            pair = bytes((lead, trail))
            try:
                table.setdefault(pair.decode("cp932"), pair)
            except UnicodeDecodeError:
                continue
    return table


def _jis_common(ch: str) -> tuple[str, bytes | None]:
    """The WHATWG rules shared by the Shift_JIS and EUC-JP encoders: U+00A5 and U+203E are
    the JIS-Roman bytes 0x5C and 0x7E, U+2212 is encoded as U+FF0D."""
    cp = ord(ch)
    if cp == 0xA5:
        return ch, b"\\"
    if cp == 0x203E:
        return ch, b"~"
    if cp == 0x2212:
        ch = "\uff0d"
    return ch, None


def _shift_jis_char(ch: str) -> bytes | None:
    ch, fixed = _jis_common(ch)
    if fixed is not None:
        return fixed
    data = _roundtrip(ch, "cp932")
    if data is not None and len(data) == 1 and (data[0] == 0xA0 or data[0] > 0xDF):
        return None  # cp932's U+F8F0-U+F8F3 -> 0xA0, 0xFD-0xFF: not in the WHATWG index
    if data is not None and len(data) == 2:
        if 0xF0 <= data[0] <= 0xF9:
            return None  # user-defined area (PUA): decoded by browsers, never encoded
        if data[0] in (0xED, 0xEE):
            data = _sjis_ibm_extensions().get(ch, data)
    return data


def _euc_jp_char(ch: str) -> bytes | None:
    """WHATWG EUC-JP encoder: JIS X 0208 (Microsoft variant, as index jis0208) and
    half-width katakana; unlike Python's euc_jp it never uses JIS X 0212."""
    ch, fixed = _jis_common(ch)
    if fixed is not None:
        return fixed
    cp = ord(ch)
    if 0xFF61 <= cp <= 0xFF9F:
        return bytes((0x8E, cp - 0xFF61 + 0xA1))
    data = _roundtrip(ch, "cp932")
    if data is None or len(data) != 2 or data[0] >= 0xF0:
        return None  # not in JIS X 0208 (user-defined area, IBM-only extensions)
    lead, trail = data
    # Shift_JIS -> JIS X 0208 row and cell (1-based, as in the standard), then EUC.
    row = (lead - 0x81 if lead < 0xA0 else lead - 0xC1) * 2 + (1 if trail < 0x9F else 2)
    cell = (trail - 0x40 + 1 - (trail > 0x7F)) if trail < 0x9F else trail - 0x9F + 1
    return bytes((row + 0xA0, cell + 0xA0))


# Big5: WHATWG's encoder skips the HKSCS area (lead bytes below 0xA1) and Chromium's
# table differs from Python's big5hkscs/cp950 for these few characters (None: no bytes,
# the character is sent as an NCR). Control pictures U+2400-U+241F, U+2421 are A3C0-A3E0.
_BIG5_FIXES: dict[int, bytes | None] = {
    0x00A2: None, 0x00A3: None, 0x00A5: None, 0x2022: None, 0x203E: None, 0x223C: None,
    0x2593: None, 0x2609: None, 0x2641: None, 0xFF64: None,
    0x2421: b"\xa3\xe0", 0x256D: b"\xa2\x7e", 0x256E: b"\xa2\xa1", 0x256F: b"\xa2\xa3",
    0x2570: b"\xa2\xa2", 0x4EDD: b"\xc6\xdf", 0x5605: b"\xfb\x48", 0x5ED0: b"\xfb\xf9",
    0x5EF4: b"\xc6\xcf", 0x60A4: b"\xfc\x6c", 0x65E0: b"\xc6\xd3", 0x732A: b"\xfe\x52",
    0x7676: b"\xc6\xd5", 0x96B6: b"\xc6\xd7", 0xFF0F: b"\xa1\xfe", 0xFF3C: b"\xa2\x40",
}


def _big5_char(ch: str) -> bytes | None:
    cp = ord(ch)
    if 0x2400 <= cp <= 0x241F:
        return bytes((0xA3, 0xC0 + cp - 0x2400))
    if cp in _BIG5_FIXES:
        return _BIG5_FIXES[cp]
    for codec in ("big5hkscs", "cp950"):
        data = _roundtrip(ch, codec)
        if data is not None and len(data) == 2 and data[0] >= 0xA1:
            return data
    return None


# GB18030-2022 (what browsers implement) moved these characters from the Private Use
# Area to their standard code points; Python's gb18030 is the 2005 edition. Each pair is
# (the PUA character Python decodes the bytes to, the character they mean now).
GB18030_2022_SWAPS: tuple[tuple[str, str], ...] = tuple(
    zip(
        "\ue78d\ue78e\ue78f\ue790\ue791\ue792\ue793\ue794\ue795\ue796"
        "\ue7c7\ue81e\ue826\ue82b\ue82c\ue832\ue843\ue854\ue864",
        "\ufe10\ufe12\ufe11\ufe13\ufe14\ufe15\ufe16\ufe17\ufe18\ufe19"
        "\u1e3f\u9fb4\u9fb5\u9fb6\u9fb7\u9fb8\u9fb9\u9fba\u9fbb",
    )
)
_GB_NEW_TO_OLD = {new: old for old, new in GB18030_2022_SWAPS}


def _gb18030_char(ch: str, gbk: bool = False) -> bytes | None:
    """WHATWG gb18030 encoder; with ``gbk``, the GBK encoder (two-byte codes only, and
    U+20AC is 0x80)."""
    if ch == "\ue5e5":
        return None  # WHATWG: U+E5E5 has no encoding (0xA3A0 decodes to U+3000)
    if gbk and ch == "\u20ac":
        return b"\x80"
    if ch in _GB_NEW_TO_OLD:
        ch = _GB_NEW_TO_OLD[ch]  # the two-byte code Python gives the old PUA character
    elif ch == "\ue7c7":
        ch = "\u1e3f"  # swapped with U+1E3F: takes its four-byte code
    try:
        data = ch.encode("gb18030")
    except UnicodeError:
        return None
    return None if gbk and len(data) != 2 else data


_ESC_ASCII, _ESC_ROMAN, _ESC_JIS0208 = b"\x1b(B", b"\x1b(J", b"\x1b$B"


def _iso2022jp_query(text: str) -> str:
    """WHATWG ISO-2022-JP encoder over a whole query, percent-encoded. It is stateful:
    escape sequences switch between ASCII, JIS-Roman and JIS X 0208 (Python's codec also
    uses JIS X 0212, which browsers never send). An unencodable character becomes an NCR,
    sent in ASCII (or JIS-Roman) state."""
    out = bytearray()
    pieces: list[str] = []
    state = _ESC_ASCII
    for ch in text:
        cp = ord(ch)
        if cp < 0x80 and (state != _ESC_ROMAN or cp not in (0x5C, 0x7E)):
            if state == _ESC_JIS0208:
                out += _ESC_ASCII
                state = _ESC_ASCII
            out.append(cp)  # ASCII, also as is in Roman state
            continue
        if cp < 0x80:  # backslash or tilde while in Roman state
            out += _ESC_ASCII + bytes((cp,))
            state = _ESC_ASCII
            continue
        if cp in (0xA5, 0x203E):
            if state != _ESC_ROMAN:
                out += _ESC_ROMAN
                state = _ESC_ROMAN
            out.append(0x5C if cp == 0xA5 else 0x7E)
            continue
        if 0xFF61 <= cp <= 0xFF9F:  # half-width katakana are sent as their full-width forms
            ch = _HALFWIDTH_SOUND_MARKS.get(ch) or unicodedata.normalize("NFKC", ch)
        euc = _euc_jp_char(ch)
        if euc is None or len(euc) != 2 or euc[0] < 0xA1:
            if state == _ESC_JIS0208:
                out += _ESC_ASCII
                state = _ESC_ASCII
            pieces.append("".join(map(_WHATWG_QUERY_BYTES.__getitem__, out)) + _ncr(chr(cp)))
            out.clear()
            continue
        if state != _ESC_JIS0208:
            out += _ESC_JIS0208
            state = _ESC_JIS0208
        out += bytes((euc[0] - 0x80, euc[1] - 0x80))
    if state != _ESC_ASCII:
        out += _ESC_ASCII
    pieces.append("".join(map(_WHATWG_QUERY_BYTES.__getitem__, out)))
    return "".join(pieces)


# NFKC maps these two to combining marks; WHATWG's katakana index to the spacing ones.
_HALFWIDTH_SOUND_MARKS = {"\uff9e": "\u309b", "\uff9f": "\u309c"}


_CHAR_ENCODERS = {
    "cp932": _shift_jis_char,
    "shift_jis": _shift_jis_char,
    "euc_jp": _euc_jp_char,
    "big5hkscs": _big5_char,
    "big5": _big5_char,
    "cp950": _big5_char,
    "gb18030": _gb18030_char,
    "gbk": functools.partial(_gb18030_char, gbk=True),
    "gb2312": functools.partial(_gb18030_char, gbk=True),
    "koi8-u": functools.partial(_single_byte_char, "koi8_u"),
    "koi8_u": functools.partial(_single_byte_char, "koi8_u"),
    **{codec: functools.partial(_single_byte_char, codec) for codec in _C1_CODECS},
}


@functools.lru_cache(maxsize=8192)
def _encode_char_pct(codec: str, ch: str) -> str:
    """One non-ASCII character of a query, encoded and percent-encoded (cached: pages
    repeat the same few characters)."""
    data = _CHAR_ENCODERS[codec](ch)
    if data is None:
        return _ncr(ch)
    return "".join(map(_WHATWG_QUERY_BYTES.__getitem__, data))


def _encode_query(query: str, encoding: str) -> str:
    """Encode a query as a browser does: WHATWG special-query set, non-ASCII in the
    document's encoding (the only URL part that uses it; the path is always UTF-8)."""
    query = query.translate(_WHATWG_QUERY_TABLE)
    if query.isascii():
        return query
    codec = _query_codec(encoding if isinstance(encoding, str) and len(encoding) <= 64 else "")
    if codec == "utf-8":
        return _NON_ASCII.sub(_utf8_pct, query)
    if codec.startswith("iso2022_jp"):
        return _iso2022jp_query(query)
    if codec in _CHAR_ENCODERS:

        def per_char(match: re.Match[str]) -> str:
            return "".join(_encode_char_pct(codec, ch) for ch in match.group())

        return _NON_ASCII.sub(per_char, query)

    def legacy(match: re.Match[str]) -> str:
        data = match.group().encode(codec, "crawler-url-ncr")
        return "".join(map(_WHATWG_QUERY_BYTES.__getitem__, data))

    return _NON_ASCII.sub(legacy, query)


def _has_host(authority: str) -> bool:
    hostport = authority[authority.rfind("@") + 1 :]
    if hostport[:1] == "[":
        return True  # validated by the normalizer
    return bool(hostport.partition(":")[0])


def _serialize(
    scheme: str, authority: str, path: str, query: str | None, fragment: str | None, encoding: str
) -> str:
    url = scheme + "://" + authority + _encode(path, _WHATWG_PATH_TABLE)
    if query is not None:
        url += "?" + _encode_query(query, encoding)
    if fragment is not None:
        url += "#" + _encode(fragment, _WHATWG_FRAGMENT_TABLE)
    return url


def _absolute(scheme: str, rest: str, encoding: str) -> str | None:
    """``rest`` is everything after ``scheme:`` and its slashes: authority onwards."""
    authority, path, query, fragment = _split_after_scheme(rest)
    if not _has_host(authority):
        return None  # WHATWG: a special URL with an empty host is a failure
    path = _remove_dot_segments(path or "/")
    return _serialize(scheme, authority, path, query, fragment, encoding)


_MAX_CACHED_BASE = 4096


@functools.lru_cache(maxsize=1024)
def _parse_base(base: str) -> tuple[str, str, str, str | None] | None:
    """(scheme, authority, path, query) of an http(s) base URL. Cached: every link on
    a page is joined against the same base."""
    base = _clean(base)
    match = _SCHEME.match(base)
    if match is None:
        return None
    scheme = match.group(1).lower()
    if scheme not in _HTTP_SCHEMES:
        return None
    rest = _backslashes_to_slashes(base[match.end() :]).lstrip("/")
    authority, path, query, _fragment = _split_after_scheme(rest)
    if not _has_host(authority):
        return None
    return scheme, authority, _remove_dot_segments(path or "/"), query


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
    return _serialize(scheme, authority, _remove_dot_segments(path), query, fragment, encoding)


def _join(base: object, href: str, encoding: str) -> str | None:
    href = _clean(href)
    if not isinstance(base, str):
        base_parts = None
    elif len(base) <= _MAX_CACHED_BASE:
        base_parts = _parse_base(base)
    else:  # a huge <base href> from a hostile page must not be pinned in the cache
        base_parts = _parse_base.__wrapped__(base)
    match = _SCHEME.match(href)
    if match is not None:
        scheme = match.group(1).lower()
        rest = href[match.end() :]
        if scheme not in _HTTP_SCHEMES:
            # mailto:, javascript:, data:, tel:, ftp:, ... are absolute; returned so the
            # caller can count why the link is skipped (the normalizer rejects them).
            return scheme + ":" + rest
        rest = _backslashes_to_slashes(rest)
        if base_parts is not None and base_parts[0] == scheme:
            # WHATWG "special relative or authority state": ``http:foo`` on an http page
            # is a relative reference, ``http://x`` is not.
            return _resolve(base_parts, rest, encoding)
        return _absolute(scheme, rest.lstrip("/"), encoding)
    if base_parts is None:
        return None
    return _resolve(base_parts, _backslashes_to_slashes(href), encoding)


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
    try:
        return _join(base, href, encoding)
    except (ValueError, UnicodeError, LookupError):
        # Defensive: _join is written not to raise, but a codec misbehaving on a hostile
        # href must cost only that link (DESIGN.md invariant 7). The caller counts None.
        return None


# --- keys ---------------------------------------------------------------------------


def host_key(url: str) -> str:
    """Politeness key of a normalized URL: ``host`` or ``host:port`` (non-default port).

    The URL is assumed normalized (lowercase host, default port removed), so this is a
    slice, not a parse. Returns "" for a string without ``//``.
    """
    i = url.find("//")
    if i < 0:
        return ""
    i += 2
    j = url.find("/", i)
    return url[i:j] if j >= 0 else url[i:]


def origin(url: str) -> str:
    """``scheme://host[:port]`` of a normalized URL: the scope of one robots.txt
    (RFC 9309 section 2.3) and of one politeness queue."""
    i = url.find("//")
    if i < 0:
        return ""
    j = url.find("/", i + 2)
    return url[:j] if j >= 0 else url


def _hostname(url: str) -> str:
    """Host of a normalized URL without the port (IPv6 keeps its brackets)."""
    key = host_key(url)
    if key[:1] == "[":
        return key[: key.find("]") + 1]
    i = key.rfind(":")
    return key[:i] if i >= 0 else key


@functools.lru_cache(maxsize=1)
def _tld_extractor() -> tldextract.TLDExtract:
    # Offline only: no suffix-list URLs, no disk cache; the Public Suffix List snapshot
    # bundled with tldextract is used. Private suffixes (github.io, blogspot.com, ...)
    # are included so that user sites under them count as separate domains.
    return tldextract.TLDExtract(
        suffix_list_urls=(),
        cache_dir=None,
        fallback_to_snapshot=True,
        include_psl_private_domains=True,
    )


_IPV4_DOTTED = re.compile(r"[0-9]{1,3}(?:\.[0-9]{1,3}){3}").fullmatch


@functools.lru_cache(maxsize=65536)
def registered_domain(host: str) -> str:
    """eTLD+1 of ``host`` (a port is ignored), from the bundled Public Suffix List.

    ``www.bbc.co.uk`` -> ``bbc.co.uk``; ``me.github.io`` -> ``me.github.io`` (private
    suffixes count). Without a public suffix (``a.b.test``, ``localhost``) the last two
    labels are used; an IP address is its own domain; a bare public suffix is itself.
    """
    host = host.strip().lower()
    if host[:1] == "[":
        end = host.find("]")
        return host[: end + 1] if end > 0 else host
    i = host.rfind(":")
    if i >= 0:
        host = host[:i]
    host = host.rstrip(".")
    if not host or _IPV4_DOTTED(host):
        return host
    parts = _tld_extractor()(host)
    if parts.suffix:
        return parts.domain + "." + parts.suffix if parts.domain else host
    return ".".join(host.split(".")[-2:])


# --- user input: seeds and scope ----------------------------------------------------

_PORT_LIKE = re.compile(r"[0-9]+(?:[/?#]|\Z)")


def _quote_seed(seed: str) -> str:
    text = repr(seed)  # repr keeps the message on one line (newlines are escaped)
    return text if len(text) <= 200 else text[:197] + "..."


def _clip(part: str) -> str:
    """A piece of a seed quoted inside a message: one line, at most 60 characters."""
    text = repr(part)[1:-1]
    return text if len(text) <= 60 else text[:57] + "..."


def _diagnose(url: str) -> str:
    """Why ``url`` does not normalize (used only for error messages, off the hot path)."""
    text = _clean(url)
    if not text:
        return "is empty"
    match = _SCHEME.match(text)
    if match is None or _PORT_LIKE.match(text, match.end()):
        # "example.com" and "localhost:8080/x" both lack a scheme.
        return f"has no scheme; write it as 'https://{_clip(text)}'"
    scheme = match.group(1).lower()
    if scheme not in _HTTP_SCHEMES:
        return f"has unsupported scheme '{_clip(scheme)}:' (only http and https can be crawled)"
    rest = _backslashes_to_slashes(text[match.end() :]).lstrip("/")
    authority = _split_after_scheme(rest)[0]
    authority = authority[authority.rfind("@") + 1 :]
    if authority[:1] == "[":
        end = authority.find("]")
        if end < 0 or _ipv6(authority[1:end]) is None:
            bad = authority[: end + 1] if end >= 0 else authority
            return f"has an invalid IPv6 host '{_clip(bad)}'"
        port = authority[end + 1 :]
        if port and port[0] != ":":
            return f"has text after the IPv6 host: '{_clip(port)}'"
        port = port[1:]
        host = authority[: end + 1]
    else:
        host, _, port = authority.partition(":")
        if not host:
            return "has no host (expected http://host/...)"
        if _normalize_host(host) is None:
            return f"has an invalid host '{_clip(host)}'"
    if port and _port_number(port) is None:
        return f"has an invalid port '{_clip(port)}' (must be a number from 0 to 65535)"
    return "cannot be parsed as a URL"


def validate_seed(url: str, normalizer: UrlNormalizer | None = None) -> str:
    """Normalize a seed URL given by the user, or raise :class:`SeedError`.

    The message is one line, quotes the seed and says what is wrong: no scheme,
    unsupported scheme, no host, invalid host, bad port, or unparseable.
    """
    if not isinstance(url, str):
        raise SeedError(f"seed {url!r} is not a string (got {type(url).__name__})")
    normalized = (normalizer or _DEFAULT_NORMALIZER)(url)
    if normalized is None:
        raise SeedError(f"seed {_quote_seed(url)} {_diagnose(url)}")
    return normalized


class Scope:
    """Which discovered URLs the crawl follows, decided from the seeds.

    Modes:

    * ``host``: the URL's hostname equals a seed's hostname. Ports are ignored (a site
      on ``:8080`` linking to its ``:443`` twin is the same site), ``www.`` is not (use
      ``domain`` to cross subdomains).
    * ``domain``: the URL's registered domain (eTLD+1, :func:`registered_domain`)
      equals a seed's.
    * ``any``: every http(s) URL.

    ``allows`` takes a normalized URL. Seeds given to the constructor or to
    ``add_seeds`` are user input: they are validated with :func:`validate_seed`.
    """

    MODES: tuple[str, ...] = ("host", "domain", "any")

    def __init__(self, mode: str, seeds: Iterable[str] = ()) -> None:
        clean = mode.strip().lower() if isinstance(mode, str) else None
        if clean not in self.MODES:
            raise ConfigError(
                f"scope mode {mode!r} is not valid; use one of: {', '.join(self.MODES)}"
            )
        self.mode: str = clean
        self._hosts: set[str] = set()
        self._domains: set[str] = set()
        self.add_seeds(seeds)

    def add_seeds(self, urls: Iterable[str]) -> list[str]:
        """Widen the scope with more seeds (e.g. added while the crawl runs).

        All seeds are validated before any is added; returns their normalized forms.
        """
        if isinstance(urls, str):
            urls = [urls]  # one URL, not an iterable of characters
        normalized = [validate_seed(url) for url in urls]
        for url in normalized:
            host = _hostname(url)
            self._hosts.add(host)
            self._domains.add(registered_domain(host))
        return normalized

    @property
    def hosts(self) -> frozenset[str]:
        """Seed hostnames (without port)."""
        return frozenset(self._hosts)

    @property
    def domains(self) -> frozenset[str]:
        """Registered domains of the seeds."""
        return frozenset(self._domains)

    def allows(self, url: str) -> bool:
        """True if the normalized ``url`` is inside the crawl's scope."""
        if not url:
            return False
        mode = self.mode
        if mode == "any":
            return True
        host = _hostname(url)
        if mode == "host":
            return host in self._hosts
        return registered_domain(host) in self._domains

    def __repr__(self) -> str:
        return f"Scope(mode={self.mode!r}, hosts={len(self._hosts)}, domains={len(self._domains)})"
