"""Tests for crawler.urls: normalization, link joining, keys, scope and seed validation."""

from __future__ import annotations

import socket
import string
from urllib.parse import urlsplit

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from crawler.errors import ConfigError, SeedError
from crawler.urls import (
    DEFAULT_TRACKING_PARAMS,
    Scope,
    UrlNormalizer,
    host_key,
    join_url,
    normalize,
    origin,
    registered_domain,
    validate_seed,
)
from crawler.urls import hosts

# --- normalization --------------------------------------------------------------------

NORMALIZE_CASES = [
    # the brief's headline example: every rule at once
    ("HTTP://Example.COM:80/a/./b/../c?utm_source=x&b=2&a=1#frag", "http://example.com/a/c?b=2&a=1"),
    # scheme and host case
    ("HTTPS://WWW.EXAMPLE.COM/Path", "https://www.example.com/Path"),
    # empty path -> "/"
    ("http://example.com", "http://example.com/"),
    ("http://example.com?x=1", "http://example.com/?x=1"),
    # default ports dropped, others kept, leading zeros and empty port removed
    ("http://example.com:80/", "http://example.com/"),
    ("https://example.com:443/", "https://example.com/"),
    ("http://example.com:443/", "http://example.com:443/"),
    ("https://example.com:80/", "https://example.com:80/"),
    ("http://example.com:0080/", "http://example.com/"),
    ("http://example.com:08080/", "http://example.com:8080/"),
    ("http://example.com:/", "http://example.com/"),
    # invalid ports
    ("http://example.com:65536/", None),
    ("http://example.com:8x/", None),
    ("http://example.com:-1/", None),
    ("http://example.com:\u0661\u0662/", None),  # Arabic-Indic digits are not a port
    ("http://example.com:80:80/", None),
    # userinfo dropped
    ("http://user:pass@example.com/x", "http://example.com/x"),
    ("http://a@b@example.com/", "http://example.com/"),
    # fragment dropped
    ("http://example.com/a#b?c", "http://example.com/a"),
    ("http://example.com/#", "http://example.com/"),
    # dot segments (RFC 3986 5.2.4), including above the root and encoded dots
    ("http://example.com/a/b/c/./../../g", "http://example.com/a/g"),
    ("http://example.com/../../x", "http://example.com/x"),
    ("http://example.com/a/..", "http://example.com/"),
    ("http://example.com/a/.", "http://example.com/a/"),
    ("http://example.com/a/%2e%2E/b", "http://example.com/b"),
    ("http://example.com/a/.htaccess", "http://example.com/a/.htaccess"),
    ("http://example.com/a/...", "http://example.com/a/..."),
    # percent-encoding: unreserved decoded, hex uppercased, reserved kept encoded
    ("http://example.com/%7e", "http://example.com/~"),
    ("http://example.com/%7Euser/%41%62%2D%2e%5F", "http://example.com/~user/Ab-._"),
    ("http://example.com/a%2fb", "http://example.com/a%2Fb"),
    ("http://example.com/a%3fb%23c%25", "http://example.com/a%3Fb%23c%25"),
    ("http://example.com/%e4%b8%ad", "http://example.com/%E4%B8%AD"),
    ("http://example.com/?q=%7e%2f%26", "http://example.com/?q=~%2F%26"),
    # a bare "%" becomes %25 (and stays so: idempotent)
    ("http://example.com/100%", "http://example.com/100%25"),
    ("http://example.com/%zz", "http://example.com/%25zz"),
    ("http://example.com/a%4%31", "http://example.com/a%2541"),
    # characters that must be encoded are; reserved delimiters are left alone
    ("http://example.com/a b", "http://example.com/a%20b"),
    ("http://example.com/ü/中", "http://example.com/%C3%BC/%E4%B8%AD"),
    ('http://example.com/<a>"{}|^`[]', "http://example.com/%3Ca%3E%22%7B%7D%7C%5E%60%5B%5D"),
    ("http://example.com/a:b@c;d=e,f+g!$&'()*", "http://example.com/a:b@c;d=e,f+g!$&'()*"),
    ("http://example.com/?a=b/c?d:e@f", "http://example.com/?a=b/c?d:e@f"),
    ("http://example.com/?q=ü s", "http://example.com/?q=%C3%BC%20s"),
    ("http://example.com/?q='x'", "http://example.com/?q=%27x%27"),
    # tracking parameters removed, order and duplicates kept, empty query drops "?"
    ("http://example.com/?b=2&utm_medium=m&a=1&b=1", "http://example.com/?b=2&a=1&b=1"),
    ("http://example.com/?utm_source=x&UTM_Campaign=y&gclid=1&fbclid=2", "http://example.com/"),
    ("http://example.com/p?x=1&fbclid=abc&msclkid=d&mc_eid=e&_ga=1&y", "http://example.com/p?x=1&y"),
    ("http://example.com/?utm%5Fsource=x&k=v", "http://example.com/?k=v"),
    ("http://example.com/?gclidx=1", "http://example.com/?gclidx=1"),  # exact names only
    ("http://example.com/?x=utm_source", "http://example.com/?x=utm_source"),
    ("http://example.com/?", "http://example.com/"),
    ("http://example.com/?&&a=1&&", "http://example.com/?a=1"),
    ("http://example.com/?a=&b", "http://example.com/?a=&b"),
    ("http://example.com/?PHPSESSID=abc&id=7", "http://example.com/?id=7"),
    # trailing slash left as is
    ("http://example.com/a/", "http://example.com/a/"),
    ("http://example.com/a", "http://example.com/a"),
    # host: trailing dot, percent-decoding, forbidden characters, empty labels
    ("http://example.com./", "http://example.com/"),
    ("http://ex%61mple.com/", "http://example.com/"),
    ("http://a[b].com/x", None),
    ("http://a b.com/", None),
    ("http://a%2Fb.com/", None),
    ("http://a..b.com/", None),
    ("http://.a.com/", None),
    ("http://example.com../", None),
    ("http://a_b-c.example.com/", "http://a_b-c.example.com/"),
    # IDNA both ways (UTS #46, non-transitional, as browsers)
    ("http://bücher.de/", "http://xn--bcher-kva.de/"),
    ("http://BÜCHER.de/", "http://xn--bcher-kva.de/"),
    ("http://xn--bcher-kva.de/", "http://xn--bcher-kva.de/"),
    ("http://XN--BCHER-KVA.DE/", "http://xn--bcher-kva.de/"),
    ("http://faß.de/", "http://xn--fa-hia.de/"),
    ("http://例え.テスト/", "http://xn--r8jz45g.xn--zckzah/"),
    ("http://example。com/", "http://example.com/"),  # ideographic full stop
    ("http://xn--a.com/", None),  # Punycode that does not round-trip
    ("http://\ufffd.com/", None),  # U+FFFD is disallowed by UTS #46
    ("http://ex\uff0fample.com/", None),  # full-width solidus maps to "/"
    # IPv4 (WHATWG number forms) and IPv6 literals
    ("http://127.0.0.1:8080/", "http://127.0.0.1:8080/"),
    ("http://0x7f.1/", "http://127.0.0.1/"),
    ("http://2130706433/", "http://127.0.0.1/"),
    ("http://0177.0.0.1/", "http://127.0.0.1/"),
    ("http://1.2.3.256/", None),
    ("http://1.2.3.4.5/", None),
    ("http://example.1/", None),
    ("http://[::1]/", "http://[::1]/"),
    ("http://[2001:DB8::0:1]:8080/x", "http://[2001:db8::1]:8080/x"),
    ("http://[2001:db8:0:0:1:0:0:1]/", "http://[2001:db8::1:0:0:1]/"),
    ("http://[::ffff:1.2.3.4]/", "http://[::ffff:102:304]/"),
    ("https://[::1]:443/", "https://[::1]/"),
    ("http://[::1/", None),
    ("http://[::zz]/", None),
    ("http://[fe80::1%25eth0]/", None),
    ("http://[::1]x/", None),
    # WHATWG input cleanup: C0/space trimmed, tab/newline removed, backslashes, slashes
    ("  http://example.com/a\t\n/b \r\n", "http://example.com/a/b"),
    ("\x00http://example.com/\x1f", "http://example.com/"),
    ("http:\\\\example.com\\a\\b?x=\\", "http://example.com/a/b?x=%5C"),
    ("http:example.com/x", "http://example.com/x"),
    ("http:///example.com/x", "http://example.com/x"),
    # not http(s), or no host
    ("javascript:alert(1)", None),
    ("mailto:someone@example.com", None),
    ("ftp://example.com/", None),
    ("data:text/html,hi", None),
    ("//example.com/", None),
    ("/relative/path", None),
    ("example.com", None),
    ("http://", None),
    ("http:///", None),
    ("http://user@/x", None),
    ("http://:80/", None),
    ("", None),
    ("   ", None),
]


