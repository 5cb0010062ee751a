"""What one origin's robots.txt says (RFC 9309): the rules, their group selection and
the file's decoding. See crawler.robots for the decisions and the RFC sections."""

from __future__ import annotations

import logging
import math
import re
from dataclasses import dataclass, field
from typing import Callable, Protocol

from protego import Protego

from crawler.errors import ConfigError

def _protego_quote_path() -> Callable[[str], str] | None:
    """protego's own spelling of a URL's path for matching (an internal helper), or None
    when protego changed (RuleIndex is not built then)."""
    try:
        from protego._utils import _quote_path as quote_path
    except ImportError:  # pragma: no cover - protego changed
        return None
    found: Callable[[str], str] = quote_path
    return found


_quote_path = _protego_quote_path()

log = logging.getLogger(__name__)

#: RFC 9309 2.5: parse at least the first 500 KiB. We parse exactly that much at most.
ROBOTS_MAX_BYTES = 500 * 1024
#: RFC 9309 2.3.1.2: follow at least five consecutive redirects.
MAX_ROBOTS_REDIRECTS = 5
#: How long a good copy may stand in for an unreachable robots.txt (RFC 9309 2.3.1.4).
DEFAULT_STALE_OK_S = 30 * 86_400.0
#: Groups with at least this many rules are matched through a :class:`RuleIndex`.
INDEX_MIN_RULES = 64

PARSED = "parsed"
ALLOW_ALL = "allow_all"
DISALLOW_ALL = "disallow_all"
_KINDS = (PARSED, ALLOW_ALL, DISALLOW_ALL)

# The path of ``url`` is exactly /robots.txt (query and fragment do not matter).
_ROBOTS_PATH = re.compile(r"(?:[A-Za-z][A-Za-z0-9+.\-]*://[^/?#]*)?/robots\.txt(?:[?#]|$)").match


def product_token(user_agent: str) -> str:
    """The robots.txt product token of a User-Agent string, lowercased (RFC 9309 2.2.1).

    ``"raycrawl/0.1 (+https://example.org)"`` -> ``"raycrawl"``. Same rule as
    ``CrawlConfig.product_token``. Raises :class:`ConfigError` when there is none.
    """
    head = user_agent.split("/", 1)[0].split()
    if not head:
        raise ConfigError(
            f"user_agent: {user_agent!r} has no product token; start it with a name such as 'raycrawl/0.1'"
        )
    return head[0].lower()


def _is_robots_txt(url: str) -> bool:
    return "/robots.txt" in url and _ROBOTS_PATH(url) is not None


@dataclass(frozen=True, slots=True)
class RobotsRules:
    """What one origin's robots.txt says to our user agent, and for how long.

    ``kind`` is ``"parsed"`` (rules from a 2xx body), ``"allow_all"`` or ``"disallow_all"``.
    ``source_status`` is the HTTP status the rules came from (None: no response).
    ``fetched_at`` / ``expires_at`` are times of the cache's clock. ``crawl_delay`` is
    the group's ``Crawl-delay`` (or the interval implied by ``Request-rate``, whichever is
    larger), a floor for the politeness interval; None when the file names none.
    ``unreachable`` says why there was no response at all (DNS failure, address guard,
    refused, timeout) when that is what made the rules ``disallow_all``; else None.
    """

    kind: str
    source_status: int | None
    fetched_at: float
    expires_at: float
    crawl_delay: float | None = None
    _parser: Protego | None = field(default=None, repr=False, compare=False)
    # The user agent passed to protego: our product token when robots.txt has a group for
    # it, else "*" (which makes protego pick exactly the * group).
    _agent: str = field(default="*", repr=False, compare=False)
    # True when no rule can disallow anything: allow_all, or no group applies to us, or
    # our group has no Allow/Disallow lines. Skips protego entirely on the hot path.
    _always: bool = field(default=False, repr=False, compare=False)
    # The decoded text the parser saw, kept for snapshot() (parsed rules only).
    _text: str | None = field(default=None, repr=False, compare=False)
    unreachable: str | None = field(default=None, compare=False)
    # Our group's rules indexed by their literal head (large files only): see RuleIndex.
    _index: RuleIndex | None = field(default=None, repr=False, compare=False)

    def allowed(self, url: str) -> bool:
        """True if our user agent may fetch ``url`` (an absolute URL of this origin)."""
        if self._always:
            return True
        parser = self._parser
        if parser is None:  # disallow_all; robots.txt itself stays fetchable (RFC 9309 2.2.2)
            return _is_robots_txt(url)
        try:
            # An index exists only when _quote_path does (RuleIndex.of).
            if self._index is not None and _quote_path is not None:
                return _is_robots_txt(url) or self._index.allowed(_quote_path(url))
            return bool(parser.can_fetch(url, self._agent))
        except ValueError:  # urlsplit on a URL the normalizer let through (e.g. bad IPv6)
            log.debug("robots: cannot match %r; treating it as disallowed", url)
            return False

    @property
    def text(self) -> str | None:
        """The robots.txt text the rules were parsed from (None unless kind is parsed)."""
        return self._text

    @property
    def sitemaps(self) -> list[str]:
        """The ``Sitemap:`` lines of the file, as written (crawler.freshness.sitemaps resolves them)."""
        return list(self._parser.sitemaps) if self._parser is not None else []


class _Pattern(Protocol):
    """What :class:`RuleIndex` reads of a protego URL pattern (its ``_URLPattern``)."""

    @property
    def _contains_asterisk(self) -> bool: ...
    @property
    def _contains_dollar(self) -> bool: ...
    @property
    def _pattern(self) -> str: ...
    @property
    def _pattern_before_asterisk(self) -> str: ...
    @property
    def _pattern_before_dollar(self) -> str: ...
    def match(self, url: str) -> bool: ...


