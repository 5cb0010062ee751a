"""crawler.robots.cache.RobotsCache's rules written out and read back: every cached
origin for a checkpoint, some origins for a host handed over to another shard
(crawler.placement.handover), one origin's verdict for the journal
(crawler.engine.admission).

Invariant kept: times are stored relative to the snapshot (``age_s``, ``ttl_left_s``) with
the wall time it was taken, and a restore ages every entry by the downtime, so restored
rules never live longer than they would have without the restart.
"""

from __future__ import annotations

import logging
from typing import Any, Callable, Protocol, Sequence

from crawler.robots.rules import _KINDS, ALLOW_ALL, DISALLOW_ALL, PARSED, RobotsRules

__all__ = ["RobotsSnapshots"]

log = logging.getLogger(__name__)


class _Clock(Protocol):
    """What a snapshot needs of crawler.clock.Clock (``wall()`` is used when present)."""

    def now(self) -> float: ...


# Rules of one origin from its robots.txt text: (text, status, fetched_at, expires_at).
Rebuild = Callable[[str, int | None, float, float], RobotsRules]


class RobotsSnapshots:
    """Snapshots of a RobotsCache's entries (shared, not copied).

    Args:
        entries: the cache's origin -> rules table.
        clock: ``now()`` monotonic seconds; ``wall()`` (if it has one) dates a snapshot.
        rebuild: parses a parsed entry's text back into rules (counted as the cache counts).
        store: puts rules into the cache (evicting the oldest beyond its size).
        stats: the cache's counters (rules by kind, ``restore_errors``).
    """

    def __init__(
        self,
        entries: dict[str, RobotsRules],
        clock: _Clock,
        rebuild: Rebuild,
        store: Callable[[str, RobotsRules], None],
        stats: dict[str, int],
    ) -> None:
        self._entries = entries
        self._clock = clock
        self._now = clock.now
        self._rebuild = rebuild
        self._store = store
        self._stats = stats

    def snapshot(self, origins: Sequence[str] | None = None) -> list[dict[str, Any]]:
        """JSON-serialisable state of every cached origin (expired ones included), or of
        ``origins`` only (a host handed over to another shard: crawler.placement.handover).

        Times are stored relative to now (``age_s``, ``ttl_left_s``) because ``now()`` is
        a monotonic clock whose origin differs between processes; ``saved_wall`` lets
        :meth:`restore` age the entries by the downtime.
        """
        now = self._now()
        wall = _wall(self._clock)
        return [
            _snapshot_entry(origin, r, now, wall)
            for origin, r in self._entries.items()
            if origins is None or origin in origins
        ]

    def entry(self, origin: str) -> dict[str, Any] | None:
        """:meth:`snapshot` of one origin (None if nothing is cached)."""
        rules = self._entries.get(origin)
        return None if rules is None else _snapshot_entry(origin, rules, self._now(), _wall(self._clock))

    def restore(self, entries: list[dict[str, Any]]) -> int:
        """Load a :meth:`snapshot` (possibly from another process). Returns entries loaded.

        Time that passed between snapshot and restore (by the wall clock) is subtracted
        from every entry's remaining TTL. A malformed entry is skipped and counted in
        ``restore_errors``: losing it only means refetching that robots.txt.
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
                rules = self._rebuild(entry["text"], status, fetched_at, expires_at)
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


def _snapshot_entry(origin: str, r: RobotsRules, now: float, wall: float | None) -> dict[str, Any]:
    return {
        "origin": origin,
        "kind": r.kind,
        "source_status": r.source_status,
        "age_s": now - r.fetched_at,
        "ttl_left_s": r.expires_at - now,
        "text": r._text,
        "unreachable": r.unreachable,
        "saved_wall": wall,
    }


def _wall(clock: object) -> float | None:
    wall = getattr(clock, "wall", None)
    return float(wall()) if callable(wall) else None