@pytest.mark.parametrize(("url", "expected"), NORMALIZE_CASES)
def test_normalize_table(url: str, expected: str | None) -> None:
    assert normalize(url) == expected


@pytest.mark.parametrize(("url", "expected"), [c for c in NORMALIZE_CASES if c[1]])
def test_normalize_is_idempotent_on_table(url: str, expected: str) -> None:
    assert normalize(expected) == expected


def test_sort_query_sorts_by_name_then_value_and_keeps_duplicates() -> None:
    n = UrlNormalizer(sort_query=True)
    assert n("http://e.com/?b=2&a=9&b=1&a1=0&utm_id=4") == "http://e.com/?a=9&a1=0&b=1&b=2"
    # the default keeps document order: different order, different URL
    assert normalize("http://e.com/?b=1&a=1") != normalize("http://e.com/?a=1&b=1")
    assert n("http://e.com/?b=1&a=1") == n("http://e.com/?a=1&b=1")


def test_custom_tracking_params_exact_and_prefix() -> None:
    n = UrlNormalizer(tracking_params=["ref", "pk_*"])
    assert n("http://e.com/?ref=x&pk_campaign=1&PK_KWD=2&utm_source=s&q=1") == (
        "http://e.com/?utm_source=s&q=1"
    )
    assert normalize("http://e.com/?ref=x&utm_source=s", tracking_params=["ref"]) == (
        "http://e.com/?utm_source=s"
    )
    assert UrlNormalizer(tracking_params=())("http://e.com/?utm_source=s&&") == (
        "http://e.com/?utm_source=s"
    )
    assert UrlNormalizer(tracking_params=["*"])("http://e.com/p?a=1&b=2") == "http://e.com/p"


