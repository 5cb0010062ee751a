"""Page parser: decode a fetched body, extract the links a crawler follows, robots meta, text.

One call per fetched page (:func:`parse_page`), so this is hot-path code. The heavy work is
done in C by selectolax's lexbor backend (an HTML5-conformant tree builder, so malformed
markup yields the same tree a browser builds); Python only touches the few nodes it needs.

Decoding follows the WHATWG Encoding Standard and the HTML spec's "determining the
character encoding" steps, in their order of precedence:

1. a byte-order mark (UTF-8, UTF-16LE, UTF-16BE) -- it also wins over everything else;
2. the ``charset=`` parameter of the HTTP Content-Type;
3. the ``<meta charset>`` / ``<meta http-equiv=Content-Type>`` found by the spec's *prescan*
   of the first 1024 bytes, else a charset ``<meta>`` later in ``<head>``, which browsers
   also end up obeying (the spec's "change the encoding"; found with Chromium's rules);
4. UTF-8 (malformed bytes become U+FFFD).

Labels map to encodings through the WHATWG label table, which is why ``iso-8859-1`` and
``us-ascii`` decode as windows-1252, ``gb2312`` as GB18030 and ``euc-kr`` as windows-949,
exactly as browsers do. The decoding encoding also decides how non-ASCII characters of a
link's query are percent-encoded (WHATWG URL "query state"), so a link is resolved the way
a browser would request it.

Bad input from the web never raises out of this module (DESIGN.md invariant 7): a body
that cannot be parsed yields a :class:`ParsedPage` whose ``error`` says why.
"""

from __future__ import annotations

import codecs
import re
from collections.abc import Mapping
from dataclasses import dataclass, field

import numpy as np
from selectolax.lexbor import LexborHTMLParser

from crawler.errors import ConfigError
from crawler.urls import GB18030_2022_SWAPS, join_url

__all__ = ["Link", "ParsedPage", "parse_page", "is_html", "detect_charset", "lookup_charset"]


@dataclass(frozen=True, slots=True)
class Link:
    """One followable link of a page (an ``<a href>`` or ``<area href>``), in document order."""

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
    """Visible body text for SimHash: no script/style/noscript/template/svg, whitespace
    collapsed to single spaces."""
    title: str | None = None
    error: str | None = None
    """Set when the body could not be parsed at all (the caller records it)."""
    links_dropped: int = 0
    """Links beyond ``max_links`` that were not returned (counted, not materialized)."""
    degraded: bool = False
    """The markup nested so deep that building the real DOM would cost quadratic time; the
    page was parsed from a flattened copy keeping only a/area/base/meta/title tags. Links
    are still found; ``text`` may include script source."""


# --------------------------------------------------------------------------------------
# Encoding labels (WHATWG Encoding Standard, "Encodings" table): label -> Python codec.
# Python's own aliases disagree with browsers in ways that matter (latin-1 vs windows-1252,
# gb2312 vs GBK, shift_jis vs windows-31j), so labels never go to codecs.lookup directly.

_WHATWG_LABELS: dict[str, str] = {}


def _labels(codec: str, labels: str) -> None:
    for label in labels.split():
        _WHATWG_LABELS[label] = codec


