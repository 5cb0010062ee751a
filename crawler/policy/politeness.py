"""Per-host pacing: one request in flight, starts at least ``interval`` apart at the server.

Pure policy with an injected clock; the frontier asks :meth:`Politeness.next_allowed`
and the engine reports each request's life cycle (:meth:`~Politeness.on_start`,
:meth:`~Politeness.on_headers`, :meth:`~Politeness.on_finish`).

Why the headers time matters (docs/invariants.md #2, "measured at the server"): the
server records request k as starting at some instant s_k that we cannot observe; we only
know it lies between our send and our receipt of the response headers h_k (the server
cannot answer a request before it started it). Request k+1 cannot reach the server before
we send it, so s_{k+1} >= send_{k+1}. Hence sending k+1 no earlier than h_k + interval
guarantees s_{k+1} - s_k >= interval whatever the network delays. When no headers
arrived (timeout, reset, refused), the server may have started k at any moment up to the
time we gave up, f_k, so the bound becomes f_k + interval. And since only one request may
be in flight, k+1 never starts before f_k. So:

    next start >= max(h_k + interval, f_k)   if headers arrived
    next start >= f_k + interval             otherwise

The interval is evaluated when asked, not frozen at finish time, so a Crawl-delay learnt
from the robots.txt fetch that just finished or an operator override applies to the
wait already under way. (Callers that cache ``next_allowed`` - the
frontier's host heap - must reschedule the host after changing any of those.)

Effective interval of a host:

    floor     = max(configured interval, operator interval, robots Crawl-delay)
    effective = max(floor, min(max(floor, adaptive), max_interval_s))

An operator's interval (``max_rps``) is a floor like Crawl-delay: it can slow a host,
never bring it below the configured interval (an API call must not be able to turn
politeness off). ``max_interval_s`` caps only what *we* add (adaptive backoff after 429/503/failures); a
Crawl-delay or operator interval above it is honoured as is, because the site or the
operator asked for it (politeness first). Politeness is about what a host can take, not
about what it is worth to us: a low-novelty host is demoted in the frontier's order
(crawler.frontier.frontier), never slowed.

:class:`Politeness` applies the rule and keeps the request life cycle; its parts are
crawler.policy.pacinginterval (the settings and the interval formula),
crawler.policy.backoff (what 429, 5xx, failures and Retry-After add),
crawler.policy.pacingstate (the host record and its snapshots) and the operator's policy,
crawler.policy.hostpolicy.PacingOverrides.
"""

from __future__ import annotations

import logging
import math
import time
from typing import Any, Awaitable, Callable, Mapping, Protocol, TypeVar

from crawler.policy.hostpolicy import PacingOverrides
from crawler.policy.backoff import Backoff, parse_retry_after
from crawler.policy.pacinginterval import IntervalRule, PacingSettings
from crawler.policy.pacingstate import HostPacing, PacingSnapshots

__all__ = ["PacingSnapshots", "Politeness", "parse_retry_after"]

log = logging.getLogger(__name__)


class _Clock(Protocol):
    """The part of crawler.clock.Clock pacing needs (``wall()`` is used when present)."""

    def now(self) -> float: ...


class _Result(Protocol):
    """What :meth:`Politeness.request` reads of a crawler.fetch.fetcher.FetchResult."""

    @property
    def status(self) -> int | None: ...
    @property
    def headers(self) -> Mapping[str, str]: ...
    @property
    def headers_at(self) -> float | None: ...
    @property
    def transient(self) -> bool: ...


R = TypeVar("R", bound=_Result)