@pytest.mark.parametrize("bad", ["utm_source", [""], ["ok", 3]])
def test_tracking_params_config_errors(bad: object) -> None:
    with pytest.raises(ConfigError, match="tracking_params"):
        UrlNormalizer(tracking_params=bad)  # type: ignore[arg-type]


def test_default_tracking_params_are_documented_names() -> None:
    assert "utm_*" in DEFAULT_TRACKING_PARAMS
    for name in ("gclid", "fbclid", "msclkid", "dclid", "yclid", "mc_cid", "mc_eid", "_ga", "_gl"):
        assert name in DEFAULT_TRACKING_PARAMS
    assert "ref" not in DEFAULT_TRACKING_PARAMS  # content-selecting on many sites


@pytest.mark.parametrize("value", [None, 3, b"http://e.com/", ["http://e.com/"]])
def test_normalize_non_string_returns_none(value: object) -> None:
    assert normalize(value) is None  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        # int() refuses strings of over 4300 digits; such ports/addresses must not raise
        ("http://" + "1" * 5000 + "/", None),
        ("http://a.com:" + "9" * 5000 + "/", None),
        ("http://a.com:" + "0" * 5000 + "8080/", "http://a.com:8080/"),
        ("http://0x" + "f" * 5000 + "/", None),
        ("http://0" + "7" * 5000 + "/", None),
        ("http://0x00000000007f.1/", "http://127.0.0.1/"),
        # DNS length limit (253), checked before IDNA (Punycode is quadratic)
        ("http://" + "a" * 249 + ".com/", "http://" + "a" * 249 + ".com/"),
        ("http://" + "a" * 250 + ".com/", None),
        ("http://" + "ü" * 100_000 + ".com/", None),
    ],
)
def test_normalize_huge_numbers_and_hosts(url: str, expected: str | None) -> None:
    assert normalize(url) == expected


def test_lone_surrogates_become_replacement_character() -> None:
    assert normalize("http://e.com/\ud800x") == "http://e.com/%EF%BF%BDx"
    assert normalize("http://e\ud800.com/") is None