class _Rule(Protocol):
    """What :class:`RuleIndex` reads of a protego rule (its ``_Rule``): "allow" or
    "disallow", and the pattern."""

    @property
    def field(self) -> str: ...
    @property
    def value(self) -> _Pattern: ...


class RuleIndex:
    """protego's decision for one group, without trying every rule against every URL.

    protego sorts a group's rules (longest pattern first, Allow first on a tie: RFC 9309
    2.2.2) and the first that matches decides; it tries them one by one, so a URL costs
    time in proportion to the file: 0.5 ms per URL with the 19,000 rules of a 500 KiB
    file, on the event loop, for every link of that host the shard admits (2-4 us through
    this index: benchmarks/results/parsecost_before.json and parsecost.json, case robots).
    A rule can only match a path that starts with its literal head (the pattern up to
    its first ``*``, or up to its ``$``), so the rules are filed by head, and a URL tries
    only the rules filed under one of its own prefixes, in protego's order, with
    protego's own matcher: the same decision. What it cannot narrow is many wildcard
    rules with one short head (``Disallow: /*x1*``, ``/*x2*``...): those are still tried
    one by one."""

    __slots__ = ("_rules", "_by_head", "_lengths")

    def __init__(self, rules: list[_Rule]) -> None:
        self._rules = rules
        by_head: dict[str, list[int]] = {}
        for i, rule in enumerate(rules):
            pattern = rule.value
            if pattern._contains_asterisk:
                head = pattern._pattern_before_asterisk
            elif pattern._contains_dollar:
                head = pattern._pattern_before_dollar
            else:
                head = pattern._pattern
            by_head.setdefault(head, []).append(i)
        self._by_head = by_head
        self._lengths = sorted({len(head) for head in by_head})

    @classmethod
    def of(cls, parser: Protego, agent: str) -> RuleIndex | None:
        """The index of ``agent``'s group, or None when it is small (protego's own loop is
        as fast) or protego's internals are not the ones this reads."""
        group = getattr(parser, "_user_agents", {}).get(agent)
        rules = getattr(group, "_rules", None)
        if _quote_path is None or not isinstance(rules, list) or len(rules) < INDEX_MIN_RULES:
            return None
        try:
            return cls(rules)
        except AttributeError:  # protego's rule objects changed: keep its own matching
            return None

    def allowed(self, path: str) -> bool:
        """protego's answer for ``path`` (as protego quotes it)."""
        found: list[int] = []
        by_head = self._by_head
        for n in self._lengths:
            if n > len(path):
                break
            hit = by_head.get(path[:n])
            if hit is not None:
                found.extend(hit)
        if not found:
            return True
        found.sort()
        rules = self._rules
        for i in found:
            rule = rules[i]
            if rule.value.match(path):
                return rule.field != "disallow"
        return True


@dataclass(frozen=True, slots=True)
class Reading:
    """A robots.txt body as parsed (crawler.robots.cache.RobotsCache.read): the text the
    parser saw, the parser with the group chosen for us (None: the parser failed, so
    allow-all), and whether the body was cut at ROBOTS_MAX_BYTES."""

    text: str
    parser: Protego | None = None
    agent: str = "*"
    always: bool = True
    delay: float | None = None
    cut: bool = False
    index: RuleIndex | None = None


def _select_group(parser: Protego, token: str) -> tuple[str, bool]:
    """Pick the group for ``token`` (RFC 9309 2.2.1). Returns (agent for protego, always allowed).

    Protego scores a group whose name is a *prefix* of ours ("ray" for "raycrawl") as a
    match; the RFC matches the product token exactly. So we look at the group names
    ourselves (protego keeps them lowercased, same-name groups already merged) and tell
    protego either our token or "*".
    """
    groups = getattr(parser, "_user_agents", None)
    if not isinstance(groups, dict):  # protego internals changed: fall back to its matching
        return token, False
    if token in groups:
        agent = token
    elif "*" in groups:
        agent = "*"
    else:
        return "*", True  # no group applies: nothing is disallowed
    rules = getattr(groups[agent], "_rules", None)
    return agent, isinstance(rules, list) and not rules


def _crawl_delay(parser: Protego, agent: str) -> float | None:
    delays: list[float] = []
    delay = parser.crawl_delay(agent)
    if delay is not None and math.isfinite(delay) and delay >= 0:
        delays.append(float(delay))
    rate = parser.request_rate(agent)
    if rate is not None and rate.requests > 0:  # "Request-rate: 1/10s" -> one every 10 s
        delays.append(rate.seconds / rate.requests)
    return max(delays) if delays else None


def _decode(body: bytes, truncated: bool) -> str:
    """The first ROBOTS_MAX_BYTES of ``body`` as text, without a cut-off last line."""
    cut = truncated or len(body) > ROBOTS_MAX_BYTES
    data = body[:ROBOTS_MAX_BYTES]
    if cut:
        # Drop the partial last line: a rule cut short could allow more than it said.
        # Cutting at a line end also never splits a UTF-8 sequence.
        end = max(data.rfind(b"\n"), data.rfind(b"\r"))
        data = data[: end + 1] if end >= 0 else b""
    # RFC 9309 2.3: the file is UTF-8; "utf-8-sig" skips a BOM, bad bytes become U+FFFD.
    return data.decode("utf-8-sig", errors="replace")
