"""What the shards of a crawl with regions say to each other about a host
(crawler.placement.handover): the :class:`Peers` protocol and the records it carries.

* :class:`HostState`: everything a shard knows of one host, handed to its next owner;
* :class:`Probe`: one timed GET of a host's robots.txt from one region (:func:`timed_get`);
* :class:`HostPlacement`: where a host is fetched from and why, what
  :meth:`crawler.placement.handover.Regions.placement_of` answers (``GET /hosts/{host}``);
  on the wire (:meth:`Peers.place`, a Ray call) it travels as :meth:`HostPlacement.to_dict`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Awaitable, Callable, Mapping, Protocol, get_args

from crawler.fetch.fetcher import FetchResult
from crawler.frontier.urlitem import UrlItem
from crawler.placement.regionpolicy import How


@dataclass
class HostState:
    """Everything a shard knows of one host, handed to its next owner."""

    host: str
    source: str
    rows: list[list[Any]]
    politeness: dict[str, Any]
    robots: list[dict[str, Any]]
    budget: dict[str, Any]
    placement: dict[str, Any] | None


@dataclass(frozen=True)
class Probe:
    """One timed request of a host's robots.txt from one region."""

    seconds: float | None  # to the response headers; None: no response
    status: int | None


async def timed_get(fetch: Callable[[str], Awaitable[FetchResult]], url: str) -> tuple[FetchResult, Probe]:
    """GET ``url``; the response and the time to its headers (the fetcher's own clock)."""
    res = await fetch(url)
    if res.status is None:
        return res, Probe(None, None)
    end = res.headers_at if res.headers_at is not None else res.finished_at
    return res, Probe(max(0.0, end - res.started_at), res.status)


@dataclass(frozen=True)
class HostPlacement:
    """Where a host is fetched from, how its placement was chosen, and its moves.

    ``region`` is the region of ``shard``, the shard that holds the host (a failed move
    leaves it where it was, whatever the policy chose; None: a shard of no region).
    ``how``, ``figures``, ``decided_at`` and ``moves`` are the policy's
    (crawler.placement.regionpolicy.Placement); ``moving_to`` is the shard a move under
    way hands the host to.
    """

    region: str | None
    how: How
    figures: dict[str, float | None] = field(default_factory=dict)
    decided_at: float = 0.0
    moves: int = 0
    shard: str = ""
    moving_to: str | None = None

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready, the shape the API and the Ray calls carry."""
        return {
            "region": self.region,
            "how": self.how,
            "figures": dict(self.figures),
            "decided_at": self.decided_at,
            "moves": self.moves,
            "shard": self.shard,
            "moving_to": self.moving_to,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> HostPlacement:
        """The record of a :meth:`to_dict` (another shard's answer); ValueError if it is none."""
        how = data["how"]
        if how not in get_args(How):
            raise ValueError(f"placement: how {how!r} is not one of {get_args(How)}")
        region, moving_to = data.get("region"), data.get("moving_to")
        return cls(
            region=None if region is None else str(region),
            how=how,
            figures={str(k): None if v is None else float(v) for k, v in dict(data.get("figures") or {}).items()},
            decided_at=float(data.get("decided_at", 0.0)),
            moves=int(data.get("moves", 0)),
            shard=str(data.get("shard", "")),
            moving_to=None if moving_to is None else str(moving_to),
        )


class Peers(Protocol):
    """The other shards, as a shard reaches them (in process, or by Ray actor handle)."""

    async def accept(self, shard: str, items: list[UrlItem]) -> int:
        """Deliver a batch durably to ``shard`` (its ShardApi.accept)."""

    async def adopt(self, shard: str, state: HostState) -> None:
        """Hand a host over to ``shard``; returns once the state is durable there."""

    async def probe(self, region: str, host: str, url: str) -> Probe:
        """GET ``url`` from a shard of ``region`` (its own source address), timed."""

    async def place(self, shard: str, host: str, region: str | None) -> HostPlacement:
        """The operator's rule for ``host`` at ``shard`` (its owner): placed there."""

    async def located(self, shard: str, host: str, region: str) -> None:
        """Tell ``host``'s home that the host now lives in ``region``."""
