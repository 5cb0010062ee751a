"""The WHATWG Encoding Standard's label table, in Python codec names: one copy for the crawler.

Two parts of the crawler need to know what an encoding label means on the web: the page
decoder (:mod:`crawler.parse.charset`) and the encoder of a link's query
(:mod:`crawler.urls.query_encoding`, WHATWG URL "query state"). Both read these tables, so
a page is decoded and its links are encoded with the same encoding, as a browser does.

Python's own aliases disagree with browsers in ways that matter (``iso-8859-1`` and
``us-ascii`` are windows-1252 on the web, ``gb2312`` is GBK, ``shift_jis`` is windows-31j,
``euc-kr`` is windows-949), so a label never goes to :func:`codecs.lookup` before it has
been looked up here. Data only: no codec is registered and nothing runs at import but
building the dict.
"""

from __future__ import annotations

__all__ = ["WHATWG_LABELS", "REPLACEMENT", "UTF16", "C1_CODECS", "GB18030_2022_SWAPS"]

#: The WHATWG "replacement" encoding: browsers refuse to decode these labels (a security
#: measure) and read the whole body as one U+FFFD. Not a Python codec.
REPLACEMENT = "replacement"

#: The UTF-16 encodings. A page decoded with one of them still encodes its link queries
#: as UTF-8 (WHATWG URL, "encoding": UTF-16BE/LE and replacement become UTF-8).
UTF16: tuple[str, ...] = ("utf-16-le", "utf-16-be")

#: ASCII-lowercased label -> Python codec name of the encoding it names (WHATWG Encoding
#: Standard, "Encodings" table). GBK stays ``gbk`` here: it is decoded with the gb18030
#: decoder but has its own encoder (see :mod:`crawler.parse.charset`).
WHATWG_LABELS: dict[str, str] = {}


def _labels(codec: str, labels: str) -> None:
    for label in labels.split():
        WHATWG_LABELS[label] = codec


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
_labels(REPLACEMENT, "csiso2022kr hz-gb-2312 iso-2022-cn iso-2022-cn-ext iso-2022-kr replacement")
_labels("utf-16-be", "unicodefffe utf-16be")
_labels("utf-16-le", "csunicode iso-10646-ucs-2 ucs-2 unicode unicodefeff utf-16 utf-16le")
# x-user-defined maps 0x80-0xFF to the Private Use Area; Python has no codec for it, and
# no real page relies on it, so it is read as windows-1252 (ASCII is identical).
_labels("cp1252", "x-user-defined")

#: windows-1250...1258 and windows-874: the WHATWG index maps every byte 0x80-0x9F that
#: Microsoft left undefined to the C1 control of the same number, both ways; Python's
#: codecs reject those bytes and characters.
C1_CODECS: frozenset[str] = frozenset(
    "cp874 cp1250 cp1251 cp1252 cp1253 cp1254 cp1255 cp1256 cp1257 cp1258".split()
)

#: GB18030-2022 (what browsers implement) moved these characters from the Private Use
#: Area to their standard code points; Python's gb18030 is the 2005 edition. Each pair is
#: (the PUA character Python decodes the bytes to, the character they mean now).
GB18030_2022_SWAPS: tuple[tuple[str, str], ...] = tuple(
    zip(
        "\ue78d\ue78e\ue78f\ue790\ue791\ue792\ue793\ue794\ue795\ue796"
        "\ue7c7\ue81e\ue826\ue82b\ue82c\ue832\ue843\ue854\ue864",
        "\ufe10\ufe12\ufe11\ufe13\ufe14\ufe15\ufe16\ufe17\ufe18\ufe19"
        "\u1e3f\u9fb4\u9fb5\u9fb6\u9fb7\u9fb8\u9fb9\u9fba\u9fbb",
    )
)
