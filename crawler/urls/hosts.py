"""Hosts and ports: parsing and canonical form, politeness keys and registered domains.

:func:`normalize_host` gives the one spelling of a host the crawler keys on (IDNA,
IPv4 shorthands, trailing dot); :func:`host_key` and :func:`origin` slice a normalized URL
into the key of its politeness queue and the scope of its robots.txt; and
:func:`registered_domain` says which site a host belongs to (Public Suffix List). The
host functions return None for a host that cannot be used and never raise.
"""

from __future__ import annotations

import functools
import ipaddress
import re
from urllib.parse import unquote

import idna
import tldextract

__all__ = [
    "normalize_host",
    "ipv6_literal",
    "port_number",
    "host_key",
    "origin",
    "hostname",
    "registered_domain",
]

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


def ipv6_literal(text: str) -> str | None:
    """Validate an IPv6 literal (without brackets) and serialize it as WHATWG does (RFC
    5952 form), or None.

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


# normalize_host results by host as written. A page's links name few hosts, and the
# same ones page after page (measured on the bench pages: 88k calls, ~21% of the link
# policy's CPU), so most calls are one dict lookup. Bounded: cleared when full; hosts
# longer than a DNS name are never cached (they are refused anyway, and must not pin
# memory).
_HOST_CACHE: dict[str, str | None] = {}
_HOST_CACHE_MAX = 65_536
_MISSING = object()


def normalize_host(host: str) -> str | None:
    """Canonical host (no brackets, no port) or None; see :class:`UrlNormalizer`.

    Percent-decoded, lowercased, IDNA-encoded, one trailing dot removed, checked against
    RFC 3986 reg-name characters; a host ending in a number must be a WHATWG IPv4 address
    and comes back dotted decimal. A pure function of ``host``; results are cached.
    """
    found = _HOST_CACHE.get(host, _MISSING)
    if found is not _MISSING:
        return found  # type: ignore[return-value]  # not the sentinel: mypy cannot narrow an object() away
    result = _normalize_host(host)
    if len(host) <= _MAX_HOST_LENGTH + 1:
        if len(_HOST_CACHE) >= _HOST_CACHE_MAX:
            _HOST_CACHE.clear()
        _HOST_CACHE[host] = result
    return result


def _normalize_host(host: str) -> str | None:
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


def port_number(port: str) -> int | None:
    """Port as an int if it is ASCII digits <= 65535 (leading zeros allowed), else None."""
    if not (port.isascii() and port.isdigit()):
        return None
    digits = port.lstrip("0")
    if len(digits) > 5:  # also keeps int() away from its 4300-digit limit
        return None
    number = int(digits) if digits else 0
    return number if number <= 65535 else None


# --- keys of a normalized URL -----------------------------------------------------


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


def hostname(url: str) -> str:
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
