"""The query of a link, encoded in the page's encoding as a browser sends it.

WHATWG URL "query state": the query is the only part of a URL encoded with the document's
encoding (the path is always UTF-8), and a character that encoding cannot represent is
sent as the HTML numeric character reference ``&#NNNN;``, percent-encoded. The encoding is
the WHATWG Encoding Standard's, which is not always Python's codec of the same name:
Python's CJK codecs add one-way "best fit" mappings (cp932: U+00A2 -> 0x8191), use other
versions of the national standards (gb18030-2005, HKSCS-2004), or pick another of two
duplicate byte sequences. Each difference handled below was measured against Chromium's
output for every code point (tools/browser_links.py, docs/browser-agreement.md); a
character none of this touches is encoded by Python's codec.
"""

from __future__ import annotations

import codecs
import functools
import re
import unicodedata
from collections.abc import Callable

from crawler.urls.encodinglabels import C1_CODECS, GB18030_2022_SWAPS, REPLACEMENT, UTF16, WHATWG_LABELS
from crawler.urls.syntax import BYTE_PCT, C0_SET, sub_non_ascii, utf8_pct

__all__ = ["encode_query"]

_WHATWG_QUERY_SET = C0_SET + " \"#<>'"  # special-query percent-encode set (http/https)
_WHATWG_QUERY_TABLE = {ord(c): BYTE_PCT[ord(c)] for c in _WHATWG_QUERY_SET}
# Byte -> text for "percent-encode after encoding": bytes >= 0x80 and bytes in the
# query set are encoded, other ASCII bytes are kept (WHATWG URL, section 1.3).
_WHATWG_QUERY_BYTES = tuple(
    BYTE_PCT[b] if b >= 0x80 or chr(b) in _WHATWG_QUERY_SET else chr(b) for b in range(256)
)

# Names outside the WHATWG label table that Python's codecs would get wrong: utf-7 is
# ASCII-compatible for the check below but no browser encodes a URL with it, and
# windows-936 is Microsoft's name for GBK, unknown to Python.
_NON_WHATWG_NAMES = {"utf-7": "utf-8", "windows-936": "gbk"}
# WHATWG URL, "encoding": UTF-16 and replacement documents encode their queries as UTF-8.
_UTF8_FOR_URLS = frozenset((*UTF16, REPLACEMENT))


@functools.lru_cache(maxsize=64)
def _query_codec(label: object) -> str:
    """Python codec for a document encoding label; UTF-8 for anything unusable.

    A WHATWG label names its encoding (``iso-8859-1`` is windows-1252); anything else is
    taken as a Python codec name (what :func:`crawler.parse.parse_page` passes).
    """
    if not isinstance(label, str) or len(label) > 64:
        return "utf-8"
    name = label.strip().lower()
    name = WHATWG_LABELS.get(name) or _NON_WHATWG_NAMES.get(name, name)
    if name in _UTF8_FOR_URLS:
        return "utf-8"
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

# KOI8-U on the web is KOI8-RU (0xAE/0xBE are the Belarusian short U, not box drawing), and
# windows-1255 has U+05BA at 0xCA.
_SINGLE_BYTE_FIXES: dict[str, dict[str, bytes | None]] = {
    "koi8_u": {"\u045e": b"\xae", "\u040e": b"\xbe", "\u255d": None, "\u256c": None},
    "cp1255": {"\u05ba": b"\xca"},
}


@functools.lru_cache(maxsize=64)
def _single_byte_extra(codec: str) -> dict[str, bytes | None]:
    """Characters a WHATWG single-byte encoding maps differently from Python's codec:
    the fixes above, and for windows-125x/874 the C1 controls (:data:`C1_CODECS`)."""
    name = codec.replace("-", "_")
    extra: dict[str, bytes | None] = dict(_SINGLE_BYTE_FIXES.get(name, {}))
    if name in C1_CODECS:
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


_GB_NEW_TO_OLD = {new: old for old, new in GB18030_2022_SWAPS}


def _gb18030_char(ch: str, gbk: bool = False) -> bytes | None:
    """WHATWG gb18030 encoder (the 2022 edition, :data:`GB18030_2022_SWAPS`); with
    ``gbk``, the GBK encoder (two-byte codes only, and U+20AC is 0x80)."""
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
# NFKC maps these two to combining marks; WHATWG's katakana index to the spacing ones.
_HALFWIDTH_SOUND_MARKS = {"\uff9e": "\u309b", "\uff9f": "\u309c"}


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


# Python codec name -> the WHATWG encoder of one character (None: not encodable).
_CHAR_ENCODERS: dict[str, Callable[[str], bytes | None]] = {
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
    **{codec: functools.partial(_single_byte_char, codec) for codec in C1_CODECS},
}


@functools.lru_cache(maxsize=8192)
def _encode_char_pct(codec: str, ch: str) -> str:
    """One non-ASCII character of a query, encoded and percent-encoded (cached: pages
    repeat the same few characters)."""
    data = _CHAR_ENCODERS[codec](ch)
    if data is None:
        return _ncr(ch)
    return "".join(map(_WHATWG_QUERY_BYTES.__getitem__, data))


def encode_query(query: str, encoding: str) -> str:
    """Encode a query as a browser does: WHATWG special-query set, non-ASCII in the
    document's encoding (a WHATWG label or a Python codec name; unknown -> UTF-8)."""
    query = query.translate(_WHATWG_QUERY_TABLE)
    if query.isascii():
        return query
    codec = _query_codec(encoding if isinstance(encoding, str) and len(encoding) <= 64 else "")
    if codec == "utf-8":
        return sub_non_ascii(utf8_pct, query)
    if codec.startswith("iso2022_jp"):
        return _iso2022jp_query(query)
    if codec in _CHAR_ENCODERS:

        def per_char(match: re.Match[str]) -> str:
            return "".join(_encode_char_pct(codec, ch) for ch in match.group())

        return sub_non_ascii(per_char, query)

    def legacy(match: re.Match[str]) -> str:
        data = match.group().encode(codec, "crawler-url-ncr")
        return "".join(map(_WHATWG_QUERY_BYTES.__getitem__, data))

    return sub_non_ascii(legacy, query)