# --- join_url -------------------------------------------------------------------------

BASE = "http://example.com/a/b/c?q#f"

JOIN_CASES = [
    # RFC 3986 5.4.1 normal examples (adapted to an http base)
    ("g", "http://example.com/a/b/g"),
    ("./g", "http://example.com/a/b/g"),
    ("g/", "http://example.com/a/b/g/"),
    ("/g", "http://example.com/g"),
    ("//g", "http://g/"),
    ("?y", "http://example.com/a/b/c?y"),
    ("g?y", "http://example.com/a/b/g?y"),
    ("#s", "http://example.com/a/b/c?q#s"),
    ("g#s", "http://example.com/a/b/g#s"),
    ("", "http://example.com/a/b/c?q"),
    (".", "http://example.com/a/b/"),
    ("..", "http://example.com/a/"),
    ("../g", "http://example.com/a/g"),
    ("../..", "http://example.com/"),
    # ".." above the root is dropped
    ("../../..", "http://example.com/"),
    ("../../../g", "http://example.com/g"),
    ("/./g/../../h", "http://example.com/h"),
    ("g;x=1/./y", "http://example.com/a/b/g;x=1/y"),
    # WHATWG: whitespace trimmed at the ends, tab/newline removed inside
    ("  g  ", "http://example.com/a/b/g"),
    ("\n\t g\r\n", "http://example.com/a/b/g"),
    ("/pa\nth/to\tpage?x=\n1", "http://example.com/path/topage?x=1"),
    ("\x00\x01/g\x1f", "http://example.com/g"),
    # WHATWG: backslash is a slash in http(s) (not in the query)
    ("\\g\\h", "http://example.com/g/h"),
    ("\\\\host\\x", "http://host/x"),
    ("/\\host/x", "http://host/x"),
    ("g\\h?a\\b", "http://example.com/a/b/g/h?a\\b"),
    # scheme-relative, extra slashes, empty host
    ("//other.org/x?y#z", "http://other.org/x?y#z"),
    ("///other.org/x", "http://other.org/x"),
    ("//", None),
    ("http://", None),
    # same special scheme without slashes is relative (WHATWG), another is absolute
    ("http:g", "http://example.com/a/b/g"),
    ("http:/g", "http://example.com/g"),
    ("http:?y", "http://example.com/a/b/c?y"),
    ("https:g", "https://g/"),
    ("https:/other.org/x", "https://other.org/x"),
    ("HTTPS://Other.ORG", "https://Other.ORG/"),  # host is the normalizer's job
    # absolute URLs
    ("http://other.org/p/../q", "http://other.org/q"),
    ("http://u:p@h:81/x", "http://u:p@h:81/x"),
    ("//[::1]:8080/x", "http://[::1]:8080/x"),
    # non-http(s) schemes are returned absolute, scheme lowercased
    ("mailto:Someone@Example.com", "mailto:Someone@Example.com"),
    ("JavaScript:void(0)", "javascript:void(0)"),
    ("data:text/html,<b>x</b>", "data:text/html,<b>x</b>"),
    ("tel:+1-555-0100", "tel:+1-555-0100"),
    ("ftp://ftp.example.com/f", "ftp://ftp.example.com/f"),
    # percent-encoding of what a browser encodes (path: UTF-8)
    ("a b", "http://example.com/a/b/a%20b"),
    ("é/中", "http://example.com/a/b/%C3%A9/%E4%B8%AD"),
    ("%7e%zz", "http://example.com/a/b/%7e%zz"),  # existing escapes untouched
    ("/%2e%2E/x", "http://example.com/x"),  # encoded dot segments
    ("?a='x\"<>", "http://example.com/a/b/c?a=%27x%22%3C%3E"),
    ("#a b`", "http://example.com/a/b/c?q#a%20b%60"),
    ("?q=é€", "http://example.com/a/b/c?q=%C3%A9%E2%82%AC"),
]


@pytest.mark.parametrize(("href", "expected"), JOIN_CASES)
def test_join_url_table(href: str, expected: str | None) -> None:
    assert join_url(BASE, href) == expected