_labels("utf-8", "unicode-1-1-utf-8 unicode11utf8 unicode20utf8 utf-8 utf8 x-unicode20utf8")
_labels("cp866", "866 cp866 csibm866 ibm866")
_labels(
    "iso8859-2",
    "csisolatin2 iso-8859-2 iso-ir-101 iso8859-2 iso88592 iso_8859-2 iso_8859-2:1987 l2 latin2",
)
_labels(
    "iso8859-3",
    "csisolatin3 iso-8859-3 iso-ir-109 iso8859-3 iso88593 iso_8859-3 iso_8859-3:1988 l3 latin3",
)
_labels(
    "iso8859-4",
    "csisolatin4 iso-8859-4 iso-ir-110 iso8859-4 iso88594 iso_8859-4 iso_8859-4:1988 l4 latin4",
)
_labels(
    "iso8859-5",
    "csisolatincyrillic cyrillic iso-8859-5 iso-ir-144 iso8859-5 iso88595 iso_8859-5 iso_8859-5:1988",
)
_labels(
    "iso8859-6",
    "arabic asmo-708 csiso88596e csiso88596i csisolatinarabic ecma-114 iso-8859-6 iso-8859-6-e "
    "iso-8859-6-i iso-ir-127 iso8859-6 iso88596 iso_8859-6 iso_8859-6:1987",
)
_labels(
    "iso8859-7",
    "csisolatingreek ecma-118 elot_928 greek greek8 iso-8859-7 iso-ir-126 iso8859-7 iso88597 "
    "iso_8859-7 iso_8859-7:1987 sun_eu_greek",
)
# ISO-8859-8-I differs from ISO-8859-8 only in bidi rendering, not in bytes -> characters.
_labels(
    "iso8859-8",
    "csiso88598e csisolatinhebrew hebrew iso-8859-8 iso-8859-8-e iso-ir-138 iso8859-8 iso88598 "
    "iso_8859-8 iso_8859-8:1988 visual csiso88598i iso-8859-8-i logical",
)
_labels("iso8859-10", "csisolatin6 iso-8859-10 iso-ir-157 iso8859-10 iso885910 l6 latin6")
_labels("iso8859-13", "iso-8859-13 iso8859-13 iso885913")
_labels("iso8859-14", "iso-8859-14 iso8859-14 iso885914")
_labels("iso8859-15", "csisolatin9 iso-8859-15 iso8859-15 iso885915 iso_8859-15 l9")
_labels("iso8859-16", "iso-8859-16")
_labels("koi8-r", "cskoi8r koi koi8 koi8-r koi8_r")
_labels("koi8-u", "koi8-ru koi8-u")
_labels("mac-roman", "csmacintosh mac macintosh x-mac-roman")
_labels("cp874", "dos-874 iso-8859-11 iso8859-11 iso885911 tis-620 windows-874")
_labels("cp1250", "cp1250 windows-1250 x-cp1250")
_labels("cp1251", "cp1251 windows-1251 x-cp1251")
# Browsers decode every latin-1 / ASCII label as windows-1252 (0x80-0x9F are printable).
_labels(
    "cp1252",
    "ansi_x3.4-1968 ascii cp1252 cp819 csisolatin1 ibm819 iso-8859-1 iso-ir-100 iso8859-1 "
    "iso88591 iso_8859-1 iso_8859-1:1987 l1 latin1 us-ascii windows-1252 x-cp1252",
)
_labels("cp1253", "cp1253 windows-1253 x-cp1253")
_labels(
    "cp1254",
    "cp1254 csisolatin5 iso-8859-9 iso-ir-148 iso8859-9 iso88599 iso_8859-9 iso_8859-9:1989 "
    "l5 latin5 windows-1254 x-cp1254",
)
_labels("cp1255", "cp1255 windows-1255 x-cp1255")
_labels("cp1256", "cp1256 windows-1256 x-cp1256")
_labels("cp1257", "cp1257 windows-1257 x-cp1257")
_labels("cp1258", "cp1258 windows-1258 x-cp1258")
_labels("mac-cyrillic", "x-mac-cyrillic x-mac-ukrainian")
# GBK and gb18030 are two WHATWG encodings with one decoder (gb18030's: Python's gb2312/gbk
# reject many bytes) but different encoders, which matter for link queries: GBK has no
# four-byte codes (a character outside it is sent as an NCR) and encodes U+20AC as 0x80.
_labels("gbk", "chinese csgb2312 csiso58gb231280 gb2312 gb_2312 gb_2312-80 gbk iso-ir-58 x-gbk")
_labels("gb18030", "gb18030")
# WHATWG Big5 includes the HKSCS extensions.
_labels("big5hkscs", "big5 big5-hkscs cn-big5 csbig5 x-x-big5")
_labels("euc_jp", "cseucpkdfmtjapanese euc-jp x-euc-jp")
# The _ext codec also reads JIS X 0201 katakana, which the WHATWG decoder accepts.
_labels("iso2022_jp_ext", "csiso2022jp iso-2022-jp")
# WHATWG Shift_JIS is windows-31j: it has the NEC/IBM extensions Python's shift_jis lacks.
_labels("cp932", "csshiftjis ms932 ms_kanji shift-jis shift_jis sjis windows-31j x-sjis")
# WHATWG EUC-KR is windows-949 (Unified Hangul Code), a superset of EUC-KR.
_labels(
    "cp949",
    "cseuckr csksc56011987 euc-kr iso-ir-149 korean ks_c_5601-1987 ks_c_5601-1989 ksc5601 "
    "ksc_5601 windows-949",
)
# Encodings browsers refuse to decode (a security measure): the whole body is one U+FFFD.
_labels("replacement", "csiso2022kr hz-gb-2312 iso-2022-cn iso-2022-cn-ext iso-2022-kr replacement")
_labels("utf-16-be", "unicodefffe utf-16be")
_labels("utf-16-le", "csunicode iso-10646-ucs-2 ucs-2 unicode unicodefeff utf-16 utf-16le")
# x-user-defined maps 0x80-0xFF to the Private Use Area; Python has no codec for it, and
# no real page relies on it, so it decodes as windows-1252 (ASCII is identical).
_labels("cp1252", "x-user-defined")

