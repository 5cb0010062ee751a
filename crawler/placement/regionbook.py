"""What a shard's side of regions (crawler.placement.handover.Regions) holds: its book of
placements, tombstones and moves (:class:`RegionBook`, kept across restarts), and the
per-host parts of the shard that a move carries (:class:`HostParts`)."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Awaitable, Callable

from crawler.frontier.frontier import Frontier
from crawler.frontier.store import FrontierStore
from crawler.placement.regionpolicy import RegionPlacement
from crawler.policy.hostbudget import HostBudget
from crawler.policy.politeness import Politeness
from crawler.robots import RobotsCache


@dataclass
class HostParts:
    """The per-host state of one shard that a handover moves."""

    store: FrontierStore
    frontier: Frontier
    politeness: Politeness
    robots: RobotsCache
    budget: HostBudget
    flush: Callable[[], Awaitable[None]]  # rows written and acked (the outbox)
    busy: Callable[[str], bool]  # one of the host's URLs is being processed
    adopted: Callable[[str], int]  # the host's refreshes a scan already passed (RefreshFeed)


@dataclass
class RegionBook:
    """What a shard's :class:`crawler.placement.handover.Regions` part keeps across restarts:
    its checkpoint part (crawler.engine.checkpoint). Built before the checkpointer, which the
    Regions part (built after both) saves through, so no part is wired to another after
    construction."""

    placement: RegionPlacement
    frontier: Frontier  # hosts that were moving stay held after a restore
    located: dict[str, str] = field(default_factory=dict)  # as home: host -> region (measured or moved)
    moved: dict[str, str] = field(default_factory=dict)  # tombstones: host -> shard it went to
    moving: dict[str, str] = field(default_factory=dict)  # moves under way: host -> target shard
    counters: Counter[str] = field(default_factory=Counter)

    def snapshot(self) -> dict[str, Any]:
        """The checkpoint part: placement, the home's table, tombstones and moves under way."""
        return {
            "placement": self.placement.snapshot(),
            "located": dict(self.located),
            "moved": dict(self.moved),
            "moving": dict(self.moving),
            "counters": dict(self.counters),
        }

    def restore(self, data: dict[str, Any]) -> None:
        """Load a :meth:`snapshot`; hosts that were moving stay held until
        :meth:`crawler.placement.handover.Regions.resume_moves` finishes their moves."""
        if data.get("placement"):
            self.placement.restore(data["placement"])
        self.located = {str(k): str(v) for k, v in dict(data.get("located") or {}).items()}
        self.moved = {str(k): str(v) for k, v in dict(data.get("moved") or {}).items()}
        self.moving = {str(k): str(v) for k, v in dict(data.get("moving") or {}).items()}
        self.counters.update({str(k): int(v) for k, v in dict(data.get("counters") or {}).items()})
        for host in self.moving:
            self.frontier.hold(host)