QUERY_ENCODING_CASES = [
    # Cyrillic in windows-1251: т=F2 е=E5 с=F1 т=F2
    ("windows-1251", "?q=тест", "http://h.test/x?q=%F2%E5%F1%F2"),
    ("cp1251", "?q=тест", "http://h.test/x?q=%F2%E5%F1%F2"),
    # Shift_JIS: テ=83 65 ス=83 58 ト=83 67; trail bytes that are ASCII stay raw, as in
    # browsers ('e', 'X', 'g')
    ("shift_jis", "?q=テスト", "http://h.test/x?q=%83e%83X%83g"),
    ("Shift_JIS", "/テ?q=テ", "http://h.test/%E3%83%86?q=%83e"),  # the path is always UTF-8
    # gb2312 is GBK on the web: 中=D6 D0 文=CE C4
    ("gb2312", "?q=中文", "http://h.test/x?q=%D6%D0%CE%C4"),
    # iso-8859-1 is windows-1252 on the web: €=80 é=E9
    ("iso-8859-1", "?q=€é", "http://h.test/x?q=%80%E9"),
    # characters the encoding lacks become an HTML numeric character reference
    ("windows-1251", "?q=é漢", "http://h.test/x?q=%26%23233%3B%26%2328450%3B"),
    # the href's own '&', '#', ';' keep their meaning next to encoded ones
    ("windows-1251", "?a=ж&b=1#ж", "http://h.test/x?a=%E6&b=1#%D0%B6"),
    # unknown, non-text or UTF-16 labels fall back to UTF-8
    ("no-such-encoding", "?q=é", "http://h.test/x?q=%C3%A9"),
    ("base64", "?q=é", "http://h.test/x?q=%C3%A9"),
    ("utf-16le", "?q=é", "http://h.test/x?q=%C3%A9"),
    ("UTF-8", "?q=é", "http://h.test/x?q=%C3%A9"),
]


@pytest.mark.parametrize(("encoding", "href", "expected"), QUERY_ENCODING_CASES)
def test_join_url_query_uses_document_encoding(encoding: str, href: str, expected: str) -> None:
    assert join_url("http://h.test/x", href, encoding) == expected


def test_join_url_absolute_href_query_also_uses_document_encoding() -> None:
    assert join_url("http://a.test/", "http://b.test/?q=тест", "windows-1251") == (
        "http://b.test/?q=%F2%E5%F1%F2"
    )


@pytest.mark.parametrize(
    ("label", "href", "expected"),
    [
        # WHATWG labels Python has no alias for still name their encoding, as in a browser
        ("x-cp1251", "?q=тест", "http://h.test/x?q=%F2%E5%F1%F2"),
        ("koi8-ru", "?q=тў", "http://h.test/x?q=%D4%AE"),  # KOI8-U with the Belarusian ў
        ("iso88592", "?q=łź", "http://h.test/x?q=%B3%BC"),
        ("mac", "?q=é", "http://h.test/x?q=%8E"),
    ],
)
def test_join_url_query_knows_every_whatwg_label(label: str, href: str, expected: str) -> None:
    assert join_url("http://h.test/x", href, label) == expected


def test_join_url_reads_a_label_as_the_page_decoder_does() -> None:
    # One label table (crawler.urls.encodinglabels) decodes a page and encodes its links' queries,
    # so a label and the codec parse_page decoded with give the same link; UTF-16 and
    # replacement documents send UTF-8 (WHATWG URL, "encoding").
    from crawler.urls.encodinglabels import REPLACEMENT, UTF16, WHATWG_LABELS

    href = "?q=é€жł中ﾃ¥"
    for label, codec in WHATWG_LABELS.items():
        url_codec = "utf-8" if codec in (*UTF16, REPLACEMENT) else codec
        assert join_url("http://h.test/x", href, label) == join_url("http://h.test/x", href, url_codec), label


@pytest.mark.parametrize(
    ("base", "href", "expected"),
    [
        ("about:blank", "g", None),  # relative href needs an http(s) base
        ("about:blank", "http://x.test/", "http://x.test/"),
        ("not a url", "//h.test/x", None),
        ("http://", "g", None),
        (None, "http://x.test/a", "http://x.test/a"),
        ("http://x.test", "g", "http://x.test/g"),  # base without path
        ("HTTP://x.test/a/b", "c", "http://x.test/a/c"),
        ("http://x.test/a/../b/./c", "d", "http://x.test/b/d"),
        ("https://x.test/", "//y.test/", "https://y.test/"),
    ],
)
def test_join_url_bases(base: object, href: str, expected: str | None) -> None:
    assert join_url(base, href) == expected  # type: ignore[arg-type]


