"""User input about URLs: seed validation with a diagnosis, and the crawl's scope.

Seeds and the scope mode come from the user, so unlike the rest of :mod:`crawler.urls`
these raise: a seed that does not normalize is a :class:`SeedError` whose one-line message
says what is wrong with it, an unknown scope mode a :class:`ConfigError` (docs/invariants.md
#7, second half). :meth:`Scope.allows` itself runs per discovered link and
never raises.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from crawler.errors import ConfigError, SeedError
from crawler.urls.canonical import DEFAULT_NORMALIZER, UrlNormalizer
from crawler.urls.hosts import hostname, ipv6_literal, normalize_host, port_number, registered_domain
from crawler.urls.syntax import HTTP_SCHEMES, backslashes_to_slashes, clean, match_scheme, split_after_scheme

__all__ = ["Scope", "validate_seed"]

_PORT_LIKE = re.compile(r"[0-9]+(?:[/?#]|\Z)")
# Scope decisions remembered (cleared when full), and the longest host_key kept.
_MAX_DECISIONS = 16_384
_MAX_CACHED_KEY = 300


def _quote_seed(seed: str) -> str:
    text = repr(seed)  # repr keeps the message on one line (newlines are escaped)
    return text if len(text) <= 200 else text[:197] + "..."


def _clip(part: str) -> str:
    """A piece of a seed quoted inside a message: one line, at most 60 characters."""
    text = repr(part)[1:-1]
    return text if len(text) <= 60 else text[:57] + "..."


def _diagnose(url: str) -> str:
    """Why ``url`` does not normalize (used only for error messages, off the hot path)."""
    text = clean(url)
    if not text:
        return "is empty"
    match = match_scheme(text)
    if match is None or _PORT_LIKE.match(text, match.end()):
        # "example.com" and "localhost:8080/x" both lack a scheme.
        return f"has no scheme; write it as 'https://{_clip(text)}'"
    scheme = match.group(1).lower()
    if scheme not in HTTP_SCHEMES:
        return f"has unsupported scheme '{_clip(scheme)}:' (only http and https can be crawled)"
    rest = backslashes_to_slashes(text[match.end() :]).lstrip("/")
    authority = split_after_scheme(rest)[0]
    authority = authority[authority.rfind("@") + 1 :]
    if authority[:1] == "[":
        end = authority.find("]")
        if end < 0 or ipv6_literal(authority[1:end]) is None:
            bad = authority[: end + 1] if end >= 0 else authority
            return f"has an invalid IPv6 host '{_clip(bad)}'"
        port = authority[end + 1 :]
        if port and port[0] != ":":
            return f"has text after the IPv6 host: '{_clip(port)}'"
        port = port[1:]
    else:
        host, _, port = authority.partition(":")
        if not host:
            return "has no host (expected http://host/...)"
        if normalize_host(host) is None:
            return f"has an invalid host '{_clip(host)}'"
    if port and port_number(port) is None:
        return f"has an invalid port '{_clip(port)}' (must be a number from 0 to 65535)"
    return "cannot be parsed as a URL"


def validate_seed(url: str, normalizer: UrlNormalizer | None = None) -> str:
    """Normalize a seed URL given by the user, or raise :class:`SeedError`.

    The message is one line, quotes the seed and says what is wrong: no scheme,
    unsupported scheme, no host, invalid host, bad port, or unparseable.
    """
    if not isinstance(url, str):
        raise SeedError(f"seed {url!r} is not a string (got {type(url).__name__})")
    normalized = (normalizer or DEFAULT_NORMALIZER)(url)
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
        clean_mode = mode.strip().lower() if isinstance(mode, str) else None
        if clean_mode not in self.MODES:
            raise ConfigError(
                f"scope mode {mode!r} is not valid; use one of: {', '.join(self.MODES)}"
            )
        self.mode: str = clean_mode
        self._hosts: set[str] = set()
        self._domains: set[str] = set()
        # allows() by host_key (host[:port]); cleared when full or when seeds are added.
        self._decisions: dict[str, bool] = {}
        self.add_seeds(seeds)

    def add_seeds(self, urls: Iterable[str]) -> list[str]:
        """Widen the scope with more seeds (e.g. added while the crawl runs).

        All seeds are validated before any is added; returns their normalized forms.
        """
        if isinstance(urls, str):
            urls = [urls]  # one URL, not an iterable of characters
        normalized = [validate_seed(url) for url in urls]
        for url in normalized:
            host = hostname(url)
            self._hosts.add(host)
            self._domains.add(registered_domain(host))
        self._decisions.clear()  # a host outside the scope may be inside it now
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
        if self.mode == "any":
            return True
        # The decision depends on the URL's host and port alone (host_key, inlined: this
        # runs per discovered link), and a page's links name few of them: remembered.
        i = url.find("//")
        if i < 0:
            key = ""
        else:
            i += 2
            j = url.find("/", i)
            key = url[i:j] if j >= 0 else url[i:]
        found = self._decisions.get(key)
        if found is None:
            found = self._decide(key)
        return found

    def _decide(self, key: str) -> bool:
        host = hostname("//" + key)
        allowed = host in self._hosts if self.mode == "host" else registered_domain(host) in self._domains
        if len(key) <= _MAX_CACHED_KEY:
            if len(self._decisions) >= _MAX_DECISIONS:
                self._decisions.clear()
            self._decisions[key] = allowed
        return allowed

    def __repr__(self) -> str:
        return f"Scope(mode={self.mode!r}, hosts={len(self._hosts)}, domains={len(self._domains)})"