class Politeness:
    """Per-host pacing policy (see the module docstring for the rule and its proof).

    Args:
        interval_s: default minimum time between request starts to one host.
        max_interval_s: cap on the adaptive backoff (not on Crawl-delay or
            operator intervals).
        clock: injected clock: ``now()`` monotonic seconds, ``wall()`` UTC epoch seconds
            (for HTTP-date Retry-After; ``time.time`` if the clock has no ``wall``).
        backoff_factor: multiplier applied to the interval on 429/5xx/transient failure.
        recovery_factor: multiplier (< 1 narrows) applied after ``recovery_successes``
            consecutive successes, until the interval is back to its floor.
        retry_after_cap_s: longest Retry-After honoured.
    """

    def __init__(
        self,
        interval_s: float = 1.0,
        max_interval_s: float = 60.0,
        *,
        clock: _Clock,
        backoff_factor: float = 2.0,
        recovery_factor: float = 0.8,
        recovery_successes: int = 5,
        retry_after_cap_s: float = 3600.0,
    ) -> None:
        self.settings = settings = PacingSettings.checked(
            interval_s, max_interval_s, backoff_factor, recovery_factor, recovery_successes, retry_after_cap_s
        )
        self.interval_s = settings.interval_s
        self.max_interval_s = settings.max_interval_s
        self._now = clock.now
        self._hosts: dict[str, HostPacing] = {}
        # Operator policy (interval floor, pause), kept apart so forget() never drops it.
        self.overrides = PacingOverrides()
        # The effective interval of a host; bound once, they run several times per URL.
        self.rule = IntervalRule(settings, self.overrides)
        self._floor = self.rule.floor
        self._interval = self.rule.interval
        wall = getattr(clock, "wall", None)
        # What 429s, 5xx, failures and Retry-After add on top of the floor.
        self.backoff = Backoff(settings, self._floor, wall if callable(wall) else time.time)
        self._in_flight = 0
        self._wait_s = 0.0  # politeness delay imposed on request starts, summed (metrics)
        self._stats = dict.fromkeys(("starts", "early_starts", "invalid_crawl_delays", "forgotten"), 0)
        # Checkpoints and host handovers write this state out and read it back.
        self.snapshots = PacingSnapshots(self._hosts, self.overrides, self._now, settings.max_interval_s)

    # -- queries (hot path) ------------------------------------------------------------

    def interval(self, host: str) -> float:
        """The host's effective minimum time between request starts, in seconds."""
        return self._interval(host, self._hosts.get(host))

    def next_allowed(self, host: str) -> float:
        """Clock time from which the host may be sent its next request.

        0.0 for a host never seen; ``math.inf`` while the host is paused. While a request
        is in flight, the value assumes it completes now (a lower bound; ``ready`` is
        False anyway): call :meth:`on_finish` before asking for the host's next slot.
        """
        pol = self.overrides.lookup(host)
        if pol is not None and pol[1]:
            return math.inf
        st = self._hosts.get(host)
        if st is None:
            return 0.0
        if st.in_flight:
            now = self._now()
            anchor = st.headers_at if st.headers_at is not None else now
            return max(anchor + self._interval(host, st), now, st.not_before)
        if st.anchor is None:
            return st.not_before
        return max(st.anchor + self._interval(host, st), st.finished_at, st.not_before)

    def ready(self, host: str) -> bool:
        """True if a request to ``host`` may start now (not in flight, not paused, due)."""
        st = self._hosts.get(host)
        if st is not None and st.in_flight:
            return False
        return self._now() >= self.next_allowed(host)

    def in_flight(self, host: str) -> bool:
        """True while a request to ``host`` is between on_start and on_finish."""
        st = self._hosts.get(host)
        return st is not None and st.in_flight

    def in_flight_count(self) -> int:
        """Number of hosts with a request in flight."""
        return self._in_flight

    def crawl_delay(self, host: str) -> float | None:
        """The Crawl-delay floor currently applied to ``host`` (None if none)."""
        st = self._hosts.get(host)
        return st.crawl_delay if st is not None and st.crawl_delay > 0 else None

    def override(self, host: str) -> tuple[float | None, bool]:
        """The operator policy in force for key ``host`` (its own, else its hostname's):
        (interval override or None, paused)."""
        return self.overrides.override(host)

    def describe(self, host: str) -> dict[str, Any]:
        """What pacing of key ``host`` looks like now (the control API's host view):
        effective interval, the operator policy in force, Crawl-delay, backoff, and the
        seconds until the next request may start (None while paused)."""
        st = self._hosts.get(host)
        now = self._now()
        iv, paused = self.override(host)
        wait = self.next_allowed(host) - now
        return {
            "interval_s": self._interval(host, st),
            "override_interval_s": iv,
            "paused": paused,
            "crawl_delay_s": st.crawl_delay if st is not None and st.crawl_delay > 0 else None,
            "backoff_interval_s": st.adaptive if st is not None and st.adaptive > 0 else None,
            "retry_after_s": max(0.0, st.not_before - now) if st is not None and st.not_before > now else None,
            "in_flight": bool(st is not None and st.in_flight),
            "next_allowed_in_s": None if math.isinf(wait) else max(0.0, wait),
        }

    def keys(self) -> list[str]:
        """Every key with pacing state or an operator policy."""
        return list(dict.fromkeys([*self._hosts, *self.overrides.keys()]))

    def backed_off(self) -> int:
        """Hosts slowed by backoff or a Retry-After now (a scan: for metrics, not per URL)."""
        return self.backoff.backed_off(self._hosts, self._now())

    # -- policy inputs -----------------------------------------------------------------

    def set_crawl_delay(self, host: str, seconds: float | None) -> None:
        """Apply robots.txt ``Crawl-delay`` as a floor on the interval (None: no floor).

        Web input: a negative, NaN or infinite value is ignored (counted), never raised.
        A large value is honoured even above ``max_interval_s``.
        """
        if seconds is not None and not (isinstance(seconds, (int, float)) and math.isfinite(seconds) and seconds >= 0):
            self._stats["invalid_crawl_delays"] += 1
            seconds = None
        st = self._hosts.get(host)
        if st is None:
            if not seconds:
                return  # nothing to remember for a host we hold no state for
            st = self._hosts[host] = HostPacing()
        st.crawl_delay = float(seconds or 0.0)

    def set_override(self, host: str, interval_s: float | None = None, paused: bool | None = None) -> None:
        """Operator policy for key ``host`` (``PUT /hosts/:host/policy {max_rps, paused}``).

        ``interval_s`` (1 / max_rps) is a floor like Crawl-delay: the largest of it, the
        configured interval and Crawl-delay applies, so it can only slow the host; it
        is not capped by ``max_interval_s``.
        ``paused=True`` makes the host never ready (``next_allowed`` is ``inf``); a
        request already in flight finishes normally. An argument left None keeps its
        current value; :meth:`clear_override` removes both.
        """
        self.overrides.set(host, interval_s, paused)

    def set_name_override(self, name: str, interval_s: float | None = None, paused: bool | None = None) -> list[str]:
        """Hostname-wide operator policy: every key of ``name`` (any port), including keys
        not seen yet (see :class:`~crawler.policy.hostpolicy.PacingOverrides`). Returns the keys
        whose policy changed (callers that cache ``next_allowed`` reschedule them)."""
        return self.overrides.set_name(name, interval_s, paused, self.keys())

    def clear_override(self, host: str) -> None:
        """Remove the operator policy of key ``host`` (its hostname's policy, if any, applies)."""
        self.overrides.clear(host)

    # -- request life cycle --------------------------------------------------------------

    def on_start(self, host: str) -> None:
        """A request to ``host`` is being sent now.

        Raises RuntimeError if one is already in flight (a caller bug). A start before
        ``next_allowed`` or while paused is counted in ``stats()["early_starts"]`` and
        logged, not refused: callers are expected to check :meth:`ready` first.
        """
        st = self._hosts.get(host)
        if st is None:
            st = self._hosts[host] = HostPacing()
        elif st.in_flight:
            raise RuntimeError(f"politeness: a request to {host!r} is already in flight")
        now = self._now()
        allowed = self.next_allowed(host)
        if now < allowed:
            self._stats["early_starts"] += 1
            log.warning("politeness: request to %r started before its allowed time", host)
        if st.anchor is not None and allowed > st.finished_at and not math.isinf(allowed):
            # The gap politeness put between the previous request's end and this start.
            self._wait_s += allowed - st.finished_at
        st.in_flight = True
        st.headers_at = None
        self._in_flight += 1
        self._stats["starts"] += 1

    def on_headers(self, host: str, at: float | None = None) -> None:
        """The response headers of the in-flight request to ``host`` arrived (now, or at ``at``).

        ``at`` lets a fetcher that timestamps the headers with the same clock report
        them after the body was read.
        """
        st = self._in_flight_state(host, "on_headers")
        st.headers_at = self._now() if at is None else at

    async def request(self, host: str, send: Callable[[], Awaitable[R]]) -> R:
        """Make one request to ``host`` (``await send()`` -> a crawler.fetch.fetcher.FetchResult)
        between :meth:`on_start` and :meth:`on_finish`, its headers time included; a
        request cancelled mid-way still counts (pacing stays honest)."""
        self.on_start(host)
        result = None
        try:
            result = await send()
            return result
        finally:
            if result is None:
                self.on_finish(host, None, transient=True)
            else:
                if result.headers_at is not None:
                    self.on_headers(host, at=result.headers_at)
                self.on_finish(host, result.status, result.headers.get("retry-after"), transient=result.transient)

    def on_finish(
        self, host: str, status: int | None, retry_after: str | None = None, transient: bool = False
    ) -> None:
        """The in-flight request to ``host`` is over (response read, or failed).

        ``status`` None means no HTTP response (timeout, reset, DNS, refused).
        429, 5xx, no response and ``transient=True`` widen the adaptive interval
        (x backoff_factor, capped at max_interval_s); ``recovery_successes`` consecutive
        other outcomes (2xx, 3xx, 304, final 4xx) narrow it by recovery_factor.
        ``retry_after`` (the raw header) is honoured on 429 and 5xx, capped at
        retry_after_cap_s; unparseable values are ignored and counted.
        """
        st = self._in_flight_state(host, "on_finish")
        now = self._now()
        st.in_flight = False
        self._in_flight -= 1
        st.finished_at = now
        # See the module docstring: the server started this request no later than the
        # headers arrived, or, without headers, no later than now.
        st.anchor = st.headers_at if st.headers_at is not None else now
        st.headers_at = None
        self.backoff.on_finish(host, st, now, status, retry_after, transient)

    def _in_flight_state(self, host: str, what: str) -> HostPacing:
        st = self._hosts.get(host)
        if st is None or not st.in_flight:
            raise RuntimeError(f"politeness: {what} for {host!r} with no request in flight")
        return st

    # -- memory, persistence, stats --------------------------------------------------------

    def forget(self, host: str) -> bool:
        """Drop ``host``'s pacing state if nothing depends on it any more. True if dropped.

        Refused (False) while a request is in flight, while the host's next slot is still
        in the future, or while it is backed off (that memory protects a struggling
        server). Crawl-delay is dropped with the state: the owner re-applies
        them (from the robots cache) when the host becomes active again. The operator
        policy (override, pause) is kept.
        """
        st = self._hosts.get(host)
        if st is None:
            return True
        if st.in_flight or st.adaptive > 0 or self._now() < self.next_allowed(host):
            return False
        del self._hosts[host]
        self._stats["forgotten"] += 1
        return True

    def snapshot(self, *, protecting_only: bool = False) -> dict[str, Any]:
        """JSON-serialisable pacing state (see :meth:`PacingSnapshots.snapshot`)."""
        return self.snapshots.snapshot(protecting_only=protecting_only)

    def restore(self, state: dict[str, Any]) -> int:
        """Load a :meth:`snapshot` taken on any clock (see :meth:`PacingSnapshots.restore`)."""
        return self.snapshots.restore(state)

    def stats(self) -> dict[str, float]:
        """Counters: starts, early_starts, backoffs, recoveries, retry_after_applied/ignored,
        invalid_crawl_delays, forgotten, restore_errors; plus hosts and in_flight gauges."""
        own = self._stats
        return {
            "starts": own["starts"],
            "early_starts": own["early_starts"],
            **self.backoff.stats,
            "invalid_crawl_delays": own["invalid_crawl_delays"],
            "forgotten": own["forgotten"],
            "restore_errors": self.snapshots.restore_errors,
            "hosts": len(self._hosts),
            "in_flight": self._in_flight,
            "wait_s": self._wait_s,
        }

