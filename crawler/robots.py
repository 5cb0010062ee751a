"""Per-origin robots.txt rules and their cache (RFC 9309). No I/O happens here.

:class:`RobotsClient` fetches ``origin + "/robots.txt"`` through the shard's own
politeness-paced fetch (following up to :data:`MAX_ROBOTS_REDIRECTS` redirects) and
hands the *final* response to :meth:`RobotsCache.from_response`, which decides what that
response means; the cache answers "may we fetch this URL?" from the rules.

Decisions, with the RFC 9309 section that makes them:

* 2xx: the body is parsed (2.3.1.1) with protego. At most :data:`ROBOTS_MAX_BYTES` are
  considered (2.5 requires parsing *at least* 500 KiB; parsing no more bounds the cost of
  a hostile 10 MB file). When the body was cut, the trailing partial line is dropped so
  a rule such as ``Allow: /public-only`` cut to ``Allow: /p`` cannot widen what we fetch.
  The file is UTF-8 (2.3); undecodable bytes are replaced, a BOM is skipped. A file the
  parser chokes on means allow-all and is counted in ``stats()["parse_errors"]``.
* 4xx (including 401 and 403, 2.3.1.3): the file is unavailable, everything is allowed.
  429 is the exception: it is a rate limit, not an absence, so it is treated like a 5xx
  (the RFC says "MAY access", so being stricter is allowed; Google does the same).
* 5xx, or no response at all (DNS failure, refused, timeout): the file is unreachable,
  everything is disallowed (2.3.1.4) for ``error_ttl_s`` so that we retry soon. If a copy
  obtained from a 2xx response is younger than ``stale_ok_s`` (default 30 days), that
  copy is used instead (2.4: a cached copy may be kept while the file is unreachable).
  The RFC also allows assuming allow-all after 30 days of errors; we do not (politeness
  first): the origin stays disallowed until it answers again.
* A final 3xx (the engine gave up following redirects) and :meth:`RobotsCache.
  from_redirect_overflow` mean "unavailable", i.e. 4xx semantics (2.3.1.2). A 304 to a
  conditional refetch refreshes the copy we have.
* Rules are cached for ``ttl_s`` (default 24 h, 2.4: "SHOULD NOT use the cached version
  for more than 24 hours").
* The ``/robots.txt`` URL itself is always allowed (2.2.2).

Group selection (2.2.1) uses the *product token* of the configured user agent
(``raycrawl`` from ``raycrawl/0.1 (+https://...)``), matched case-insensitively and
*exactly*: a group for ``ray`` does not apply to ``raycrawl`` (protego alone would match
it as a prefix), a group for ``raycrawl`` overrides ``*``, and with neither, no rule
applies. Longest match wins between Allow and Disallow, Allow on a tie (2.2.2) - protego
implements that ordering.
"""

from __future__ import annotations

import logging
import math
import re
from dataclasses import dataclass, field, replace
from typing import Any, Awaitable, Callable, Protocol

from protego import Protego

from crawler.errors import ConfigError

__all__ = [
    "DEFAULT_STALE_OK_S",
    "MAX_ROBOTS_REDIRECTS",
    "ROBOTS_MAX_BYTES",
    "RobotsCache",
    "RobotsClient",
    "RobotsRules",
    "product_token",
]

log = logging.getLogger(__name__)