@pytest.mark.parametrize("href", [None, 3, b"g"])
def test_join_url_non_string_href(href: object) -> None:
    assert join_url(BASE, href) is None  # type: ignore[arg-type]


def test_join_then_normalize_pipeline() -> None:
    joined = join_url("https://Example.com/dir/page.html", " ../Other Dir/./x.html?utm_source=a&id=1#top ")
    assert joined == "https://Example.com/Other%20Dir/x.html?utm_source=a&id=1#top"
    assert normalize(joined) == "https://example.com/Other%20Dir/x.html?id=1"
    # a browser-style path character that RFC 3986 forbids gets one canonical spelling
    bar = join_url(BASE, "/a|b")
    assert bar is not None and normalize(bar) == normalize("http://example.com/a%7Cb")


# --- keys -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("url", "key", "org"),
    [
        ("http://example.com/a?b", "example.com", "http://example.com"),
        ("https://example.com:8443/", "example.com:8443", "https://example.com:8443"),
        ("http://[::1]:8080/x", "[::1]:8080", "http://[::1]:8080"),
        ("http://127.0.0.1/", "127.0.0.1", "http://127.0.0.1"),
        ("no slashes", "", ""),
    ],
)
def test_host_key_and_origin(url: str, key: str, org: str) -> None:
    assert host_key(url) == key
    assert origin(url) == org


def test_host_key_of_normalized_urls_merges_spellings() -> None:
    spellings = ["HTTP://Example.COM:80/a", "http://example.com./b", "http://u@example.com/"]
    assert {host_key(normalize(u)) for u in spellings} == {"example.com"}  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("host", "expected"),
    [
        ("www.bbc.co.uk", "bbc.co.uk"),
        ("a.b.example.com", "example.com"),
        ("example.com:8080", "example.com"),
        ("WWW.Example.COM.", "example.com"),
        ("me.github.io", "me.github.io"),  # private suffixes count: user sites differ
        ("co.uk", "co.uk"),  # a bare public suffix is its own domain
        ("a.b.xn--p1ai", "b.xn--p1ai"),  # .рф in Punycode
        ("a.b.test", "b.test"),  # no public suffix: last two labels
        ("localhost", "localhost"),
        ("localhost:8000", "localhost"),
        ("127.0.0.1", "127.0.0.1"),
        ("10.0.0.1:8080", "10.0.0.1"),
        ("[::1]:8080", "[::1]"),
    ],
)
def test_registered_domain(host: str, expected: str) -> None:
    assert registered_domain(host) == expected


def test_registered_domain_never_touches_the_network(monkeypatch: pytest.MonkeyPatch) -> None:
    attempts: list[tuple] = []

    def refuse(*args: object, **kwargs: object) -> None:
        attempts.append(args)
        raise OSError("network access attempted")

    monkeypatch.setattr(socket.socket, "connect", refuse)
    monkeypatch.setattr(socket, "create_connection", refuse)
    monkeypatch.setattr(socket, "getaddrinfo", refuse)
    hosts._tld_extractor.cache_clear()
    registered_domain.cache_clear()
    try:
        assert registered_domain("news.bbc.co.uk") == "bbc.co.uk"
        assert registered_domain("x.y.z.example.org") == "example.org"
    finally:
        registered_domain.cache_clear()
    assert attempts == []


# --- scope ----------------------------------------------------------------------------


def test_scope_host_mode_compares_hostname_without_port() -> None:
    scope = Scope("host", ["https://Example.com/start"])
    assert scope.allows("https://example.com/other")
    assert scope.allows("http://example.com:8080/x")
    assert not scope.allows("https://www.example.com/")
    assert not scope.allows("https://example.org/")
    assert not scope.allows("")
    assert scope.hosts == frozenset({"example.com"})


