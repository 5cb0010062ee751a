"""What a host's answers add to its pacing: the adaptive backoff interval (widened on
429, 5xx and failures, narrowed back after a run of successes) and ``Retry-After``
(RFC 9110 10.2.3, RFC 6585 4).

Invariant kept: what this adds never exceeds the caps it is given (``max_interval_s``
for the adaptive interval, ``retry_after_cap_s`` for a Retry-After), and it never lowers
a host below its floor (crawler.policy.politeness.Politeness owns the floor).
"""

from __future__ import annotations

import email.utils
from datetime import timezone
from typing import Callable

from crawler.policy.pacinginterval import PacingSettings
from crawler.policy.pacingstate import HostPacing

__all__ = ["Backoff", "parse_retry_after"]

# Longest Retry-After delta-seconds we read as a number (larger is capped by the caller
# anyway); also keeps int() away from enormous digit strings.
_MAX_DELTA_DIGITS = 12


def parse_retry_after(value: str | None, now_wall: float) -> float | None:
    """Seconds to wait according to a ``Retry-After`` header value (RFC 9110 10.2.3).

    The value is either delta-seconds (``"120"``) or an HTTP-date
    (``"Sun, 06 Nov 1994 08:49:37 GMT"``; the obsolete RFC 850 and asctime forms are
    accepted too), compared with ``now_wall`` (UTC epoch seconds). A date in the past
    means 0. Garbage (negative or fractional numbers, unparseable dates, empty) gives None.
    The result is not capped; :class:`Backoff` caps it.
    """
    if value is None:
        return None
    v = value.strip()
    if not v:
        return None
    if v.isascii() and v.isdigit():
        if len(v) > _MAX_DELTA_DIGITS:
            return float(10**_MAX_DELTA_DIGITS)
        return float(int(v))
    try:
        when = email.utils.parsedate_to_datetime(v)
    except (TypeError, ValueError, IndexError, OverflowError):
        return None
    if when is None:  # older Pythons return None instead of raising
        return None
    if when.tzinfo is None:  # HTTP-date is always GMT (RFC 9110 5.6.7)
        when = when.replace(tzinfo=timezone.utc)
    try:
        delta = when.timestamp() - now_wall
    except (OverflowError, ValueError, OSError):
        return None
    return max(0.0, delta)


class Backoff:
    """The adaptive interval and Retry-After of each host, updated as its requests end.

    Args:
        settings: ``max_interval_s`` caps the adaptive interval; on 429/5xx/transient
            failure it is multiplied by ``backoff_factor``; after ``recovery_successes``
            consecutive successes it is multiplied by ``recovery_factor`` (< 1 narrows)
            until it is back to its floor; a Retry-After is honoured up to
            ``retry_after_cap_s``.
        floor: the host's floor interval (configured, operator, Crawl-delay) for its
            state; a backoff starts from it and a recovery ends at it.
        wall: UTC epoch seconds (for HTTP-date Retry-After values).
    """

    def __init__(
        self, settings: PacingSettings, floor: Callable[[str, HostPacing], float], wall: Callable[[], float]
    ) -> None:
        self.max_interval_s = settings.max_interval_s
        self.backoff_factor = settings.backoff_factor
        self.recovery_factor = settings.recovery_factor
        self.recovery_successes = settings.recovery_successes
        self.retry_after_cap_s = settings.retry_after_cap_s
        self._floor = floor
        self._wall = wall
        self.stats = dict.fromkeys(("backoffs", "recoveries", "retry_after_applied", "retry_after_ignored"), 0)

    def on_finish(
        self, host: str, st: HostPacing, now: float, status: int | None, retry_after: str | None, transient: bool
    ) -> None:
        """Widen or narrow ``host``'s adaptive interval after a request that ended ``now``,
        and apply its Retry-After (see crawler.policy.politeness.Politeness.on_finish)."""
        failed = transient or status is None or status == 429 or status >= 500
        if failed:
            floor = self._floor(host, st)
            # A host configured with no interval backs off from 1 s, not from 0.
            current = max(st.adaptive, floor) or 1.0
            st.adaptive = min(current * self.backoff_factor, self.max_interval_s)
            st.successes = 0
            self.stats["backoffs"] += 1
        elif st.adaptive > 0:
            st.successes += 1
            if st.successes >= self.recovery_successes:
                st.successes = 0
                st.adaptive *= self.recovery_factor
                if st.adaptive <= self._floor(host, st):
                    st.adaptive = 0.0  # back at the floor: fully recovered
                self.stats["recoveries"] += 1

        # RFC 9110 10.2.3 / RFC 6585 4: Retry-After on 503 and 429 says when to come back.
        if retry_after is not None and status is not None and (status == 429 or status >= 500):
            delay = parse_retry_after(retry_after, self._wall())
            if delay is None:
                self.stats["retry_after_ignored"] += 1
            else:
                st.not_before = max(st.not_before, now + min(delay, self.retry_after_cap_s))
                self.stats["retry_after_applied"] += 1

    @staticmethod
    def backed_off(hosts: dict[str, HostPacing], now: float) -> int:
        """Hosts slowed by backoff or a Retry-After at ``now``."""
        return sum(1 for st in hosts.values() if st.adaptive > 0 or st.not_before > now)
