"""Which shards a crawl has, in which region each runs, and which shard a host goes to.

Without regions (``runtime.regions: null``) there is one ring of shards
``shard-000 .. shard-NNN`` and a host's owner is the ring's choice, as always.

With regions every region has its own ring of ``runtime.shards`` shards, named
``shard-<region>-NNN`` so that the name alone says where a shard runs (the Ray runtime
places it on a node labelled ``region=<region>``). A host then has:

* a **home**: its shard on the default region's ring. Every URL of the host is sent
  there first (by the session's seeding and by every shard's link router), so that all
  senders agree on one place without knowing where the host lives now. The home keeps
  the host's current owner (crawler.placement.handover) and forwards.
* an **owner**: the shard that fetches it, on the ring of the region the host is placed
  in (crawler.placement.regionpolicy). Unplaced hosts are owned by their home.

Both are pure functions of the shard ids, computed the same way in every process
(crawler.placement.hashring: xxh3 positions, never Python's salted ``hash()``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Sequence

from crawler.errors import ConfigError
from crawler.placement.hashring import HashRing

__all__ = ["Topology", "shard_ids"]

_REGION_ID = re.compile(r"^shard-(?P<region>[a-z0-9](?:[a-z0-9-]*[a-z0-9])?)-(?P<n>\d{3,})$")


def shard_ids(n: int, regions: Sequence[str] | None) -> tuple[str, ...]:
    """The shard ids of a crawl: ``n`` shards, or ``n`` per region."""
    if not regions:
        return tuple(f"shard-{i:03d}" for i in range(n))
    return tuple(f"shard-{r}-{i:03d}" for r in regions for i in range(n))


@dataclass(frozen=True)
class Topology:
    """The shards of a crawl by region, and the rings that map hosts onto them.

    Args:
        ids: every shard id (:func:`shard_ids`).
        regions: the regions in order (None: no regions).
        default_region: where unplaced hosts live, and whose ring holds every host's home.
    """

    ids: tuple[str, ...]
    regions: tuple[str, ...] | None = None
    default_region: str | None = None
    _rings: dict[str | None, HashRing] = field(default_factory=dict, init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        by_region: dict[str | None, list[str]] = {}
        for sid in self.ids:
            by_region.setdefault(self.region_of_shard(sid), []).append(sid)
        if self.regions:
            missing = [r for r in self.regions if r not in by_region]
            if missing or set(by_region) - set(self.regions):
                raise ConfigError(f"runtime.regions {list(self.regions)} do not match the crawl's shards {list(self.ids)}")
            if self.default_region not in self.regions:
                raise ConfigError(f"placement.default_region {self.default_region!r} is not one of runtime.regions")
        for region, ids in by_region.items():
            self._rings[region] = HashRing(ids)

    @classmethod
    def of(cls, ids: Sequence[str], regions: Sequence[str] | None, default_region: str | None = None) -> "Topology":
        """The topology of ``ids``; ``default_region`` defaults to the first region."""
        regions = tuple(regions) if regions else None
        return cls(tuple(ids), regions, (default_region or regions[0]) if regions else None)

    def region_of_shard(self, shard_id: str) -> str | None:
        """The region a shard runs in (None without regions)."""
        if not self.regions:
            return None
        m = _REGION_ID.match(shard_id)
        if m is None:
            raise ConfigError(f"shard id {shard_id!r} names no region (expected shard-<region>-NNN)")
        return m["region"]

    def shards_in(self, region: str | None) -> list[str]:
        """The shards of one region (every shard without regions)."""
        return self._rings[region].nodes

    def home_of(self, host: str) -> str:
        """The shard every URL of ``host`` is sent to first (its owner without regions)."""
        return self._rings[self.default_region].node_for(host)

    def owner_in(self, region: str | None, host: str) -> str:
        """The shard that owns ``host`` while it is placed in ``region``."""
        ring = self._rings.get(region)
        if ring is None:
            raise ConfigError(f"region {region!r} is not one of runtime.regions {list(self.regions or ())}")
        return ring.node_for(host)
