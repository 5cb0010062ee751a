"""The runtime seam: what :class:`crawler.session.crawlsession.CrawlSession` needs from the place the
crawl's services run.

``crawler.session.inprocess.LocalRuntime`` runs every shard in this process;
``actors.rayruntime.RayRuntime`` runs them as Ray actors. Everything above the seam
(seeding, resume, stats, host policy, per-URL status, stop) is written once, in the
session, and the calls to the shards below it once, in crawler.session.shardcalls (both
runtimes subclass its ``ShardCalls`` and differ only in how a call reaches a shard), so
the two runtimes cannot drift apart.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

from crawler.config.settings import CrawlConfig
from crawler.frontier.urlitem import UrlItem
from crawler.policy.hostpolicy import HostTarget, PolicyChange
from crawler.engine.shardapi import HostView
from crawler.engine.status import ShardStatus
from crawler.placement.peers import HostPlacement
from crawler.frontier.store import UrlStatus


@dataclass(frozen=True)
class Plan:
    """What a runtime starts: the shards and seen shards of this crawl, and where state lives."""

    cfg: CrawlConfig
    shard_ids: tuple[str, ...]
    seen_shards: int
    state_dir: str | None
    seeds: tuple[str, ...]
    epoch: int | None = None  # the output lease's fencing epoch (None: no durable state)
    # The run took the output from a run that did not stop cleanly: that run's shards may
    # still have requests open (crawler.engine.assembly.unclean_hold_s).
    after_crash: bool = False
    crawl_id: str | None = None  # what state files are stamped with (crawler.recovery.stamps)


class Runtime(Protocol):
    """The services a session needs; see crawler.session.inprocess and actors.rayruntime."""

    def default_shards(self, cfg: CrawlConfig) -> tuple[int, int]:
        """(shards, seen shards) for a new crawl of ``cfg`` on this runtime."""

    async def start(self, plan: Plan) -> None:
        """Create the services and the shards; each shard resumes from its store."""

    async def heartbeat(self) -> None:
        """Tell every shard the driver is alive (shards of a silent driver stop fetching)."""

    async def ship_state(self, final: bool = False) -> None:
        """With a remote output: copy the seen sets, content index and budget to OUT/state
        (the shards copy their own stores); a crawl can then resume on another machine.
        A seen set or content index is copied when enough changed since its last copy
        (crawler.recovery.copyschedule), or with ``final`` (the end of a run) when anything did."""

    async def seen_check(self, urls: list[str]) -> list[bool]:
        """Mark URLs seen; True for the ones that were new."""

    async def seen_forget(self, urls: list[str]) -> int:
        """Undo the seen marks of URLs whose delivery failed (nothing is marked seen
        unless a shard holds it); returns how many marks were undone."""

    async def deliver(self, shard_id: str, items: list[UrlItem]) -> None:
        """Hand a batch to the shard that owns its hosts (queued durably on return)."""

    async def widen_scope(self, urls: list[str]) -> None:
        """Tell every shard about new seeds (scope ``host``/``domain`` grows with them)."""

    async def statuses(self) -> list[ShardStatus] | None:
        """Every shard's status, or None when there is no consistent view (a restart)."""

    async def set_host_policy(self, shard_id: str | None, change: PolicyChange) -> None:
        """Apply an operator policy on shard ``shard_id``, or on every shard (None)."""

    async def place(self, shard_id: str, host: str, region: str | None) -> HostPlacement:
        """An operator's region rule for ``host`` at its home shard (None: measure again);
        returns the host's placement once any move it caused is done."""

    async def url_status(self, shard_id: str | None, url: str | None, url_hash: str | None = None) -> UrlStatus | None:
        """The per-URL state (crawler.frontier.store.FrontierStore.url_status) on shard
        ``shard_id``, or the first shard that has it (None)."""

    async def url_for_hash(self, url_hash: str) -> str | None:
        """The URL with this public id, from whichever shard's store has it."""

    async def host_info(self, shard_id: str | None, target: HostTarget) -> list[HostView]:
        """Each asked shard's view of a host (crawler.engine.hostview)."""

    async def vet_seeds(self, shard_id: str, urls: list[str]) -> list[str | None]:
        """Why the owning shard would refuse each seed (robots, trap rules), or None."""

    async def seen_keys(self, index: int, after: int | None, limit: int) -> list[int]:
        """Up to ``limit`` marks of seen shard ``index`` above ``after``, ascending (the URL
        ledger's audit, crawler.session.ledgeraudit; until :meth:`close`)."""

    async def seen_forget_keys(self, index: int, keys: list[int]) -> int:
        """Undo marks of seen shard ``index`` by key (lost URLs no output names: a link to
        one admits it again); returns how many were undone."""

    async def held_keys(self, shard_id: str, after: int | None, limit: int) -> list[int]:
        """Up to ``limit`` URL keys shard ``shard_id`` holds above ``after``, ascending
        (crawler.frontier.store.AuditPages.keys; after :meth:`stop` too, until :meth:`close`)."""

    async def held_ids(self, shard_id: str, after: int | None, limit: int) -> list[tuple[int, int, str]]:
        """(url_hash, state, url) of shard ``shard_id``'s URLs above ``after`` by url_hash
        (crawler.frontier.store.AuditPages.ids; after :meth:`stop` too, until :meth:`close`)."""

    async def stop(self) -> list[ShardStatus]:
        """Stop every shard (rows flushed and acked); their final statuses, with ``store_counts``."""

    async def service_stats(self) -> dict[str, Any]:
        """``{"seen": {...}, "content": {...}}`` totals (after :meth:`stop`)."""

    async def close(self) -> None:
        """Release everything this runtime started."""
