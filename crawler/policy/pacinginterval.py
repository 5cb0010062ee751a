"""A host's effective interval (the formula of crawler.policy.politeness) and the
validated settings it is computed from.

Invariant kept: the effective interval is never below the floor (configured interval,
operator interval, robots Crawl-delay), and what backoff adds on top of the floor never
goes past ``max_interval_s``; the floor itself is never capped (politeness first).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from crawler.policy.hostpolicy import PacingOverrides
from crawler.errors import ConfigError
from crawler.policy.pacingstate import HostPacing

__all__ = ["IntervalRule", "PacingSettings"]


@dataclass(frozen=True, slots=True)
class PacingSettings:
    """The numbers of crawler.policy.politeness.Politeness, checked (see :meth:`checked`)."""

    interval_s: float
    max_interval_s: float
    backoff_factor: float
    recovery_factor: float
    recovery_successes: int
    retry_after_cap_s: float

    @classmethod
    def checked(
        cls,
        interval_s: object,
        max_interval_s: object,
        backoff_factor: object,
        recovery_factor: object,
        recovery_successes: object,
        retry_after_cap_s: object,
    ) -> PacingSettings:
        """The settings as finite floats, or ConfigError naming the first bad one
        (``politeness <name>: <rule>, got <value>``)."""
        iv = _number("interval_s", interval_s)
        top = _number("max_interval_s", max_interval_s)
        backoff = _number("backoff_factor", backoff_factor)
        recovery = _number("recovery_factor", recovery_factor)
        cap = _number("retry_after_cap_s", retry_after_cap_s)
        _check(iv >= 0, "interval_s", "must be >= 0 seconds", iv)
        _check(top > 0, "max_interval_s", "must be > 0 seconds", top)
        _check(top >= iv, "max_interval_s", f"must be >= interval_s ({iv})", top)
        _check(backoff >= 1.0, "backoff_factor", "must be >= 1.0", backoff)
        _check(0.0 < recovery <= 1.0, "recovery_factor", "must be in (0, 1]", recovery)
        _check(cap >= 0, "retry_after_cap_s", "must be >= 0 seconds", cap)
        if not (isinstance(recovery_successes, int) and recovery_successes >= 1):
            raise ConfigError(f"politeness recovery_successes: must be an integer >= 1, got {recovery_successes!r}")
        return cls(iv, top, backoff, recovery, recovery_successes, cap)


class IntervalRule:
    """The effective interval of a host::

        floor     = max(configured interval, operator interval, robots Crawl-delay)
        effective = max(floor, min(max(floor, adaptive), max_interval_s))

    An operator interval below the configured one is ignored (an API call must not be
    able to turn politeness off). It reads the operator policy from ``overrides`` and
    Crawl-delay and the adaptive interval from the host's :class:`HostPacing`.
    """

    __slots__ = ("_interval_s", "_max_interval_s", "_lookup")

    def __init__(self, settings: PacingSettings, overrides: PacingOverrides) -> None:
        self._interval_s = settings.interval_s
        self._max_interval_s = settings.max_interval_s
        self._lookup = overrides.lookup

    def floor(self, host: str, st: HostPacing | None) -> float:
        """The host's floor: what no backoff recovery goes below."""
        pol = self._lookup(host)
        base = self._interval_s if pol is None or pol[0] is None or pol[0] < self._interval_s else pol[0]
        if st is not None and st.crawl_delay > base:
            return st.crawl_delay
        return base

    def interval(self, host: str, st: HostPacing | None) -> float:
        """The host's effective minimum time between request starts, in seconds."""
        floor = self.floor(host, st)
        if st is None:
            return floor
        slow = st.adaptive if st.adaptive > floor else floor
        if slow <= floor:
            return floor
        # What we add on top of the floor is capped; the floor itself is not.
        return slow if slow < self._max_interval_s else max(floor, self._max_interval_s)


def _number(name: str, value: object) -> float:
    """``value`` as a finite float, or ConfigError naming the setting."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise ConfigError(f"politeness {name}: must be a finite number, got {value!r}")
    return float(value)


def _check(ok: bool, name: str, rule: str, value: object) -> None:
    if not ok:
        raise ConfigError(f"politeness {name}: {rule}, got {value!r}")
