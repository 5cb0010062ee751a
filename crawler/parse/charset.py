"""Which encoding a fetched page is in, and its text decoded as a browser decodes it.

Follows the WHATWG Encoding Standard and the HTML spec's "determining the character
encoding" steps, in their order of precedence:

1. a byte-order mark (UTF-8, UTF-16LE, UTF-16BE) -- it also wins over everything else;
2. the ``charset=`` parameter of the HTTP Content-Type;
3. the ``<meta charset>`` / ``<meta http-equiv=Content-Type>`` found by the spec's *prescan*
   of the first 1024 bytes, else a charset ``<meta>`` later in ``<head>``, which browsers
   also end up obeying (the spec's "change the encoding"; found with Chromium's rules);
4. UTF-8 (malformed bytes become U+FFFD).

Labels map to encodings through the WHATWG label table (:mod:`crawler.urls.encodinglabels`), which
is why ``iso-8859-1`` and ``us-ascii`` decode as windows-1252, ``gb2312`` as GB18030 and
``euc-kr`` as windows-949, exactly as browsers do. Where Python's codec of an encoding
decodes some bytes differently from the WHATWG decoder, :func:`decode` patches it with
error handlers and translation tables (measured against Chromium for every byte
sequence; docs/browser-agreement.md). Runs once per page; the public functions never
raise on web input.
"""

from __future__ import annotations

import codecs
import logging
import re

from crawler.urls.encodinglabels import C1_CODECS, GB18030_2022_SWAPS, UTF16, WHATWG_LABELS

log = logging.getLogger(__name__)

__all__ = ["lookup_charset", "detect_charset", "detect_encoding", "decoding_codec", "decode", "ASCII_WS"]

#: ASCII whitespace (WHATWG Infra): what labels, MIME types and attribute values are
#: stripped of.
ASCII_WS = " \t\n\x0c\r"
# Encodings decoded with another codec than their name: GBK is decoded by the gb18030
# decoder (Python's gb2312/gbk reject many bytes browsers accept) but keeps its own
# encoder for link queries.
_DECODER = {"gbk": "gb18030"}
# Bound once: a method call on an imported name compiles to LOAD_ATTR, a bound-method
# allocation per call (see crawler.urls.syntax).
_whatwg_encoding = WHATWG_LABELS.get


def lookup_charset(label: str | bytes | None) -> str | None:
    """Python codec name for a WHATWG encoding label, or None when the label is unknown.

    "Get an encoding": strip ASCII whitespace, ASCII-lowercase, look the label up. The
    codec is the one that decodes the encoding (``gbk`` labels give ``gb18030``).
    """
    encoding = _encoding_for(label)
    return _DECODER.get(encoding, encoding) if encoding is not None else None


def decoding_codec(encoding: str) -> str:
    """The Python codec that decodes ``encoding`` (a value of the label table)."""
    return _DECODER.get(encoding, encoding)


def _encoding_for(label: str | bytes | None) -> str | None:
    """The encoding a label names, as a Python codec name (``gbk`` stays ``gbk``)."""
    if label is None:
        return None
    if isinstance(label, bytes):
        label = label.decode("latin-1")
    return _whatwg_encoding(label.strip(ASCII_WS).lower())


# --------------------------------------------------------------------------------------
# Charset detection: BOM, transport layer, then the HTML spec's prescan.


def _content_type_charset(content_type: str | None) -> str | None:
    """The first ``charset`` parameter of a Content-Type header (quotes removed), if any."""
    if not content_type or "charset" not in content_type.lower():
        return None
    for param in content_type.split(";")[1:]:
        name, eq, value = param.partition("=")
        if eq and name.strip(ASCII_WS).lower() == "charset":
            value = value.strip(ASCII_WS)
            if value[:1] == '"':
                value = value[1:].split('"', 1)[0]
            return value
    return None


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
    return "utf-8" if codec in UTF16 else codec


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
        return decoding_codec(detect_encoding(body, content_type)[0])
    except Exception as exc:  # noqa: BLE001 - web input must not raise (docs/invariants.md #7)
        # Logged, not counted: no counter is in reach of this pure helper, and the crawl
        # does not come here. Its pages go through parse_page, which calls
        # detect_encoding under its own guard; that guard records the error on the page,
        # and the pipeline counts it in ``parse_errors``.
        log.debug("charset detection failed (%r): decoding as UTF-8", exc)
        return "utf-8"


def detect_encoding(body: bytes, content_type: str | None) -> tuple[str, int]:
    """(encoding, number of BOM bytes to skip): the steps of :func:`detect_charset`,
    keeping GBK apart from gb18030 (:func:`decoding_codec` maps it to its decoder). Not
    guarded itself: :func:`detect_charset` and ``parse_page`` catch what it raises."""
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



def _c1_errors(exc: UnicodeError) -> tuple[str, int]:
    """windows-125x and windows-874 (:data:`C1_CODECS`): bytes 0x80-0x9F that Microsoft
    left undefined decode to the C1 control of the same number (WHATWG index)."""
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
_DECODE_ERRORS = {codec: "crawler-c1" for codec in C1_CODECS}
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


def decode(body: bytes, codec: str) -> str:
    """``body`` decoded as the WHATWG decoder of ``codec``'s encoding does (malformed
    bytes become U+FFFD; see the tables above for where Python's codec is patched)."""
    text = body.decode(codec, _DECODE_ERRORS.get(codec, "replace"))
    fix = _DECODE_FIXES.get(codec)
    if fix is not None and fix[0].search(text):
        text = text.translate(fix[1])
    return text