_REPLACEMENT = "replacement"
# Encodings decoded with another codec than their name (see the GBK note above).
_DECODER = {"gbk": "gb18030"}
_UTF16 = ("utf-16-le", "utf-16-be")
_ASCII_WS = " \t\n\x0c\r"


def lookup_charset(label: str | bytes | None) -> str | None:
    """Python codec name for a WHATWG encoding label, or None when the label is unknown.

    "Get an encoding": strip ASCII whitespace, ASCII-lowercase, look the label up. The
    codec is the one that decodes the encoding (``gbk`` labels give ``gb18030``).
    """
    encoding = _encoding_for(label)
    return _DECODER.get(encoding, encoding) if encoding is not None else None


def _encoding_for(label: str | bytes | None) -> str | None:
    """The encoding a label names, as a Python codec name (``gbk`` stays ``gbk``)."""
    if label is None:
        return None
    if isinstance(label, bytes):
        label = label.decode("latin-1")
    return _WHATWG_LABELS.get(label.strip(_ASCII_WS).lower())


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
    essence = content_type.split(";", 1)[0].strip(_ASCII_WS).lower()
    if essence in _UNKNOWN_ESSENCES or not _MIME_TOKEN.match(essence):
        return None
    return essence


def _content_type_charset(content_type: str | None) -> str | None:
    """The first ``charset`` parameter of a Content-Type header (quotes removed), if any."""
    if not content_type or "charset" not in content_type.lower():
        return None
    for param in content_type.split(";")[1:]:
        name, eq, value = param.partition("=")
        if eq and name.strip(_ASCII_WS).lower() == "charset":
            value = value.strip(_ASCII_WS)
            if value[:1] == '"':
                value = value[1:].split('"', 1)[0]
            return value
    return None


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