#: RFC 9309 2.5: parse at least the first 500 KiB. We parse exactly that much at most.
ROBOTS_MAX_BYTES = 500 * 1024
#: RFC 9309 2.3.1.2: follow at least five consecutive redirects.
MAX_ROBOTS_REDIRECTS = 5
#: How long a good copy may stand in for an unreachable robots.txt (RFC 9309 2.3.1.4).
DEFAULT_STALE_OK_S = 30 * 86_400.0

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

    def allowed(self, url: str) -> bool:
        """True if our user agent may fetch ``url`` (an absolute URL of this origin)."""
        if self._always:
            return True
        parser = self._parser
        if parser is None:  # disallow_all; robots.txt itself stays fetchable (RFC 9309 2.2.2)
            return _is_robots_txt(url)
        try:
            return parser.can_fetch(url, self._agent)
        except ValueError:  # urlsplit on a URL the normalizer let through (e.g. bad IPv6)
            log.debug("robots: cannot match %r; treating it as disallowed", url)
            return False

    @property
    def text(self) -> str | None:
        """The robots.txt text the rules were parsed from (None unless kind is parsed)."""
        return self._text


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
    delays = []
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


class RobotsCache:
    """Robots rules per origin (``scheme://host[:port]``), built from fetched responses.

    Args:
        user_agent: our full User-Agent; its product token picks the robots.txt group.
        ttl_s: how long rules from a 2xx or 4xx answer are used before refetching.
        error_ttl_s: how long an unreachable verdict (5xx, no response) lasts.
        clock: injected clock; ``now()`` monotonic seconds (``wall()`` used by snapshots).
        max_entries: the cache keeps at most this many origins, evicting the oldest.
        stale_ok_s: max age of a 2xx copy that may stand in for an unreachable file.
    """

    def __init__(
        self,
        user_agent: str,
        *,
        ttl_s: float = 86_400.0,
        error_ttl_s: float = 600.0,
        clock: Any,
        max_entries: int = 100_000,
        stale_ok_s: float = DEFAULT_STALE_OK_S,
    ) -> None:
        for name, value in (("ttl_s", ttl_s), ("error_ttl_s", error_ttl_s)):
            if not (isinstance(value, (int, float)) and math.isfinite(value) and value > 0):
                raise ConfigError(f"robots {name}: must be a positive number of seconds, got {value!r}")
        if not (isinstance(stale_ok_s, (int, float)) and stale_ok_s >= 0):
            raise ConfigError(f"robots stale_ok_s: must be >= 0 seconds, got {stale_ok_s!r}")
        if not (isinstance(max_entries, int) and max_entries >= 1):
            raise ConfigError(f"robots max_entries: must be a positive integer, got {max_entries!r}")
        self.user_agent = user_agent
        self.product_token = product_token(user_agent)
        self.ttl_s = float(ttl_s)
        self.error_ttl_s = float(error_ttl_s)
        self.stale_ok_s = float(stale_ok_s)
        self.max_entries = max_entries
        self._clock = clock
        self._now = clock.now
        # Insertion-ordered: the first key is the origin stored longest ago (evicted first).
        self._entries: dict[str, RobotsRules] = {}
        self._stats = dict.fromkeys(
            (
                "hits",
                "misses",
                PARSED,
                ALLOW_ALL,
                DISALLOW_ALL,
                "parse_errors",
                "truncated",
                "stale_used",
                "not_modified",
                "redirect_overflow",
                "evicted",
                "restore_errors",
            ),
            0,
        )

    # -- lookups (hot path) ----------------------------------------------------------

    @staticmethod
    def robots_url(origin: str) -> str:
        """The robots.txt URL of ``origin`` (RFC 9309 2.3: at the top of the origin)."""
        return origin.rstrip("/") + "/robots.txt"

    def get(self, origin: str) -> RobotsRules | None:
        """The origin's rules if cached and unexpired, else None (fetch robots.txt first)."""
        rules = self._entries.get(origin)
        if rules is None or self._now() >= rules.expires_at:
            self._stats["misses"] += 1
            return None
        self._stats["hits"] += 1
        return rules

    def allowed(self, url: str, origin: str) -> bool | None:
        """May we fetch ``url``? None when ``origin``'s rules are unknown or expired."""
        rules = self.get(origin)
        return None if rules is None else rules.allowed(url)

    def unreachable_reason(self, origin: str) -> str | None:
        """Why ``origin``'s robots.txt got no response, if that is why it is disallowed.

        Lets the crawler record such URLs as failures of the network (a dead name, a
        refused address) rather than as refusals by a robots.txt that never answered.
        Does not count as a lookup in :meth:`stats`.
        """
        rules = self._entries.get(origin)
        return None if rules is None else rules.unreachable

    def crawl_delay(self, origin: str) -> float | None:
        """The latest known Crawl-delay of ``origin``, even from expired rules.

        Expired rules are still the best knowledge of how slowly the site wants to be
        crawled until the refetch answers, so they keep pacing the host (politeness first).
        """
        rules = self._entries.get(origin)
        return None if rules is None else rules.crawl_delay

    def describe(self, origin: str) -> dict[str, Any] | None:
        """What is cached for ``origin`` (the control API's host view), without counting a
        lookup; None if nothing is. ``expires_in_s`` <= 0: expired, refetched on next use."""
        rules = self._entries.get(origin)
        if rules is None:
            return None
        return {
            "origin": origin,
            "kind": rules.kind,
            "status": rules.source_status,
            "crawl_delay_s": rules.crawl_delay,
            "expires_in_s": rules.expires_at - self._now(),
            "unreachable": rules.unreachable,
        }

    def __len__(self) -> int:
        return len(self._entries)

    def __contains__(self, origin: object) -> bool:
        return origin in self._entries

    # -- building rules ---------------------------------------------------------------

    def from_response(
        self,
        origin: str,
        status: int | None,
        body: bytes | None,
        *,
        truncated: bool = False,
        error: str | None = None,
    ) -> RobotsRules:
        """Build, store and return the rules for the final (post-redirect) response.

        ``status`` None means no response (DNS failure, refused, timeout); ``error`` then
        says why and is kept as :attr:`RobotsRules.unreachable`. ``truncated`` says the
        fetcher stopped reading early (it need not read past ROBOTS_MAX_BYTES). Never
        raises on what the server sent.
        """
        now = self._now()
        prev = self._entries.get(origin)
        if status is not None and 200 <= status < 300:
            rules = self._parse(body or b"", status, now, truncated)
        elif status == 304 and prev is not None and _is_good(prev):
            # A conditional refetch confirmed our copy: keep it for another ttl.
            self._stats["not_modified"] += 1
            rules = replace(prev, fetched_at=now, expires_at=now + self.ttl_s)
        elif status is not None and (300 <= status < 400 or (400 <= status < 500 and status != 429)):
            # 4xx: unavailable, allow all (RFC 9309 2.3.1.3). A final 3xx means the
            # redirects could not be followed to a file: unavailable too (2.3.1.2).
            rules = RobotsRules(ALLOW_ALL, status, now, now + self.ttl_s, _always=True)
            self._stats[ALLOW_ALL] += 1
        else:
            # 5xx, 429, no response, or a status that is not HTTP: unreachable.
            rules = self._unreachable(prev, status, now, error if status is None else None)
        self._store(origin, rules)
        return rules

    def from_redirect_overflow(self, origin: str) -> RobotsRules:
        """More than MAX_ROBOTS_REDIRECTS redirects: treat the file as unavailable (4xx).

        RFC 9309 2.3.1.2: after at least five redirects the crawler MAY assume the
        robots.txt is unavailable, which 2.3.1.3 turns into "allow all".
        """
        now = self._now()
        self._stats["redirect_overflow"] += 1
        self._stats[ALLOW_ALL] += 1
        rules = RobotsRules(ALLOW_ALL, None, now, now + self.ttl_s, _always=True)
        self._store(origin, rules)
        return rules

    def _parse(self, body: bytes, status: int, now: float, truncated: bool) -> RobotsRules:
        if truncated or len(body) > ROBOTS_MAX_BYTES:
            self._stats["truncated"] += 1
        return self._rules_from_text(_decode(body, truncated), status, now, now + self.ttl_s)

    def _rules_from_text(self, text: str, status: int | None, fetched_at: float, expires_at: float) -> RobotsRules:
        try:
            parser = Protego.parse(text)
            agent, always = _select_group(parser, self.product_token)
            delay = _crawl_delay(parser, agent)
        except Exception:  # a third-party parser on arbitrary web bytes: allow-all, counted
            log.debug("robots: parse failed; treating the file as allow-all", exc_info=True)
            self._stats["parse_errors"] += 1
            self._stats[ALLOW_ALL] += 1
            return RobotsRules(ALLOW_ALL, status, fetched_at, expires_at, _always=True)
        self._stats[PARSED] += 1
        return RobotsRules(
            PARSED, status, fetched_at, expires_at, delay, _parser=parser, _agent=agent, _always=always, _text=text
        )

    def _unreachable(
        self, prev: RobotsRules | None, status: int | None, now: float, reason: str | None = None
    ) -> RobotsRules:
        if prev is not None and _is_good(prev) and now - prev.fetched_at < self.stale_ok_s:
            # Keep using the last good copy (RFC 9309 2.4), but only until error_ttl_s so
            # we ask again soon. fetched_at is unchanged: the copy keeps ageing.
            self._stats["stale_used"] += 1
            return replace(prev, expires_at=now + self.error_ttl_s)
        self._stats[DISALLOW_ALL] += 1
        return RobotsRules(DISALLOW_ALL, status, now, now + self.error_ttl_s, unreachable=reason)

    def _store(self, origin: str, rules: RobotsRules) -> None:
        entries = self._entries
        entries.pop(origin, None)  # re-insert at the end: a refreshed origin is the newest
        entries[origin] = rules
        while len(entries) > self.max_entries:
            del entries[next(iter(entries))]
            self._stats["evicted"] += 1

    # -- persistence and stats -------------------------------------------------------------

    def snapshot(self) -> list[dict]:
        """JSON-serialisable state of every cached origin (expired ones included).

        Times are stored relative to now (``age_s``, ``ttl_left_s``) because ``now()`` is
        a monotonic clock whose origin differs between processes; ``saved_wall`` lets
        :meth:`restore` age the entries by the downtime.
        """
        now = self._now()
        wall = _wall(self._clock)
        return [
            {
                "origin": origin,
                "kind": r.kind,
                "source_status": r.source_status,
                "age_s": now - r.fetched_at,
                "ttl_left_s": r.expires_at - now,
                "text": r._text,
                "unreachable": r.unreachable,
                "saved_wall": wall,
            }
            for origin, r in self._entries.items()
        ]

    def restore(self, entries: list[dict]) -> int:
        """Load a :meth:`snapshot` (possibly from another process). Returns entries loaded.

        Time that passed between snapshot and restore (by the wall clock) is subtracted
        from every entry's remaining TTL. A malformed entry is skipped and counted in
        ``stats()["restore_errors"]``: losing it only means refetching that robots.txt.
        """
        now = self._now()
        wall = _wall(self._clock)
        loaded = 0
        for entry in entries:
            try:
                origin = str(entry["origin"])
                kind = entry["kind"]
                status = entry.get("source_status")
                age = float(entry["age_s"])
                ttl_left = float(entry["ttl_left_s"])
                saved_wall = entry.get("saved_wall")
                if kind not in _KINDS or not (status is None or isinstance(status, int)):
                    raise ValueError(f"bad kind/status {kind!r}/{status!r}")
                if kind == PARSED and not isinstance(entry.get("text"), str):
                    raise ValueError("parsed entry without text")
            except (KeyError, TypeError, ValueError, AttributeError) as exc:
                log.warning("robots: skipping malformed snapshot entry: %s", exc)
                self._stats["restore_errors"] += 1
                continue
            downtime = max(0.0, wall - float(saved_wall)) if wall is not None and saved_wall is not None else 0.0
            fetched_at = now - age - downtime
            expires_at = now + ttl_left - downtime
            if kind == PARSED:
                rules = self._rules_from_text(entry["text"], status, fetched_at, expires_at)
            else:
                reason = entry.get("unreachable")
                rules = RobotsRules(
                    kind, status, fetched_at, expires_at, _always=kind == ALLOW_ALL,
                    unreachable=reason if isinstance(reason, str) and kind == DISALLOW_ALL else None,
                )
                self._stats[kind] += 1
            self._store(origin, rules)
            loaded += 1
        return loaded

    def stats(self) -> dict:
        """Counters: hits, misses, rules built by kind, parse_errors, truncated,
        stale_used, not_modified, redirect_overflow, evicted, restore_errors, entries."""
        return {**self._stats, "entries": len(self._entries)}