def test_scope_domain_mode_uses_registered_domain() -> None:
    scope = Scope("domain", ["https://www.bbc.co.uk/news"])
    assert scope.allows("https://sport.bbc.co.uk/x")
    assert scope.allows("http://bbc.co.uk/")
    assert not scope.allows("https://other.co.uk/")
    gh = Scope("domain", ["https://me.github.io/"])
    assert gh.allows("https://me.github.io/blog")
    assert not gh.allows("https://you.github.io/")


def test_scope_any_mode_and_mode_spelling() -> None:
    assert Scope("any", []).allows("http://anything.test/")
    assert Scope(" Host ", ["http://a.test/"]).mode == "host"


@pytest.mark.parametrize("mode", ["hosts", "", None, "everything"])
def test_scope_bad_mode_names_allowed_values(mode: object) -> None:
    with pytest.raises(ConfigError, match="host, domain, any"):
        Scope(mode, ["http://a.test/"])  # type: ignore[arg-type]


def test_scope_add_seeds_widens_scope_and_is_all_or_nothing() -> None:
    scope = Scope("host", ["http://a.test/"])
    assert not scope.allows("http://b.test/")
    assert scope.add_seeds("HTTP://B.test") == ["http://b.test/"]  # one string = one seed
    assert scope.allows("http://b.test/x")
    with pytest.raises(SeedError):
        scope.add_seeds(["http://c.test/", "ftp://d.test/"])
    assert not scope.allows("http://c.test/")


def test_scope_rejects_bad_seed_at_construction() -> None:
    with pytest.raises(SeedError, match="example.com"):
        Scope("host", ["example.com"])


# --- validate_seed --------------------------------------------------------------------


def test_validate_seed_returns_normalized_url() -> None:
    assert validate_seed("  HTTPS://Example.com:443/a/../b?utm_source=x#f \n") == "https://example.com/b"


@pytest.mark.parametrize(
    ("seed", "fragments"),
    [
        ("example.com", ["'example.com'", "no scheme", "https://example.com"]),
        ("www.example.com/path", ["no scheme"]),
        ("localhost:8080/x", ["no scheme", "https://localhost:8080/x"]),
        ("ftp://example.com/", ["unsupported scheme 'ftp:'", "http and https"]),
        ("mailto:a@b.c", ["unsupported scheme 'mailto:'"]),
        ("http://", ["no host"]),
        ("https:///", ["no host"]),
        ("http://user@:80/", ["no host"]),
        ("http://example.com:99999/", ["invalid port '99999'", "0 to 65535"]),
        ("http://example.com:8o/", ["invalid port '8o'"]),
        ("http://a[b].com/x", ["invalid host 'a[b].com'"]),
        ("http://exa mple.com/", ["invalid host"]),
        ("http://[::zz]/", ["invalid IPv6 host '[::zz]'"]),
        ("http://[::1]junk/", ["after the IPv6 host"]),
        ("", ["is empty"]),
        ("   ", ["is empty"]),
    ],
)
def test_validate_seed_messages(seed: str, fragments: list[str]) -> None:
    with pytest.raises(SeedError) as info:
        validate_seed(seed)
    message = str(info.value)
    assert "\n" not in message
    assert message.startswith("seed ")
    for fragment in fragments:
        assert fragment in message


@pytest.mark.parametrize(
    "seed",
    ["ftp://x\n" + "y" * 1000, "http://a.com:" + "9" * 5000, "http://a\n[" + "b" * 999, "x" * 3000],
)
def test_validate_seed_message_is_one_line_and_bounded(seed: str) -> None:
    with pytest.raises(SeedError) as info:
        validate_seed(seed)
    message = str(info.value)
    assert "\n" not in message and len(message) < 400


def test_validate_seed_non_string() -> None:
    with pytest.raises(SeedError, match="not a string"):
        validate_seed(42)  # type: ignore[arg-type]


def test_seed_error_is_a_config_error() -> None:
    with pytest.raises(ConfigError):
        validate_seed("nope")


# --- properties -----------------------------------------------------------------------

# RFC 3986 characters a normalized URL may contain.
_URI_CHARS = frozenset(string.ascii_letters + string.digits + "-._~!$&'()*+,;=:@/?%[]")

