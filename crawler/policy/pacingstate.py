"""Per-host pacing state (:class:`HostPacing`) and its persistence (:class:`PacingSnapshots`):
the checkpoint snapshot of every host and one host's state handed over to another shard.

Invariant kept: a snapshot stores times relative to the moment it was taken, so it loads
on any clock and every wait starts again from the load; the real gap between two
requests to a host can only grow across a restart or a handover, never shrink.
"""

from __future__ import annotations

import logging
import math
from typing import Any, Callable

from crawler.policy.hostpolicy import PacingOverrides

__all__ = ["HostPacing", "PacingSnapshots"]

log = logging.getLogger(__name__)


class HostPacing:
    """Mutable pacing state of one host (crawler.policy.politeness.Politeness's table)."""

    __slots__ = (
        "in_flight",
        "headers_at",
        "anchor",
        "finished_at",
        "not_before",
        "crawl_delay",
        "adaptive",
        "successes",
    )

    def __init__(self) -> None:
        self.in_flight = False
        self.headers_at: float | None = None  # of the request in flight
        # Latest instant the server can have started our last request: its headers time,
        # or its finish time when no headers arrived. None: no request seen yet.
        self.anchor: float | None = None
        self.finished_at = 0.0
        self.not_before = 0.0  # Retry-After
        self.crawl_delay = 0.0  # robots floor; 0 = none
        self.adaptive = 0.0  # backoff interval; 0 = not backed off
        self.successes = 0  # consecutive, since the last widening or narrowing


class PacingSnapshots:
    """Per-host pacing state written out and read back: the checkpoint snapshot of every
    host (:meth:`snapshot` / :meth:`restore`) and one host's state handed to the shard
    that takes the host over (:meth:`export_host` / :meth:`adopt_host` / :meth:`drop_host`).

    It works on the :class:`~crawler.policy.politeness.Politeness` object's own host table
    and operator overrides (shared, not copied). Times are written relative to now, so a
    snapshot taken on one clock loads on any other and every wait starts again from the load.
    """

    def __init__(
        self,
        hosts: dict[str, HostPacing],
        overrides: PacingOverrides,
        now: Callable[[], float],
        max_interval_s: float,
    ) -> None:
        self._hosts = hosts
        self.overrides = overrides
        self._now = now
        self._max_interval_s = max_interval_s
        self.restore_errors = 0  # malformed or refused host entries skipped by restore()

    def export_host(self, host: str) -> dict[str, Any]:
        """One host's pacing and operator policy, in :meth:`snapshot`'s form, to hand
        over with the host (crawler.placement.handover); ValueError while a request is in flight
        (the next owner must not start one before this one ended)."""
        st = self._hosts.get(host)
        if st is not None and st.in_flight:
            raise ValueError(f"politeness: {host!r} has a request in flight")
        entry = self._entry(st, self._now()) if st is not None else None
        iv, paused = self.overrides.override(host)
        return {"host": entry, "interval_s": iv, "paused": paused}

    def adopt_host(self, host: str, data: dict[str, Any]) -> None:
        """Take over a host's pacing from :meth:`export_host` (taken on any clock: every
        wait starts again from now, so the gap between two requests can only grow)."""
        if data.get("host") is not None:
            self.restore({"hosts": {host: data["host"]}})
        if data.get("interval_s") is not None or data.get("paused") is not None:
            self.overrides.set(host, data.get("interval_s"), data.get("paused"))

    def drop_host(self, host: str) -> None:
        """Forget a host handed over to another shard: its pacing and its per-key policy."""
        st = self._hosts.pop(host, None)
        if st is not None and st.in_flight:
            self._hosts[host] = st
            raise ValueError(f"politeness: {host!r} has a request in flight")
        self.overrides.clear(host)

    def _entry(self, st: HostPacing, now: float) -> dict[str, Any]:
        anchor_age: float | None
        finished_age: float | None
        if st.in_flight:
            anchor_age, finished_age = 0.0, 0.0
        elif st.anchor is None:
            anchor_age, finished_age = None, None
        else:
            anchor_age, finished_age = now - st.anchor, now - st.finished_at
        return {
            "anchor_age_s": anchor_age,
            "finished_age_s": finished_age,
            "not_before_in_s": max(0.0, st.not_before - now),
            "crawl_delay": st.crawl_delay,
            "adaptive": st.adaptive,
            "successes": st.successes,
        }

    def snapshot(self, *, protecting_only: bool = False) -> dict[str, Any]:
        """JSON-serialisable state; times are stored as ages / waits relative to now.

        ``protecting_only`` keeps only the hosts whose state protects them after a
        restart (backed off, under a Retry-After or a Crawl-delay) and every
        operator policy: what a checkpoint must not forget, at a size that does not grow
        with every host ever contacted.

        ``now()`` is monotonic and its origin differs between processes, so absolute times
        would be meaningless after a restart. Restoring relative times on a new clock
        makes every wait start again from the restore: the real gap between requests can
        only grow (downtime adds to it), never shrink. A host in flight is saved as if its
        request finished at the snapshot without headers (the conservative case).
        """
        now = self._now()
        hosts = {}
        for host, st in self._hosts.items():
            if protecting_only and not (
                st.adaptive > 0 or st.not_before > now or st.crawl_delay > 0
            ):
                continue
            hosts[host] = self._entry(st, now)
        return {"version": 1, "hosts": hosts, **self.overrides.snapshot()}

    def restore(self, state: dict[str, Any]) -> int:
        """Load a :meth:`snapshot` taken on any clock. Returns the number of hosts loaded.

        No host is in flight afterwards. A malformed host entry is skipped and counted in
        ``restore_errors`` (``Politeness.stats()["restore_errors"]``).
        """
        now = self._now()
        loaded = 0
        for host, d in dict(state.get("hosts", {})).items():
            try:
                st = HostPacing()
                if d["anchor_age_s"] is not None:
                    st.anchor = now - max(0.0, float(d["anchor_age_s"]))
                    st.finished_at = now - max(0.0, float(d["finished_age_s"]))
                st.not_before = now + max(0.0, float(d["not_before_in_s"]))
                st.crawl_delay = max(0.0, float(d["crawl_delay"]))
                st.adaptive = min(max(0.0, float(d["adaptive"])), self._max_interval_s)
                st.successes = int(d["successes"])
                values = (st.not_before, st.crawl_delay, st.adaptive, st.finished_at)
                if not all(math.isfinite(v) for v in values):
                    raise ValueError("non-finite value")
            except (KeyError, TypeError, ValueError) as exc:
                log.warning("politeness: skipping malformed snapshot entry for %r: %s", host, exc)
                self.restore_errors += 1
                continue
            old = self._hosts.get(host)
            if old is not None and old.in_flight:
                self.restore_errors += 1  # live state wins over a snapshot
                continue
            self._hosts[str(host)] = st
            loaded += 1
        before = self.overrides.restore_errors
        self.overrides.restore(state)
        self.restore_errors += self.overrides.restore_errors - before
        return loaded
