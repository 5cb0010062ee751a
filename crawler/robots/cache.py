"""The per-origin robots.txt cache: what a fetched response means (RFC 9309 2.3-2.4)
and for how long. See crawler.robots for the decisions; its snapshots for restarts and
handovers are crawler.robots.snapshots."""

from __future__ import annotations

import logging
import math
from dataclasses import replace
from typing import Any, Protocol, Sequence

from protego import Protego

from crawler.errors import ConfigError
from crawler.robots.rules import (
    ALLOW_ALL,
    DEFAULT_STALE_OK_S,
    DISALLOW_ALL,
    PARSED,
    ROBOTS_MAX_BYTES,
    Reading,
    RobotsRules,
    RuleIndex,
    _crawl_delay,
    _decode,
    _select_group,
    product_token,
)
from crawler.robots.snapshots import RobotsSnapshots

log = logging.getLogger(__name__)


class _Clock(Protocol):
    """The part of crawler.clock.Clock the cache needs (``wall()`` is used when present)."""

    def now(self) -> float: ...


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
        clock: _Clock,
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
        # Checkpoints, handovers and the journal write the rules out and read them back.
        self.snapshots = RobotsSnapshots(self._entries, clock, self._rules_from_text, self._store, self._stats)

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
        reading: Reading | None = None,
    ) -> RobotsRules:
        """Build, store and return the rules for the final (post-redirect) response.

        ``status`` None means no response (DNS failure, refused, timeout); ``error`` then
        says why and is kept as :attr:`RobotsRules.unreachable`. ``truncated`` says the
        fetcher stopped reading early (it need not read past ROBOTS_MAX_BYTES).
        ``reading``: the body already parsed by :meth:`read` (off the event loop), else it
        is parsed here. Never raises on what the server sent.
        """
        now = self._now()
        prev = self._entries.get(origin)
        if status is not None and 200 <= status < 300:
            if reading is None:
                reading = self.read(body or b"", truncated)
            rules = self._rules_from_reading(reading, status, now, now + self.ttl_s)
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

    def read(self, body: bytes, truncated: bool = False) -> Reading:
        """Parse a 2xx body (its first ROBOTS_MAX_BYTES) into what :meth:`from_response`
        keeps. Touches no state of the cache: the parse of a large file (about 0.1 s for
        500 KiB) runs in a worker thread (crawler.robots.client, DESIGN invariant 16)."""
        return self._read_text(_decode(body, truncated), truncated or len(body) > ROBOTS_MAX_BYTES)

    def _read_text(self, text: str, cut: bool = False) -> Reading:
        try:
            parser = Protego.parse(text)
            agent, always = _select_group(parser, self.product_token)
            delay = _crawl_delay(parser, agent)
        except Exception:  # a third-party parser on arbitrary web bytes: allow-all, counted
            log.debug("robots: parse failed; treating the file as allow-all", exc_info=True)
            return Reading(text, cut=cut)
        index = None if always else RuleIndex.of(parser, agent)
        return Reading(text, parser, agent, always, delay, cut=cut, index=index)

    def _rules_from_reading(self, reading: Reading, status: int | None, fetched_at: float, expires_at: float) -> RobotsRules:
        if reading.cut:
            self._stats["truncated"] += 1
        if reading.parser is None:
            self._stats["parse_errors"] += 1
            self._stats[ALLOW_ALL] += 1
            return RobotsRules(ALLOW_ALL, status, fetched_at, expires_at, _always=True)
        self._stats[PARSED] += 1
        return RobotsRules(
            PARSED, status, fetched_at, expires_at, reading.delay, _parser=reading.parser, _agent=reading.agent,
            _always=reading.always, _text=reading.text, _index=reading.index,
        )

    def _rules_from_text(self, text: str, status: int | None, fetched_at: float, expires_at: float) -> RobotsRules:
        return self._rules_from_reading(self._read_text(text), status, fetched_at, expires_at)

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

    def snapshot(self, origins: Sequence[str] | None = None) -> list[dict[str, Any]]:
        """JSON-serialisable state of every cached origin (expired ones included), or of
        ``origins`` only (see :meth:`RobotsSnapshots.snapshot`)."""
        return self.snapshots.snapshot(origins)

    def entry(self, origin: str) -> dict[str, Any] | None:
        """:meth:`snapshot` of one origin (None if nothing is cached), at the cost of one
        lookup: the verdict a shard journals when it fetched the origin's robots.txt
        (crawler.engine.admission), so that a restart refuses without fetching it again."""
        return self.snapshots.entry(origin)

    def drop(self, origins: Sequence[str]) -> None:
        """Forget the rules of ``origins`` (their host now lives on another shard, or its
        robots.txt failed and will be asked again)."""
        for origin in origins:
            self._entries.pop(origin, None)

    def restore(self, entries: list[dict[str, Any]]) -> int:
        """Load a :meth:`snapshot` (possibly from another process), aged by the downtime.
        Returns entries loaded; a malformed entry is skipped and counted in
        ``stats()["restore_errors"]`` (see :meth:`RobotsSnapshots.restore`)."""
        return self.snapshots.restore(entries)

    def stats(self) -> dict[str, int]:
        """Counters: hits, misses, rules built by kind, parse_errors, truncated,
        stale_used, not_modified, redirect_overflow, evicted, restore_errors, entries."""
        return {**self._stats, "entries": len(self._entries)}


def _is_good(rules: RobotsRules) -> bool:
    """Rules that came from the file itself (a 2xx), usable while it is unreachable."""
    return rules.source_status is not None and 200 <= rules.source_status < 300