_any_text = st.text(st.characters(exclude_categories=()), max_size=120)  # incl. surrogates
_host_chars = st.sampled_from(
    list(string.ascii_letters + string.digits + "-._~%[]:@!$&'()*+,;=")
    + ["ü", "ß", "中", "。", "Ａ", "\u200d", "\ufffd", " ", "\t", "\\", "/", "?", "#"]
)
_path_chars = st.sampled_from(
    list(string.printable) + ["%2e", "%2F", "%7e", "%41", "%", "%zz", "é", "中", "\x00", "\x7f"]
)
_urlish = st.builds(
    lambda scheme, sep, user, host, port, path, query, frag: (
        scheme + sep + user + host + port + path + query + frag
    ),
    st.sampled_from(["http", "https", "HTTP", "hTTps", "ftp", "javascript", "", "h ttp"]),
    st.sampled_from(["://", ":", ":/", ":///", ":\\\\", "//", ""]),
    st.sampled_from(["", "user@", "u:p@", "@", "a@b@"]),
    st.one_of(
        st.lists(_host_chars, max_size=20).map("".join),
        st.sampled_from(["example.com", "[::1]", "[2001:db8::1]", "127.0.0.1", "0x7f.1", "xn--bcher-kva.de"]),
    ),
    st.sampled_from(["", ":", ":80", ":443", ":8080", ":0", ":65535", ":65536", ":x", "::1"]),
    st.lists(_path_chars, max_size=30).map("".join).map(lambda p: "/" + p),
    st.one_of(
        st.just(""),
        st.lists(
            st.sampled_from(["a=1", "utm_source=x", "b", "", "c=%7e", "d=é", "UTM_X=1", "e=&", "f='", "g= "]),
            max_size=6,
        ).map(lambda ps: "?" + "&".join(ps)),
    ),
    st.sampled_from(["", "#", "#frag", "#a?b"]),
)


def _assert_canonical(result: str) -> None:
    parts = urlsplit(result)
    assert parts.scheme in ("http", "https")
    assert parts.hostname
    _ = parts.port  # reading it raises ValueError on an invalid port
    assert not parts.fragment and "#" not in result
    assert set(result) <= _URI_CHARS
    assert normalize(result) == result


@settings(max_examples=400, suppress_health_check=[HealthCheck.too_slow])
@given(_any_text)
def test_normalize_never_raises_on_arbitrary_text(text: str) -> None:
    result = normalize(text)
    if result is not None:
        _assert_canonical(result)


@settings(max_examples=800, suppress_health_check=[HealthCheck.too_slow])
@given(_urlish)
def test_normalize_urlish_is_idempotent_and_reparses(url: str) -> None:
    result = normalize(url)
    if result is not None:
        _assert_canonical(result)


@settings(max_examples=300)
@given(_urlish, st.randoms(use_true_random=False))
def test_case_of_scheme_and_ascii_host_does_not_matter(url: str, rnd) -> None:
    result = normalize(url)
    if result is None:
        return
    scheme, rest = result.split("://", 1)
    host, slash, tail = rest.partition("/")
    mixed = "".join(c.upper() if rnd.random() < 0.5 else c for c in scheme + "://" + host)
    assert normalize(mixed + slash + tail) == result


@settings(max_examples=300)
@given(st.text(string.ascii_letters + string.digits + "-._~/", max_size=40), st.randoms(use_true_random=False))
def test_encoding_unreserved_characters_does_not_change_the_url(path: str, rnd) -> None:
    plain = normalize("http://example.com/" + path)
    encoded = "".join(
        "%%%02x" % ord(c) if c != "/" and rnd.random() < 0.5 else c for c in path
    )
    assert normalize("http://example.com/" + encoded) == plain


@settings(max_examples=400, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.one_of(_urlish, _any_text, st.just(BASE)),
    st.one_of(_any_text, _urlish, st.lists(_path_chars, max_size=20).map("".join)),
    st.sampled_from(["utf-8", "windows-1251", "shift_jis", "gb2312", "iso-8859-1", "iso-2022-jp", "bogus", ""]),
)
def test_join_url_never_raises_and_feeds_the_normalizer(base: str, href: str, encoding: str) -> None:
    joined = join_url(base, href, encoding)
    if joined is None:
        return
    assert isinstance(joined, str)
    assert "\t" not in joined and "\n" not in joined and "\r" not in joined
    result = normalize(joined)
    if result is not None:
        _assert_canonical(result)
