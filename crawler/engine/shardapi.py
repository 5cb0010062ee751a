"""What a shard answers, declared once: :class:`ShardApi` and the records it returns.

Everything outside a shard -- the session (crawler.session), the control API, other
shards (links, region moves) -- reaches it through these methods and nothing else; no
one reads a shard's parts. The in-process runtime hands out the shard itself
(crawler.engine.shard.Shard); the Ray runtime a typed proxy whose methods call the actor
(actors/shardproxy.py); the fault simulator one whose methods call its simulated actor
(crawler.testing.sim.services). One name per operation, the same in every layer.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Mapping, Protocol

from crawler.policy.hostpolicy import HostTarget, PolicyChange
from crawler.engine.status import ShardStatus
from crawler.frontier.store import UrlStatus
from crawler.frontier.urlitem import UrlItem
from crawler.placement.peers import HostState, HostPlacement, Probe


@dataclass(frozen=True)
class HostPolicyView:
    """An operator's policy in force (crawler.policy.hostpolicy): None/False when unset."""

    max_rps: float | None = None
    paused: bool = False
    max_pages: int | None = None


@dataclass(frozen=True)
class BackoffView:
    """Why a host is slower than its interval: adaptive backoff, Retry-After, Crawl-delay."""

    interval_s: float | None
    retry_after_s: float | None
    crawl_delay_s: float | None


@dataclass(frozen=True)
class HostKeyView:
    """One politeness key (``host`` or ``host:port``) as its shard sees it."""

    key: str
    shard: str
    policy: HostPolicyView
    queued: int
    in_flight: bool
    next_allowed_in_s: float | None
    interval_s: float
    pages_left: int | None
    robots: tuple[Mapping[str, Any], ...]
    backoff: BackoffView
    #: Where the host is fetched from, and why (crawler.placement.handover.Regions.describe);
    #: None without regions.
    placement: HostPlacement | None = None

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready (GET /hosts/{host}); ``placement`` only with regions."""
        out = dataclasses.asdict(self)
        out["robots"] = [dict(r) for r in self.robots]
        del out["placement"]
        if self.placement is not None:
            out["placement"] = self.placement.to_dict()
        return out


@dataclass(frozen=True)
class HostView:
    """What one shard knows of a host (GET /hosts/{host}, crawler.engine.hostview)."""

    hostname_policy: HostPolicyView
    keys: tuple[HostKeyView, ...]


class ShardApi(Protocol):
    """One shard, as its runtime, its driver and its peers call it."""

    async def accept(self, items: list[UrlItem]) -> int:
        """A batch of novel URLs whose hosts this shard owns (or, with regions, passed on
        to their owners), durable -- in OUT too, for a remote output -- before this returns;
        returns how many were queued or passed on."""

    async def adopt(self, state: HostState) -> int:
        """A host handed over by another shard (crawler.placement.handover), durable on return."""

    async def widen_scope(self, urls: list[str]) -> None:
        """Seeds added while the crawl runs: scope ``host``/``domain`` grows with them."""

    async def set_host_policy(self, change: PolicyChange) -> None:
        """An operator's policy for a host (crawler.policy.hostpolicy), durable on return;
        forwarded to the host's owner when that is another shard (regions)."""

    async def url_status(self, url: str | None, url_hash: str | None = None) -> UrlStatus | None:
        """The store's state of one URL (crawler.frontier.store.FrontierStore.url_status)."""

    async def url_for_hash(self, url_hash: str) -> str | None:
        """The URL with this public id, if this shard's store has it."""

    async def host_info(self, target: HostTarget) -> HostView:
        """What this shard (or, for a moved host, its owner) knows of a host."""

    async def vet_seeds(self, urls: list[str]) -> list[str | None]:
        """Why this shard would refuse each seed (robots, trap rules), or None."""

    async def place(self, host: str, region: str | None) -> HostPlacement:
        """An operator's region rule for ``host`` (None: measure again) at its home shard;
        the placement once any move it caused is done."""

    async def located(self, host: str, region: str) -> None:
        """As ``host``'s home: it now lives in ``region``."""

    async def probe(self, url: str) -> Probe:
        """Time a GET of ``url`` from this shard's node (its region, its source address)
        for another shard, which holds the host's politeness slot meanwhile."""

    async def held_keys(self, after: int | None, limit: int) -> list[int]:
        """A page of the URL keys this shard's store holds (the URL ledger's audit)."""

    async def held_ids(self, after: int | None, limit: int) -> list[tuple[int, int, str]]:
        """A page of (url_hash, state, url) this shard's store holds (the ledger's audit)."""

    async def status(self) -> ShardStatus:
        """This shard's numbers now (progress, termination)."""

    async def shutdown(self) -> ShardStatus:
        """Stop fetching, finish or cancel what is in flight, flush and ack rows, close;
        the final status, with the store's counts (crawler.session.ledger)."""