def is_html(content_type: str | None, body: bytes) -> bool:
    """True if the response is an HTML document the crawler should parse for links.

    The Content-Type decides (``text/html``, ``application/xhtml+xml``); when it is absent,
    empty, unparsable or one of the "unknown" types, the first bytes are sniffed the way
    browsers do (WHATWG MIME Sniffing: skip a BOM and whitespace, then look for an HTML
    tag such as ``<!DOCTYPE html``, ``<html``, ``<head``, ``<body``, ``<p``, ``<!--``).
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
    except Exception:  # noqa: BLE001 - web input must not raise (invariant 7); "not HTML" is safe
        return False


# --------------------------------------------------------------------------------------
# Charset detection: BOM, transport layer, then the HTML spec's prescan.

_BOMS = ((b"\xef\xbb\xbf", "utf-8"), (b"\xff\xfe", "utf-16-le"), (b"\xfe\xff", "utf-16-be"))
_WS_BYTES = b" \t\n\x0c\r"
# "Get an attribute" (HTML spec, prescan): leading whitespace and '/' are skipped; a name
# runs to '=', whitespace, '/' or '>' (a leading '=' belongs to the name); the value is
# quoted (to the matching quote) or runs to whitespace or '>'.
_PRESCAN_ATTR = re.compile(
    rb"[ \t\n\x0c\r/]*([^ \t\n\x0c\r/>][^ \t\n\x0c\r/>=]*)"
    rb"(?:[ \t\n\x0c\r]*=[ \t\n\x0c\r]*(?:\"([^\"]*)\"?|'([^']*)'?|([^ \t\n\x0c\r>]*)))?"
)


def _charset_from_meta_content(content: bytes) -> bytes | None:
    """HTML spec "algorithm for extracting a character encoding from a meta element"."""
    lower = content.lower()
    pos = 0
    n = len(lower)
    while True:
        i = lower.find(b"charset", pos)
        if i < 0:
            return None
        j = i + 7
        while j < n and lower[j] in _WS_BYTES:
            j += 1
        if j >= n or lower[j] != 0x3D:  # '='; otherwise look for the next "charset"
            pos = j
            continue
        j += 1
        while j < n and lower[j] in _WS_BYTES:
            j += 1
        if j >= n:
            return None
        quote = lower[j]
        if quote in (0x22, 0x27):
            end = content.find(bytes((quote,)), j + 1)
            return None if end < 0 else content[j + 1 : end]
        k = j
        while k < n and lower[k] not in _WS_BYTES and lower[k] != 0x3B:  # ';'
            k += 1
        return content[j:k]


def _prescan(head: bytes) -> str | None:
    """HTML spec "prescan a byte stream to determine its encoding" over ``head``.

    Walks tags the way the spec does (comments, end tags, ``<!``/``<?`` and other tags'
    attributes are skipped, so a ``<meta`` inside an attribute value does not count) and
    returns the Python codec of the first ``<meta>`` that declares a known encoding.
    """
    n = len(head)
    pos = 0
    lower = head.lower()
    while True:
        lt = head.find(b"<", pos)
        if lt < 0 or lt + 1 >= n:
            return None
        if lower.startswith(b"<!--", lt):
            # Ends at the first '>' preceded by "--" after the '<' ("<!-->" is complete).
            end = head.find(b"-->", lt + 2)
            if end < 0:
                return None
            pos = end + 3
            continue
        if lower.startswith(b"<meta", lt) and lt + 5 < n and head[lt + 5] in b" \t\n\x0c\r/":
            found = _prescan_meta(head, lt + 5)
            if isinstance(found, str):
                return found
            pos = found
            continue
        nxt = head[lt + 1]
        # (byte | 0x20) folds ASCII upper case onto lower case; no other byte lands in a-z.
        letter = 0x61 <= (nxt | 0x20) <= 0x7A
        if letter or (nxt == 0x2F and lt + 2 < n and 0x61 <= (head[lt + 2] | 0x20) <= 0x7A):
            # A start or end tag: skip its name, then its attributes (quoted values may
            # contain '>' or '<meta').
            p = lt + 1
            while p < n and head[p] not in b" \t\n\x0c\r>":
                p += 1
            while True:
                m = _PRESCAN_ATTR.match(head, p)
                if m is None or m.end() == p:
                    break
                p = m.end()
            pos = p + 1
            continue
        if nxt in (0x21, 0x2F, 0x3F):  # "<!", "</", "<?": skip to the next '>'
            end = head.find(b">", lt + 1)
            if end < 0:
                return None
            pos = end + 1
            continue
        pos = lt + 1


def _prescan_meta(head: bytes, p: int) -> str | int:
    """Attributes of one ``<meta``: the codec it declares, or the position after it."""
    seen: set[bytes] = set()
    got_pragma = False
    need_pragma: bool | None = None
    charset: bytes | None = None
    while True:
        m = _PRESCAN_ATTR.match(head, p)
        if m is None or m.end() == p:
            break
        p = m.end()
        name = m.group(1).lower()
        if name in seen:
            continue
        seen.add(name)
        dq, sq, bare = m.group(2, 3, 4)
        value = dq if dq is not None else sq if sq is not None else bare or b""
        if name == b"http-equiv":
            got_pragma = got_pragma or value.lower() == b"content-type"
        elif name == b"content" and charset is None:
            found = _charset_from_meta_content(value)
            if found is not None:
                charset, need_pragma = found, True
        elif name == b"charset":
            charset, need_pragma = value, False
    if need_pragma is None or (need_pragma and not got_pragma) or charset is None:
        return p + 1
    codec = _encoding_for(charset)
    if codec is None:
        return p + 1
    # A page whose <meta> was readable as ASCII is not UTF-16; x-user-defined is mapped
    # to windows-1252 in the table already.
    return "utf-8" if codec in _UTF16 else codec


def _bom(body: bytes) -> tuple[str, int] | None:
    for bom, codec in _BOMS:
        if body.startswith(bom):
            return codec, len(bom)
    return None


def detect_charset(body: bytes, content_type: str | None) -> str:
    """The Python codec to decode ``body`` with (BOM > Content-Type > meta > UTF-8).

    Unknown labels are skipped (the next source decides), as the HTML spec does. Never
    raises.
    """
    try:
        encoding = _detect(body, content_type)[0]
        return _DECODER.get(encoding, encoding)
    except Exception:  # noqa: BLE001 - web input must not raise (invariant 7)
        return "utf-8"


def _detect(body: bytes, content_type: str | None) -> tuple[str, int]:
    """(encoding, number of BOM bytes to skip); ``_DECODER`` maps the encoding to its
    decoding codec."""
    bom = _bom(body)
    if bom is not None:
        return bom
    codec = _encoding_for(_content_type_charset(content_type))
    if codec is not None:
        return codec, 0
    head = body[:1024]
    # Fast path: both <meta charset> and http-equiv content need the word "charset".
    if b"charset" in head or b"charset" in head.lower():
        codec = _prescan(head)
        if codec is not None:
            return codec, 0
    if len(body) > 1024:
        codec = _late_meta_charset(body)
        if codec is not None:
            return codec, 0
    return "utf-8", 0


# The tokens of Blink's scan that matter: a comment, a start tag whose content is text
# (script, style, title), a <meta> that mentions "charset", or any tag that does not
# belong in <head> (which ends it). Other head tags (link, base, a meta without charset,
# their end tags) change nothing and are skipped by the regex engine. Like the rest of
# this module it does not track attribute quoting: a "<div" inside an attribute value of
# a head tag ends the head early (in practice harmless: the window check follows).
_LATE_TOKEN = re.compile(
    rb"<(?:(!--)|((?:script|style|title)(?=[\t\n\x0c\r />]))|(meta(?=[\t\n\x0c\r /])[^>]*?charset)"
    rb"|(?!(?:link|meta|base|object|noscript|html|head)[\t\n\x0c\r /]|(?:link|meta|base|object|noscript|html|head)>)[A-Za-z]"
    rb"|/(?!(?:script|noscript|style|link|meta|object|title|base)[\t\n\x0c\r />])[A-Za-z])",
    re.IGNORECASE,
)
_RAW_TEXT_END = {
    name: re.compile(rb"</" + name + rb"[ \t\n\x0c\r/>]", re.IGNORECASE) for name in (b"script", b"style", b"title")
}
_LATE_META_MAX_TOKENS = 4096
# Chromium has no byte limit while in <head>; this bound keeps the cost of a page with no
# declaration predictable (tests/unit/test_parse.py pins it; docs/browser-agreement.md
# counts the pages it costs).
_LATE_META_WINDOW = 32768


def _late_meta_charset(body: bytes) -> str | None:
    """A charset ``<meta>`` the 1024-byte prescan did not see, found the way Chromium does.

    Browsers obey a charset ``<meta>`` anywhere in ``<head>`` (HTML spec "change the
    encoding"): pages put one after kilobytes of inline script, and without it their
    text and link queries would be mojibake. Blink's HTMLMetaCharsetParser tokenizes
    from the start, skipping comments and the content of script/style/title, and stops
    once a tag that does not belong in ``<head>`` has been seen *and* 1024 bytes are
    consumed (so a meta early in ``<body>`` still counts, one later does not). Only runs
    when nothing was declared earlier; bounded by ``_LATE_META_WINDOW`` bytes and
    ``_LATE_META_MAX_TOKENS`` tokens, where Chromium reads the whole head.
    """
    search = _LATE_TOKEN.search
    pos = 0
    in_head = True
    for _ in range(_LATE_META_MAX_TOKENS):
        m = search(body, pos, _LATE_META_WINDOW)
        if m is None or (not in_head and m.start() >= 1024):
            return None
        comment, raw_text, meta = m.group(1, 2, 3)
        if comment is not None:
            end = body.find(b"-->", m.start() + 4)
            if end < 0:
                return None
            pos = end + 3
        elif raw_text is not None:
            closer = _RAW_TEXT_END[raw_text.lower()].search(body, m.end())
            if closer is None:
                return None
            pos = closer.start()
        elif meta is not None:
            found = _prescan_meta(body, m.start() + 5)
            if isinstance(found, str):
                return found
            pos = found
        else:  # a tag that has no place in <head>
            in_head = False
            if body[m.start() + 1 : m.start() + 10].lower() == b"plaintext":
                return None
            pos = m.end()
    return None


# --------------------------------------------------------------------------------------
# Decoding where Python's codec differs from the WHATWG decoder of the same encoding
# (measured against Chromium for every byte sequence; docs/browser-agreement.md).

# windows-125x and windows-874: bytes 0x80-0x9F that Microsoft left undefined decode to
# the C1 control of the same number (WHATWG index); Python's codecs reject them.
_C1_CODECS = frozenset("cp874 cp1250 cp1251 cp1252 cp1253 cp1254 cp1255 cp1256 cp1257 cp1258".split())


def _c1_errors(exc: UnicodeError) -> tuple[str, int]:
    if not isinstance(exc, UnicodeDecodeError):
        raise exc
    byte = exc.object[exc.start]
    if 0x80 <= byte <= 0x9F:
        return chr(byte), exc.start + 1
    if byte == 0xCA:
        # U+05BA in windows-1255, the only one of these codecs without a 0xCA (Python's
        # single-byte codecs all report their name as "charmap", so it cannot be asked).
        return "\u05ba", exc.start + 1
    return "\ufffd", exc.start + 1


def _euc_jp_errors(exc: UnicodeError) -> tuple[str, int]:
    """Rows Python's euc_jp lacks (NEC row 13, NEC-selected IBM rows 89-92): WHATWG reads
    them from the same table as Shift_JIS, so the pair is converted and decoded as cp932."""
    if not isinstance(exc, UnicodeDecodeError):
        raise exc
    data, i = exc.object, exc.start
    if i + 1 < len(data) and 0xA1 <= data[i] <= 0xFE and 0xA1 <= data[i + 1] <= 0xFE:
        row, cell = data[i] - 0xA0, data[i + 1] - 0xA0  # JIS X 0208 row and cell, 1-94
        lead = (row + 1) // 2 + (0x80 if row <= 62 else 0xC0)
        trail = cell + (0x3F if cell <= 63 else 0x40) if row % 2 else cell + 0x9E
        try:
            return bytes((lead, trail)).decode("cp932"), i + 2
        except UnicodeDecodeError:
            return "\ufffd", i + 2  # an unassigned pair is one error, as in WHATWG
    return "\ufffd", exc.end


# Big5 pairs browsers decode and Python's big5hkscs (HKSCS-2004) rejects, with lead bytes
# >= 0xA1: control pictures, the euro sign, ETEN extensions and HKSCS-2008 additions. The
# HKSCS area below 0xA1 (about 140 more) is left: docs/browser-agreement.md.
_BIG5_EXTRA = {
    0xA3E0: "\u2421", 0xA3E1: "\u20ac", 0xC6CF: "\u5ef4", 0xC6D3: "\u65e0", 0xC6D5: "\u7676",
    0xC6D7: "\u96b6", 0xC6DE: "\u3003", 0xC6DF: "\u4edd", 0xFA5F: "\u5029", 0xFA66: "\u507d",
    0xFABD: "\u5305", 0xFAC5: "\u5344", 0xFAD5: "\u537f", 0xFB48: "\u5605", 0xFBB8: "\u5a77",
    0xFBF3: "\u5e75", 0xFBF9: "\u5ed0", 0xFC4F: "\u5f58", 0xFC6C: "\u60a4", 0xFCB9: "\u6490",
    0xFCE2: "\u6674", 0xFCF1: "\u675e", 0xFDB7: "\u6c9c", 0xFDB8: "\u6e1d", 0xFDBB: "\u6e2f",
    0xFDF1: "\u716e", 0xFE52: "\u732a", 0xFE6F: "\u745c", 0xFEAA: "\u74e9", 0xFEDD: "\u7809",
}
_BIG5_EXTRA.update({0xA3C0 + i: chr(0x2400 + i) for i in range(0x20)})


def _big5_errors(exc: UnicodeError) -> tuple[str, int]:
    if not isinstance(exc, UnicodeDecodeError):
        raise exc
    data, i = exc.object, exc.start
    if i + 1 < len(data):
        ch = _BIG5_EXTRA.get(data[i] << 8 | data[i + 1])
        if ch is not None:
            return ch, i + 2
    return "\ufffd", exc.end


codecs.register_error("crawler-c1", _c1_errors)
codecs.register_error("crawler-euc-jp", _euc_jp_errors)
codecs.register_error("crawler-big5", _big5_errors)
_DECODE_ERRORS = {codec: "crawler-c1" for codec in _C1_CODECS}
_DECODE_ERRORS["euc_jp"] = "crawler-euc-jp"
_DECODE_ERRORS["big5hkscs"] = "crawler-big5"

# Characters Python decodes to something else than the WHATWG decoder, per codec: a
# regex finding any of them (so most pages skip the translate) and the mapping.
_DECODE_FIXES: dict[str, tuple[re.Pattern[str], dict[int, str]]] = {}


def _decode_fix(codec: str, pairs: dict[str, str]) -> None:
    _DECODE_FIXES[codec] = (
        re.compile("[" + re.escape("".join(pairs)) + "]"),
        {ord(old): new for old, new in pairs.items()},
    )


# KOI8-U on the web is KOI8-RU: 0xAE/0xBE are the Belarusian short U, not box drawing.
_decode_fix("koi8-u", {"\u255d": "\u045e", "\u256c": "\u040e"})
# EUC-JP uses the Microsoft variants of these JIS X 0208 characters, as Shift_JIS does.
_decode_fix(
    "euc_jp",
    {"\u301c": "\uff5e", "\u2016": "\u2225", "\u2212": "\uff0d", "\u00a2": "\uffe0",
     "\u00a3": "\uffe1", "\u00ac": "\uffe2"},
)
# GB18030-2022 (what browsers decode) gives these two-byte codes standard code points
# where Python's gb18030 (the 2005 edition) gives Private Use Area ones; U+1E3F and
# U+E7C7 trade places (0xA8BC and 0x8135F437).
_decode_fix("gb18030", {**dict(GB18030_2022_SWAPS), "\ue5e5": "\u3000", "\u1e3f": "\ue7c7"})
# Big5: symbols Python's big5hkscs reads as other look-alikes (each from one byte pair;
# 0xA241/0xA242, which Python reads as the same characters as 0xA1FE/0xA240, are left).
_decode_fix(
    "big5hkscs",
    {"\u2022": "\u2027", "\uff64": "\ufe51", "\u203e": "\u00af", "\u223c": "\uff5e", "\u2641": "\u2295",
     "\u2609": "\u2299", "\u00a5": "\uffe5", "\u00a2": "\uffe0", "\u00a3": "\uffe1"},
)


def _decode(body: bytes, codec: str) -> str:
    """``body`` decoded as the WHATWG decoder of ``codec``'s encoding does (malformed
    bytes become U+FFFD; see the tables above for where Python's codec is patched)."""
    text = body.decode(codec, _DECODE_ERRORS.get(codec, "replace"))
    fix = _DECODE_FIXES.get(codec)
    if fix is not None and fix[0].search(text):
        text = text.translate(fix[1])
    return text


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


_HEAD_SELECTOR = 'base[href], title, meta[name="robots" i]'
_STRIP_FOR_TEXT = ["script", "style", "noscript", "template", "svg"]


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
        encoding, skip = _detect(body, content_type)
        charset = _DECODER.get(encoding, encoding)
        if not html:
            return _empty(url, False, charset, meta_noindex=noindex, meta_nofollow=nofollow)
        return _parse_html(body, url, encoding, skip, noindex, nofollow, user_agent_token, max_links)
    except Exception as exc:  # noqa: BLE001 - invariant 7: web input costs one page, never the worker
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
    charset = _DECODER.get(encoding, encoding)
    if charset == "utf-8":
        data = body[skip:] if skip else body
    elif charset == _REPLACEMENT:
        data = "\ufffd".encode() if body else b""
    else:
        data = _decode(body[skip:] if skip else body, charset).encode("utf-8", "replace")
    # WHATWG URL: queries of UTF-16 / replacement documents are encoded as UTF-8; GBK
    # pages encode them with GBK although they decode with gb18030.
    url_encoding = "utf-8" if charset in _UTF16 or charset == _REPLACEMENT else encoding

    degraded = _too_deep(data)
    if degraded:
        data = _FLATTEN.sub(b" ", data)
    tree = LexborHTMLParser(data)

    # One selector pass for the head-ish elements (each css() call walks the whole tree).
    # Robots meta: name="robots" for everyone, name=TOKEN for us (ASCII case-insensitive).
    token = user_agent_token.lower() if user_agent_token else None
    if token is None:
        selector = _HEAD_SELECTOR
    elif _PRODUCT_TOKEN.match(token):
        selector = f'{_HEAD_SELECTOR}, meta[name="{token}" i]'
    else:  # not safe to put in a selector string: filter every named meta in Python
        selector = "base[href], title, meta[name]"
    base_href: str | None = None
    title: str | None = None
    seen_title = False
    for node in tree.css(selector):
        tag = node.tag
        if tag == "meta":
            attrs = node.attributes
            name = (attrs.get("name") or "").strip(_ASCII_WS).lower()
            if name == "robots" or name == token:
                ni, nf = _robots_tokens(attrs.get("content") or "")
                noindex |= ni
                nofollow |= nf
        elif tag == "base":
            if base_href is None and not _in_foreign_content(node):
                base_href = node.attributes.get("href") or ""
        elif not seen_title:  # document.title: the first <title> in tree order
            seen_title = True
            title = " ".join(node.text().split()) or None

    # HTML spec "frozen base URL": the first base element with an href, resolved against
    # the document URL with the document's encoding; unresolvable -> the document URL.
    base_url = url
    if base_href is not None:
        joined = join_url(url, base_href, url_encoding)
        # Chromium refuses data: and javascript: base URLs (the document URL stays the
        # base); without this every relative link of such a page would be lost.
        if joined is not None and not joined.startswith(_REFUSED_BASE_SCHEMES):
            base_url = joined

    nodes = tree.css(_LINKS)
    dropped = max(0, len(nodes) - max_links)
    if dropped:
        nodes = nodes[:max_links]
    links: list[Link] = []
    append = links.append
    cache: dict[str, str | None] = {}  # pages repeat hrefs (nav, pagination)
    for node in nodes:
        attrs = node.attributes
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
        append(Link(raw, resolved, link_nofollow, node.tag or "a"))
    del nodes

    text = ""
    bodyn = tree.body
    if bodyn is not None:
        # After link extraction: stripping removes <noscript>/<svg> links too.
        tree.strip_tags(_STRIP_FOR_TEXT)
        text = " ".join(bodyn.text(separator=" ").split())

    return ParsedPage(
        url=url,
        base_url=base_url,
        is_html=True,
        charset=charset,
        links=links,
        meta_nofollow=nofollow,
        meta_noindex=noindex,
        text=text,
        title=title,
        links_dropped=dropped,
        degraded=degraded,
    )