def _is_good(rules: RobotsRules) -> bool:
    """Rules that came from the file itself (a 2xx), usable while it is unreachable."""
    return rules.source_status is not None and 200 <= rules.source_status < 300


def _wall(clock: Any) -> float | None:
    wall = getattr(clock, "wall", None)
    return float(wall()) if callable(wall) else None


class _Pacer(Protocol):
    def in_flight(self, host: str) -> bool: ...

    def next_allowed(self, host: str) -> float: ...


class RobotsClient:
    """Fetches an origin's robots.txt with the host's own politeness slot and caches it.

    Args:
        cache: where the rules go.
        classify: maps a response to "redirect" or anything else (crawler.fetch.classify).
        normalize: canonical form of a redirect target, None if unusable.
        join: resolves a Location header against the URL it came from.
        pacer: per-host in-flight state and next allowed time (crawler.politeness).
        clock: waits for the host's allowance between same-host redirect hops.
    """

    def __init__(
        self,
        cache: RobotsCache,
        *,
        classify: Callable[[Any], str],
        normalize: Callable[[str], str | None],
        join: Callable[[str, str], str | None],
        host_of: Callable[[str], str],
        pacer: _Pacer,
        clock: Any,
    ) -> None:
        self.cache = cache
        self._classify = classify
        self._normalize = normalize
        self._join = join
        self._host_of = host_of
        self._pacer = pacer
        self._clock = clock

    async def refresh(
        self, origin: str, host: str, fetch: Callable[[str, str], Awaitable[Any]]
    ) -> tuple[RobotsRules, int]:
        """Fetch and cache ``origin``'s rules; ``host`` is the origin's politeness key.
        Returns the rules and the number of requests it took.

        ``await fetch(host, url)`` makes one request, paced like any other, and returns a
        response with ``status``, ``headers``, ``body``, ``truncated`` and ``error``.

        Redirects are followed up to 5 hops (RFC 9309 2.3.1.2); more is "unavailable".
        A hop to another host whose request is already running is not made (one request
        in flight per host): the origin counts as unreachable until the error TTL passes.
        """
        url = self.cache.robots_url(origin)
        for hop in range(MAX_ROBOTS_REDIRECTS + 1):
            target = self._host_of(url)
            if target != host and self._pacer.in_flight(target):
                return self.cache.from_response(origin, None, None, error="robots.txt redirect target busy"), hop
            if hop > 0 and target == host:
                # Same host: the next hop waits for the host's allowance like any request.
                await self._clock.sleep(max(0.0, self._pacer.next_allowed(host) - self._clock.now()))
            res = await fetch(target, url)
            if self._classify(res) != "redirect":
                body = res.body if res.status else None
                return self.cache.from_response(origin, res.status, body, truncated=res.truncated, error=res.error), hop + 1
            joined = self._join(url, res.headers.get("location", ""))
            nxt = self._normalize(joined) if joined else None
            if nxt is None:  # a redirect to nowhere: the file is unavailable
                return self.cache.from_response(origin, 404, b""), hop + 1
            url = nxt
        return self.cache.from_redirect_overflow(origin), MAX_ROBOTS_REDIRECTS + 1
